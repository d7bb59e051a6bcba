#include "nn/softmax_cross_entropy.h"

#include <optional>

#include "core/status.h"
#include "nn/memory_plan.h"
#include "nn/network.h"

namespace dlbench {

SoftmaxCrossEntropyLayer::SoftmaxCrossEntropyLayer(Network& net, std::string name, Activation& logits,
                                                   Activation& labels, float label_smoothing,
                                                   int64_t valid_classes, LossGradient gradient)
    : Layer(net, std::move(name)),
      label_smoothing_(label_smoothing),
      valid_classes_(valid_classes > 0 ? valid_classes : logits.value.dims().back()),
      gradient_(gradient) {
  DLB_CHECK(logits.value.rank() == 2, "{}: logits must be [N, K]", name_);
  DLB_CHECK(labels.value.dtype() == DType::i32 && !labels.needs_grad, "{}: labels must be an i32 input",
            name_);
  DLB_CHECK(labels.value.numel() == logits.value.dim(0), "{}: {} labels for {} rows of logits", name_,
            labels.value.numel(), logits.value.dim(0));
  DLB_CHECK(valid_classes_ <= logits.value.dim(1), "{}: {} classes in {} columns", name_, valid_classes_,
            logits.value.dim(1));
  set_inputs({&logits, &labels});
  output_ = &net.new_activation(name_ + ".loss", {1}, net.master_dtype());
  if (gradient_ == LossGradient::from_probabilities)
    probabilities_ =
        Tensor(nullptr, logits.value.dims(), net.master_dtype(), Layout::nchw, net.backend().device());
  else
    row_loss_ = Tensor(nullptr, {logits.value.dim(0)}, DType::f32, Layout::nchw, net.backend().device());
}

void SoftmaxCrossEntropyLayer::plan(MemoryPlan& plan) {
  if (gradient_ == LossGradient::from_probabilities)
    plan.add_activation(probabilities_, name_ + ".probabilities");
  else
    plan.add_activation(row_loss_, name_ + ".row_loss");
}

void SoftmaxCrossEntropyLayer::forward(Phase phase) {
  Tensor& logits = inputs_[0]->value;
  const Tensor labels = inputs_[1]->value.reshaped({logits.dim(0)});
  if (gradient_ == LossGradient::over_the_logits) {
    // Training: the gradient replaces the logits now (the network gave it their memory); the loss scale is
    // the step's, set before its forward.
    const std::optional<float> gradient = phase == Phase::train ? std::optional<float>(1.f) : std::nullopt;
    net_.backend().softmax_cross_entropy_fused(logits, labels, valid_classes_, label_smoothing_, row_loss_,
                                               output_->value, gradient, net_.loss_scale_source());
  } else if (valid_classes_ == logits.dim(1)) {
    net_.backend().softmax_cross_entropy_forward(logits, labels, label_smoothing_, probabilities_,
                                                 output_->value);
  } else {
    net_.backend().softmax_cross_entropy_padded_forward(logits, labels, valid_classes_, label_smoothing_,
                                                        probabilities_, output_->value);
  }
}

void SoftmaxCrossEntropyLayer::backward() {
  DLB_CHECK(input_grad_mode(0) == GradMode::overwrite, "{}: logits gradient must be overwritten", name_);
  if (gradient_ == LossGradient::over_the_logits) return;  // written by the training forward
  const Tensor labels = inputs_[1]->value.reshaped({probabilities_.dim(0)});
  if (valid_classes_ == probabilities_.dim(1)) {
    net_.backend().softmax_cross_entropy_backward(probabilities_, labels, label_smoothing_, 1.f,
                                                  inputs_[0]->grad, net_.loss_scale_source());
  } else {
    net_.backend().softmax_cross_entropy_padded_backward(probabilities_, labels, valid_classes_,
                                                         label_smoothing_, 1.f, inputs_[0]->grad,
                                                         net_.loss_scale_source());
  }
}

}  // namespace dlbench
