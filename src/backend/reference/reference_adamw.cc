// AdamW (PyTorch's torch.optim.AdamW) with clipping by the global gradient norm, and the sum of squares
// that norm is made of. Per element of each segment, at step t:
//   g = grad * grad_scale / loss_scale * clip
//   m = beta1 m + (1 - beta1) g,  v = beta2 v + (1 - beta2) g^2
//   p = p - lr * (mhat / (sqrt(vhat) + eps) + weight_decay * p),  mhat = m / (1 - beta1^t),
//                                                                vhat = v / (1 - beta2^t)
// The decay is decoupled (applied to p, not added to g as SGD's L2 does), so it is not rescaled by the
// adaptive denominator; GPT-2 decays only its matrices (ParamSegment::weight_decay). The bias corrections
// undo the zero start of m and v, which would otherwise shrink the first steps.
//
// Clipping (clip_grad_norm_): clip = min(1, max_grad_norm / (norm + 1e-6)) over the true gradients, whose
// norm is the stored gradients' (sqrt of *grad_norm_squared) times grad_scale / loss_scale (AdamWStep).
#include <algorithm>
#include <cmath>

#include "backend/reference/reference_backend.h"
#include "backend/reference/reference_common.h"

namespace dlbench {

void ReferenceBackend::sum_of_squares(const Tensor& x, Tensor& out, Accumulate accumulate) {
  const char* op = "sum_of_squares";
  reference::check_host(op, "x", x);
  DLB_CHECK(reference::is_float_dtype(x.dtype()), "{}: x is {}, expected floats", op, x.describe());
  reference::check_f32_or_f64(op, "out", out, {1});
  double sum = 0;  // in double: a norm over 10^8 gradients loses nothing to the order of the sum
  for (int64_t i = 0; i < x.numel(); ++i)
    sum += reference::load_element(x, i) * reference::load_element(x, i);
  reference::write_channels(out, {sum}, accumulate);
}

void ReferenceBackend::adamw_update(Tensor& params, const Tensor& grads, Tensor& m, Tensor& v,
                                    std::span<const ParamSegment> segments, const AdamWStep& step,
                                    const StepScalars* scalars, const ComputeCopies& copies) {
  const char* op = "adamw_update";
  reference::check_flat_params(op, params, segments);
  if (grads.numel() > 0) reference::check_same(op, "params", params, "grads", grads);
  const reference::ElementCopies copied(op, params, grads, copies);
  reference::check_same(op, "params", params, "m", m);
  reference::check_same(op, "params", params, "v", v);
  DLB_CHECK(step.step_count || step.step >= 1, "{}: step {} must count from 1", op, step.step);
  DLB_CHECK(step.max_grad_norm >= 0, "{}: max_grad_norm {} is negative", op, step.max_grad_norm);
  DLB_CHECK(step.max_grad_norm == 0 || step.grad_norm_squared,
            "{}: clipping to {} needs grad_norm_squared (the gradients' sum of squares)", op,
            step.max_grad_norm);

  if (scalars && scalars->overflow) return;  // an overflowed step is skipped, m and v included
  const double lr = scalars ? double(scalars->lr) : double(step.lr);
  // Stored gradients are not yet multiplied by grad_scale (ranks, micro-batches) and still carry the loss
  // scale; the true gradient is neither.
  const double unscale = double(step.grad_scale) / (scalars ? double(scalars->loss_scale) : 1.0);
  double clip = 1;
  if (step.max_grad_norm > 0) {
    const double norm = std::sqrt(double(*step.grad_norm_squared)) * unscale;
    clip = std::min(1.0, double(step.max_grad_norm) / (norm + 1e-6));
  }
  // The count in memory (a recorded step's) advances with every update applied.
  const int64_t t = step.step_count ? int64_t(*step.step_count) + 1 : step.step;
  if (step.step_count) *step.step_count = static_cast<int32_t>(t);
  const double beta1 = step.beta1, beta2 = step.beta2;
  const double correction1 = 1 - std::pow(beta1, double(t));
  const double correction2 = 1 - std::pow(beta2, double(t));
  reference::dispatch_float(params.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* p = params.ptr<T>();
    const T* grad = grads.ptr<T>();
    T* first = m.ptr<T>();
    T* second = v.ptr<T>();
    for (const ParamSegment& s : segments) {
      const double weight_decay = s.weight_decay ? step.weight_decay : 0.0;
      for (int64_t i = s.offset; i < s.offset + s.count; ++i) {
        const double g = copied.gradient(grad, i) * unscale * clip;
        const double m_i = beta1 * double(first[i]) + (1 - beta1) * g;
        const double v_i = beta2 * double(second[i]) + (1 - beta2) * g * g;
        const double mhat = m_i / correction1, vhat = v_i / correction2;
        const double update = mhat / (std::sqrt(vhat) + double(step.eps)) + weight_decay * double(p[i]);
        first[i] = static_cast<T>(m_i);
        second[i] = static_cast<T>(v_i);
        p[i] = static_cast<T>(double(p[i]) - lr * update);
        copied.updated(i, double(p[i]));
      }
    }
  });
}

}  // namespace dlbench
