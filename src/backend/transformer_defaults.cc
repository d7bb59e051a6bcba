// Backend's defaults for the transformer ops: a backend that has no kernels for an op says so by name
// when it is called (the ops arrive backend by backend: reference first, then oneDNN and CUDA).
#include <string>

#include "backend/backend.h"
#include "core/status.h"

namespace dlbench {
namespace {

[[noreturn]] void not_implemented(const Backend& backend, const char* op) {
  throw Error(fmt::format("{} is not implemented on backend {}", op, backend.name()));
}

}  // namespace

void Backend::embedding_forward(const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  not_implemented(*this, "embedding_forward");
}
void Backend::embedding_backward(const Tensor&, const Tensor&, Tensor&, Tensor&, Accumulate) {
  not_implemented(*this, "embedding_backward");
}
void Backend::layernorm_forward(const Tensor&, const Tensor&, const Tensor&, float, Tensor&, Tensor&,
                                Tensor&) {
  not_implemented(*this, "layernorm_forward");
}
void Backend::layernorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                 Tensor&, Tensor&, Tensor&, Accumulate, Accumulate) {
  not_implemented(*this, "layernorm_backward");
}
void Backend::gelu_forward(const Tensor&, Tensor&) { not_implemented(*this, "gelu_forward"); }
void Backend::gelu_backward(const Tensor&, const Tensor&, Tensor&) {
  not_implemented(*this, "gelu_backward");
}
void Backend::softmax_cross_entropy_fused(Tensor&, const Tensor&, int64_t, float, Tensor&, Tensor&,
                                          std::optional<float>, const float*) {
  not_implemented(*this, "softmax_cross_entropy_fused");
}
void Backend::attention_forward(const Tensor&, int64_t, Tensor&, Tensor&) {
  not_implemented(*this, "attention_forward");
}
void Backend::attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                                 Tensor&) {
  not_implemented(*this, "attention_backward");
}

// With no padding the padded ops are the plain ones, which every backend has.
void Backend::softmax_cross_entropy_padded_forward(const Tensor& logits, const Tensor& labels,
                                                   int64_t valid_classes, float label_smoothing,
                                                   Tensor& probs, Tensor& loss) {
  if (logits.rank() != 2 || valid_classes != logits.dim(1))
    not_implemented(*this, "softmax_cross_entropy_padded_forward (with padded classes)");
  softmax_cross_entropy_forward(logits, labels, label_smoothing, probs, loss);
}
void Backend::softmax_cross_entropy_padded_backward(const Tensor& probs, const Tensor& labels,
                                                    int64_t valid_classes, float label_smoothing, float scale,
                                                    Tensor& dlogits, const float* loss_scale) {
  if (probs.rank() != 2 || valid_classes != probs.dim(1))
    not_implemented(*this, "softmax_cross_entropy_padded_backward (with padded classes)");
  softmax_cross_entropy_backward(probs, labels, label_smoothing, scale, dlogits, loss_scale);
}

void Backend::sum_of_squares(const Tensor&, Tensor&, Accumulate) { not_implemented(*this, "sum_of_squares"); }
void Backend::adamw_update(Tensor&, const Tensor&, Tensor&, Tensor&, std::span<const ParamSegment>,
                           const AdamWStep&, const StepScalars*, const ComputeCopies&) {
  not_implemented(*this, "adamw_update");
}

}  // namespace dlbench
