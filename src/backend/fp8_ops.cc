// Backend's FP8 defaults (backend.h, Fp8DenseScaling): the round trip of an operand through its FP8 format
// and the step end's scale update, on the host, for the CPU backends. They define what FP8 training
// computes; the CUDA backend runs the same rules in kernels and its GEMMs on FP8 codes, and is tested
// against these.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/backend.h"
#include "backend/reference/reference_common.h"
#include "core/status.h"

namespace dlbench {
namespace {

void check_round_trip_dtype(const Tensor& t) {
  DLB_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f16 || t.dtype() == DType::bf16,
            "fp8_round_trip: {} must be f32, f16 or bf16", t.describe());
}

}  // namespace

void Backend::fp8_round_trip(const Tensor& x, Fp8Format format, const float* scale, float* amax, Tensor& y) {
  DLB_CHECK(device().kind == DeviceKind::cpu, "fp8_round_trip is not implemented on backend {}", name());
  DLB_CHECK(x.numel() == y.numel(), "fp8_round_trip: x is {}, y {}", x.describe(), y.describe());
  check_round_trip_dtype(x);
  check_round_trip_dtype(y);
  const float s = *scale, inverse = 1.f / s;
  float largest = amax ? *amax : 0.f;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float v = static_cast<float>(reference::load_element(x, i));
    if (std::fabs(v) > largest) largest = std::fabs(v);  // a NaN compares false: ignored
    // The product is exact (s is a power of two), and so is the FP8 value times the inverse in any of
    // the output dtypes.
    reference::store_element(
        y, i, static_cast<double>(fp8_to_float(float_to_fp8(v * s, format), format) * inverse));
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
    state.inverse_scale[i * kFp8InverseScaleStride] = 1.f / state.scale[i];
  }
}

}  // namespace dlbench
