#include "nn/gelu.h"

#include "core/status.h"
#include "nn/network.h"

namespace dlbench {

GeluLayer::GeluLayer(Network& net, std::string name, Activation& input) : Layer(net, std::move(name)) {
  set_inputs({&input});
  output_ = &net.new_activation(name_ + ".out", input.value.dims());
}

void GeluLayer::forward(Phase) { net_.backend().gelu_forward(inputs_[0]->value, output_->value); }

void GeluLayer::backward() {
  if (input_grad_mode(0) == GradMode::none) return;
  DLB_CHECK(input_grad_mode(0) == GradMode::overwrite, "{}: input gradient must be overwritten", name_);
  net_.backend().gelu_backward(inputs_[0]->value, output_->grad, inputs_[0]->grad);
}

}  // namespace dlbench
