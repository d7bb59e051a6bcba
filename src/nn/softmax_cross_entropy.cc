#include "nn/softmax_cross_entropy.h"

#include "core/status.h"
#include "nn/memory_plan.h"
#include "nn/network.h"

namespace dlbench {

SoftmaxCrossEntropyLayer::SoftmaxCrossEntropyLayer(Network& net, std::string name, Activation& logits,
                                                   Activation& labels, float label_smoothing)
    : Layer(net, std::move(name)), label_smoothing_(label_smoothing) {
  DLB_CHECK(logits.value.rank() == 2, "{}: logits must be [N, K]", name_);
  DLB_CHECK(labels.value.dtype() == DType::i32 && !labels.needs_grad, "{}: labels must be an i32 input",
            name_);
  set_inputs({&logits, &labels});
  output_ = &net.new_activation(name_ + ".loss", {1}, net.master_dtype());
  probabilities_ =
      Tensor(nullptr, logits.value.dims(), net.master_dtype(), Layout::nchw, net.backend().device());
}

void SoftmaxCrossEntropyLayer::plan(MemoryPlan& plan) {
  plan.add_activation(probabilities_, name_ + ".probabilities");
}

void SoftmaxCrossEntropyLayer::forward(Phase) {
  net_.backend().softmax_cross_entropy_forward(inputs_[0]->value, inputs_[1]->value, label_smoothing_,
                                               probabilities_, output_->value);
}

void SoftmaxCrossEntropyLayer::backward() {
  DLB_CHECK(input_grad_mode(0) == GradMode::overwrite, "{}: logits gradient must be overwritten", name_);
  net_.backend().softmax_cross_entropy_backward(probabilities_, inputs_[1]->value, label_smoothing_, 1.f,
                                                inputs_[0]->grad, net_.loss_scale_source());
}

}  // namespace dlbench
