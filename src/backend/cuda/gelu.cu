// GELU in its tanh form (GPT-2's), forward and backward (gelu_math.cuh), elementwise on the vectorised
// driver, in f32 for f16/bf16 (f64 for f64).
#include "backend/cuda/gelu_math.cuh"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace dlbench::cuda {
namespace {

using namespace detail;

template <typename T>
struct GeluForwardOp {
  const T* x;
  T* y;
  template <int W>
  __device__ void apply(int64_t e) const {
    Vec<T, W> v = load_vec<W>(x + e);
#pragma unroll
    for (int j = 0; j < W; ++j) v.v[j] = narrow<T>(GeluMath<Acc<T>>::value(widen(v.v[j])));
    store_vec<W>(y + e, v);
  }
};

template <typename T>
struct GeluBackwardOp {
  const T* x;
  const T* dy;
  T* dx;
  template <int W>
  __device__ void apply(int64_t e) const {
    const Vec<T, W> in = load_vec<W>(x + e), grad = load_vec<W>(dy + e);
    Vec<T, W> out;
#pragma unroll
    for (int j = 0; j < W; ++j)
      out.v[j] = narrow<T>(widen(grad.v[j]) * GeluMath<Acc<T>>::derivative(widen(in.v[j])));
    store_vec<W>(dx + e, out);
  }
};

}  // namespace

void gelu_forward(const void* x, void* y, DType dtype, int64_t n, cudaStream_t stream) {
  DLB_KERNEL_REQUIRE(n >= 0, "gelu_forward", "the element count is negative");
  dispatch_float(dtype, "gelu_forward", [&](auto tag) {
    using T = decltype(tag);
    launch_elementwise<kVec16<T>>(n, aligned(x, 16) && aligned(y, 16),
                                  GeluForwardOp<T>{static_cast<const T*>(x), static_cast<T*>(y)}, stream);
  });
}

void gelu_backward(const void* x, const void* dy, void* dx, DType dtype, int64_t n, cudaStream_t stream) {
  DLB_KERNEL_REQUIRE(n >= 0, "gelu_backward", "the element count is negative");
  dispatch_float(dtype, "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    launch_elementwise<kVec16<T>>(
        n, aligned(x, 16) && aligned(dy, 16) && aligned(dx, 16),
        GeluBackwardOp<T>{static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<T*>(dx)}, stream);
  });
}

}  // namespace dlbench::cuda
