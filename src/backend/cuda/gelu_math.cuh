// GELU in its tanh form (GPT-2's), as the reference (reference_gelu.cc) has it, for the kernels that apply
// it (gelu.cu, and fp8_quantize.cu where a quantization takes it on the way):
//   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// tanh, not the approximate tanh.approx instruction: its 2^-11 relative error would show in an f32 test
// against the reference.
#pragma once

namespace dlbench::cuda::detail {

template <typename A>
struct GeluMath {
  static constexpr A kSqrt2OverPi = A(0.7978845608028654);
  static constexpr A kCubic = A(0.044715);
  static __device__ __forceinline__ A tanh_u(A x) { return tanh(kSqrt2OverPi * (x + kCubic * x * x * x)); }
  static __device__ __forceinline__ A value(A x) { return A(0.5) * x * (A(1) + tanh_u(x)); }
  static __device__ __forceinline__ A derivative(A x) {
    const A t = tanh_u(x);
    return A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * kSqrt2OverPi * (A(1) + A(3) * kCubic * x * x);
  }
};

}  // namespace dlbench::cuda::detail
