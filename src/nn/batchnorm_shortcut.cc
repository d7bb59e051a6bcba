#include "nn/batchnorm_shortcut.h"

#include "core/status.h"
#include "nn/memory_plan.h"
#include "nn/network.h"

namespace dlbench {

BatchNormShortcutLayer::BatchNormShortcutLayer(Network& net, std::string name, Activation& input,
                                               std::string shortcut_name, Activation& shortcut_input,
                                               Activation& output)
    : Layer(net, std::move(name)), shortcut_name_(std::move(shortcut_name)) {
  const Tensor& x = input.value;
  DLB_CHECK(shortcut_input.value.dims() == x.dims() && output.value.dims() == x.dims(),
            "{}: the shortcut's input and the output must have x's shape", name_);
  closing_.geometry = batchnorm_geometry(net, x, BatchNormFusion::add_relu);
  shortcut_.geometry = batchnorm_geometry(net, shortcut_input.value, BatchNormFusion::none);
  set_inputs({&input, &shortcut_input});
  output_ = &output;
  closing_.shape_tensors(net);
  shortcut_.shape_tensors(net);
}

void BatchNormShortcutLayer::plan(MemoryPlan& plan) {
  // The shortcut's first: the order its own layer would have registered them in (it came before the
  // closing one).
  shortcut_.plan_with(net_, plan, shortcut_name_);
  closing_.plan_with(net_, plan, name_);
  // The folded op may use both batch norms' workspaces at once.
  plan.require_workspace(closing_.plan->workspace_bytes() + shortcut_.plan->workspace_bytes());
}

void BatchNormShortcutLayer::forward(Phase phase) {
  Backend& backend = net_.backend();
  const BatchNormTensors closing = closing_.tensors(*inputs_[0]), shortcut = shortcut_.tensors(*inputs_[1]);
  if (phase == Phase::train) {
    backend.batchnorm_shortcut_forward_training(*closing_.plan, *shortcut_.plan, closing, shortcut,
                                                output_->value, net_.workspace());
  } else {
    backend.batchnorm_shortcut_forward_inference(*closing_.plan, *shortcut_.plan, closing, shortcut,
                                                 output_->value);
  }
}

void BatchNormShortcutLayer::backward() {
  // The backend overwrites both inputs' gradients; this layer is the first writer of both (a block's end
  // runs first in backward).
  DLB_CHECK(input_grad_mode(0) == GradMode::overwrite && input_grad_mode(1) == GradMode::overwrite,
            "{}: the input gradients must be overwritten", name_);
  net_.backend().batchnorm_shortcut_backward(*closing_.plan, *shortcut_.plan, closing_.tensors(*inputs_[0]),
                                             shortcut_.tensors(*inputs_[1]), output_->value, output_->grad,
                                             net_.parameter_grad_mode(), net_.workspace());
}

std::string BatchNormShortcutLayer::plan_summary() const {
  if (!closing_.plan) return std::string();
  return fmt::format("{}; folded {}: {}", closing_.describe(net_.backend()), shortcut_name_,
                     shortcut_.describe(net_.backend()));
}

}  // namespace dlbench
