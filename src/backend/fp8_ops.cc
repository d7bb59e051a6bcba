// Backend's FP8 defaults (backend.h, Fp8DenseScaling): the round trip of an operand through its FP8 format
// and the step end's scale update, on the host, for the CPU backends. They define what FP8 training
// computes; the CUDA backend runs the same rules in kernels and its GEMMs on FP8 codes, and is tested
// against these.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/backend.h"
#include "backend/reference/half_float.h"
#include "core/status.h"

namespace dlbench {
namespace {

double host_value(const Tensor& t, int64_t i) {
  const void* base = t.data();
  switch (t.dtype()) {
    case DType::f32:
      return static_cast<const float*>(base)[i];
    case DType::f16:
      return f16_to_double(static_cast<const uint16_t*>(base)[i]);
    case DType::bf16:
      return bf16_to_double(static_cast<const uint16_t*>(base)[i]);
    default:
      DLB_CHECK(false, "fp8_round_trip: {} must be f32, f16 or bf16", t.describe());
  }
  return 0;
}

void set_host_value(Tensor& t, int64_t i, double v) {
  void* base = t.data();
  switch (t.dtype()) {
    case DType::f32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      return;
    case DType::f16:
      static_cast<uint16_t*>(base)[i] = f16_from_double(v);
      return;
    case DType::bf16:
      static_cast<uint16_t*>(base)[i] = bf16_from_double(v);
      return;
    default:
      DLB_CHECK(false, "fp8_round_trip: {} must be f32, f16 or bf16", t.describe());
  }
}

}  // namespace

void Backend::fp8_round_trip(const Tensor& x, Fp8Format format, const float* scale, float* amax, Tensor& y) {
  DLB_CHECK(device().kind == DeviceKind::cpu, "fp8_round_trip is not implemented on backend {}", name());
  DLB_CHECK(x.numel() == y.numel(), "fp8_round_trip: x is {}, y {}", x.describe(), y.describe());
  const float s = *scale, inverse = 1.f / s;
  float largest = amax ? *amax : 0.f;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float v = static_cast<float>(host_value(x, i));
    if (std::fabs(v) > largest) largest = std::fabs(v);  // a NaN compares false: ignored
    // The product is exact (s is a power of two), and so is the FP8 value times the inverse in any of
    // the output dtypes.
    set_host_value(y, i, static_cast<double>(fp8_to_float(float_to_fp8(v * s, format), format) * inverse));
  }
  if (amax) *amax = largest;
}

void Backend::update_fp8_scales(const Fp8ScalingState& state) {
  DLB_CHECK(device().kind == DeviceKind::cpu, "update_fp8_scales is not implemented on backend {}", name());
  DLB_CHECK(state.history_length >= 1, "update_fp8_scales: an empty history");
  for (int i = 0; i < state.count; ++i) {
    float* history = state.history + static_cast<ptrdiff_t>(i) * state.history_length;
    std::copy_backward(history, history + state.history_length - 1, history + state.history_length);
    history[0] = state.amax[i];
    state.amax[i] = 0.f;
    float largest = 0.f;
    for (int j = 0; j < state.history_length; ++j) largest = std::fmax(largest, history[j]);
    state.scale[i] = fp8_scale_from_amax(largest, state.format[i], state.margin, state.scale[i]);
    state.inverse_scale[i] = 1.f / state.scale[i];
  }
}

}  // namespace dlbench
