#include "nn/batchnorm.h"

#include <algorithm>

#include "core/status.h"
#include "nn/conv.h"
#include "nn/memory_plan.h"
#include "nn/network.h"

namespace dlbench {

BatchNormGeometry batchnorm_geometry(const Network& net, const Tensor& x, BatchNormFusion fusion) {
  BatchNormGeometry g;
  g.batch = x.n();
  g.channels = x.c();
  g.h = x.h();
  g.w = x.w();
  g.dtype = net.dtype();
  g.layout = net.layout();
  g.fusion = fusion;
  return g;
}

void BatchNormState::shape_tensors(Network& net) {
  for (Tensor* t :
       {&gamma, &beta, &dgamma, &dbeta, &running_mean, &running_var, &saved_mean, &saved_inv_std}) {
    *t = Tensor(nullptr, {geometry.channels}, net.master_dtype(), Layout::nchw, net.backend().device());
  }
}

void BatchNormState::plan_with(Network& net, MemoryPlan& memory, const std::string& name) {
  plan = memory.estimate_only() ? net.backend().estimate_batchnorm(geometry)
                                : net.backend().plan_batchnorm(geometry);
  memory.add_parameter(name + ".weight", gamma, dgamma, ParamInit::ones, 1, true, ParamUse::master);
  memory.add_parameter(name + ".bias", beta, dbeta, ParamInit::zeros, 1, true, ParamUse::master);
  memory.add_buffer(running_mean, 0.f);
  memory.add_buffer(running_var, 1.f);
  memory.add_activation(saved_mean, name + ".saved_mean");
  memory.add_activation(saved_inv_std, name + ".saved_inv_std");
  memory.require_workspace(plan->workspace_bytes());
  memory.add_held_bytes(plan->held_bytes());
}

BatchNormTensors BatchNormState::tensors(Activation& input, const Tensor* input_sums) {
  BatchNormTensors t;
  t.x = &input.value;
  t.gamma = &gamma;
  t.beta = &beta;
  t.running_mean = &running_mean;
  t.running_var = &running_var;
  t.saved_mean = &saved_mean;
  t.saved_inv_std = &saved_inv_std;
  t.dx = &input.grad;
  t.dgamma = &dgamma;
  t.dbeta = &dbeta;
  t.input_sums = input_sums;
  return t;
}

BatchNormLayer::BatchNormLayer(Network& net, std::string name, Activation& input, BatchNormFusion fusion,
                               Activation* residual, std::string shortcut_name)
    : Layer(net, std::move(name)), shortcut_name_(std::move(shortcut_name)) {
  const Tensor& x = input.value;
  DLB_CHECK((fusion == BatchNormFusion::add_relu) == (residual != nullptr),
            "{}: a residual input goes with the add_relu fusion and only with it", name_);
  DLB_CHECK(!folds_shortcut() || residual != nullptr, "{}: a folded shortcut needs its convolution's output",
            name_);
  if (residual) DLB_CHECK(residual->value.dims() == x.dims(), "{}: residual shape differs", name_);
  own_.geometry = batchnorm_geometry(net, x, fusion);
  if (folds_shortcut()) shortcut_.geometry = batchnorm_geometry(net, residual->value, BatchNormFusion::none);
  set_inputs(residual ? std::vector<Activation*>{&input, residual} : std::vector<Activation*>{&input});
  output_ = &net.new_activation(name_ + ".out", x.dims());
  own_.shape_tensors(net);
  if (folds_shortcut()) shortcut_.shape_tensors(net);
}

void BatchNormLayer::plan(MemoryPlan& plan) {
  // The shortcut's first: the order its own layer would have registered them in (it comes before this one).
  if (folds_shortcut()) shortcut_.plan_with(net_, plan, shortcut_name_);
  own_.plan_with(net_, plan, name_);
  // The folded op may use both batch norms' workspaces at once.
  if (folds_shortcut())
    plan.require_workspace(own_.plan->workspace_bytes() + shortcut_.plan->workspace_bytes());
}

void BatchNormLayer::take_input_sums_from(int index, ConvLayer& conv) {
  DLB_CHECK(index == 0 || (index == 1 && folds_shortcut()),
            "{}: only the normalised inputs' statistics can come from their convolutions", name_);
  DLB_CHECK(conv.output() == inputs_[static_cast<size_t>(index)], "{}: {} does not produce input {}", name_,
            conv.name(), index);
  conv.request_statistics();
  sums_from_[static_cast<size_t>(index)] = &conv;
}

const Tensor* BatchNormLayer::input_sums(const BatchNormState& norm) const {
  const ConvLayer* conv = sums_from_[&norm == &own_ ? 0 : 1];
  return conv ? conv->statistics() : nullptr;
}

BatchNormTensors BatchNormLayer::tensors(BatchNormState& norm, int input) {
  return norm.tensors(*inputs_[static_cast<size_t>(input)], input_sums(norm));
}

void BatchNormLayer::forward(Phase phase) {
  Backend& backend = net_.backend();
  if (folds_shortcut()) {
    const BatchNormTensors own = tensors(own_, 0), shortcut = tensors(shortcut_, 1);
    if (phase == Phase::train) {
      backend.batchnorm_shortcut_forward_training(*own_.plan, *shortcut_.plan, own, shortcut, output_->value,
                                                  net_.workspace());
    } else {
      backend.batchnorm_shortcut_forward_inference(*own_.plan, *shortcut_.plan, own, shortcut,
                                                   output_->value);
    }
    return;
  }
  const Tensor* residual = inputs_.size() > 1 ? &inputs_[1]->value : nullptr;
  if (phase == Phase::train) {
    if (const Tensor* sums = input_sums(own_)) {
      backend.batchnorm_forward_training_from_sums(
          *own_.plan, inputs_[0]->value, residual, own_.gamma, own_.beta, output_->value, own_.running_mean,
          own_.running_var, own_.saved_mean, own_.saved_inv_std, *sums, net_.workspace());
      return;
    }
    backend.batchnorm_forward_training(*own_.plan, inputs_[0]->value, residual, own_.gamma, own_.beta,
                                       output_->value, own_.running_mean, own_.running_var, own_.saved_mean,
                                       own_.saved_inv_std, net_.workspace());
  } else {
    backend.batchnorm_forward_inference(*own_.plan, inputs_[0]->value, residual, own_.gamma, own_.beta,
                                        own_.running_mean, own_.running_var, output_->value);
  }
}

void BatchNormLayer::backward() {
  // The backend overwrites dx and dresidual; Network::finalize orders layers so this layer is the first
  // writer of both (a block's closing BN runs first in backward).
  DLB_CHECK(input_grad_mode(0) == GradMode::overwrite, "{}: input gradient must be overwritten", name_);
  Tensor* dresidual = nullptr;
  if (inputs_.size() > 1) {
    DLB_CHECK(input_grad_mode(1) == GradMode::overwrite, "{}: residual gradient must be overwritten", name_);
    dresidual = &inputs_[1]->grad;
  }
  if (folds_shortcut()) {
    net_.backend().batchnorm_shortcut_backward(*own_.plan, *shortcut_.plan, tensors(own_, 0),
                                               tensors(shortcut_, 1), output_->value, output_->grad,
                                               net_.parameter_grad_mode(), net_.workspace());
    return;
  }
  net_.backend().batchnorm_backward(*own_.plan, inputs_[0]->value, output_->value, output_->grad, own_.gamma,
                                    own_.saved_mean, own_.saved_inv_std, inputs_[0]->grad, dresidual,
                                    own_.dgamma, own_.dbeta, net_.parameter_grad_mode(), net_.workspace());
}

std::string BatchNormLayer::plan_summary() const {
  if (!own_.plan) return std::string();
  std::string own = net_.backend().describe(*own_.plan);
  if (input_sums(own_)) own += fmt::format("; statistics from {}", sums_from_[0]->name());
  if (!folds_shortcut()) return own;
  std::string shortcut = net_.backend().describe(*shortcut_.plan);
  if (input_sums(shortcut_)) shortcut += fmt::format("; statistics from {}", sums_from_[1]->name());
  return fmt::format("{}; folded {}: {}", own, shortcut_name_, shortcut);
}

}  // namespace dlbench
