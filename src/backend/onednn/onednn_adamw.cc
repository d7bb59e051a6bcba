// AdamW (PyTorch's torch.optim.AdamW) with clipping by the global gradient norm, and the sum of squares
// that norm is made of, over the flat f32 buffers (oneDNN has no optimizer: these are OpenMP loops that
// vectorise). The formulas are the reference's (reference_adamw.cc); here they run in f32, with the step's
// scalars (bias corrections, clip factor) worked out once in double.
#include <algorithm>
#include <cmath>

#include "backend/onednn/onednn_common.h"

namespace dlbench {
namespace onednn {

void OneDnnBackend::sum_of_squares(const Tensor& x, Tensor& out, Accumulate accumulate) {
  const char* op = "sum_of_squares";
  require_f32(x, op, "x");
  require_f32(out, op, "out");
  DLB_CHECK(out.numel() == 1, "{}: out is {}, expected [1]", op, out.describe());
  const float* p = x.ptr<float>();
  const int64_t n = x.numel();
  // Each square in double, summed in double: a norm over 10^8 gradients loses nothing to the order.
  double sum = 0;
#pragma omp parallel for simd schedule(static) num_threads(threads_) reduction(+ : sum) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(p[i]) * static_cast<double>(p[i]);
  float& result = out.ptr<float>()[0];
  result = static_cast<float>(accumulate == Accumulate::add ? double(result) + sum : sum);
}

void OneDnnBackend::adamw_update(Tensor& params, const Tensor& grads, Tensor& m, Tensor& v,
                                 std::span<const ParamSegment> segments, const AdamWStep& step,
                                 const StepScalars* scalars, const ComputeCopies& copies) {
  const char* op = "adamw_update";
  DLB_CHECK(!copies.any(), "{}: the oneDNN backend trains in FP32 and keeps no compute copies", op);
  require_f32(params, op, "params");
  require_f32(grads, op, "grads");
  require_f32(m, op, "m");
  require_f32(v, op, "v");
  DLB_CHECK(grads.numel() == params.numel() && m.numel() == params.numel() && v.numel() == params.numel(),
            "{}: params {} grads {} m {} v {} differ in size", op, params.describe(), grads.describe(),
            m.describe(), v.describe());
  DLB_CHECK(step.step_count || step.step >= 1, "{}: step {} must count from 1", op, step.step);
  DLB_CHECK(step.max_grad_norm >= 0, "{}: max_grad_norm {} is negative", op, step.max_grad_norm);
  DLB_CHECK(step.max_grad_norm == 0 || step.grad_norm_squared,
            "{}: clipping to {} needs grad_norm_squared (the gradients' sum of squares)", op,
            step.max_grad_norm);
  for (const ParamSegment& seg : segments)
    DLB_CHECK(seg.offset >= 0 && seg.count >= 0 && seg.offset + seg.count <= params.numel(),
              "{}: segment [{}, +{}) outside {} parameters", op, seg.offset, seg.count, params.numel());

  if (scalars && scalars->overflow) return;  // an overflowed step is skipped, m and v included
  const float lr = scalars ? scalars->lr : step.lr;
  // Stored gradients still carry grad_scale's inverse (ranks, micro-batches) and the loss scale.
  const double unscale = double(step.grad_scale) / (scalars ? double(scalars->loss_scale) : 1.0);
  double clip = 1;
  if (step.max_grad_norm > 0) {
    const double norm = std::sqrt(double(*step.grad_norm_squared)) * unscale;
    clip = std::min(1.0, double(step.max_grad_norm) / (norm + 1e-6));
  }
  const float g_factor = static_cast<float>(unscale * clip);
  // The count in memory (a recorded step's) advances with every update applied.
  const int64_t t = step.step_count ? int64_t(*step.step_count) + 1 : step.step;
  if (step.step_count) *step.step_count = static_cast<int32_t>(t);
  const float beta1 = step.beta1, beta2 = step.beta2, eps = step.eps;
  const float inv_correction1 = static_cast<float>(1 / (1 - std::pow(double(beta1), double(t))));
  const float inv_correction2 = static_cast<float>(1 / (1 - std::pow(double(beta2), double(t))));
  float* p = params.ptr<float>();
  const float* grad = grads.ptr<float>();
  float* first = m.ptr<float>();
  float* second = v.ptr<float>();
  for (const ParamSegment& seg : segments) {
    const float decay = seg.weight_decay ? step.weight_decay : 0.f;
    const int64_t begin = seg.offset, end = seg.offset + seg.count;
#pragma omp parallel for simd schedule(static) num_threads(threads_) if (seg.count > kParallelThreshold)
    for (int64_t i = begin; i < end; ++i) {
      const float g = grad[i] * g_factor;
      const float m_i = beta1 * first[i] + (1 - beta1) * g;
      const float v_i = beta2 * second[i] + (1 - beta2) * g * g;
      first[i] = m_i;
      second[i] = v_i;
      const float mhat = m_i * inv_correction1, vhat = v_i * inv_correction2;
      p[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + decay * p[i]);
    }
  }
}

}  // namespace onednn
}  // namespace dlbench
