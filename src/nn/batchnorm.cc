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

void BatchNormState::take_input_sums_from(ConvLayer& conv) {
  conv.request_statistics();
  sums_from = &conv;
}

BatchNormTensors BatchNormState::tensors(Activation& input) {
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
  t.input_sums = sums_from ? sums_from->statistics() : nullptr;
  return t;
}

std::string BatchNormState::describe(Backend& backend) const {
  std::string summary = backend.describe(*plan);
  if (sums_from && sums_from->statistics()) summary += fmt::format("; statistics from {}", sums_from->name());
  return summary;
}

BatchNormLayer::BatchNormLayer(Network& net, std::string name, Activation& input, BatchNormFusion fusion,
                               Activation* residual)
    : Layer(net, std::move(name)) {
  const Tensor& x = input.value;
  DLB_CHECK((fusion == BatchNormFusion::add_relu) == (residual != nullptr),
            "{}: a residual input goes with the add_relu fusion and only with it", name_);
  if (residual) DLB_CHECK(residual->value.dims() == x.dims(), "{}: residual shape differs", name_);
  norm_.geometry = batchnorm_geometry(net, x, fusion);
  set_inputs(residual ? std::vector<Activation*>{&input, residual} : std::vector<Activation*>{&input});
  output_ = &net.new_activation(name_ + ".out", x.dims());
  norm_.shape_tensors(net);
}

void BatchNormLayer::plan(MemoryPlan& plan) { norm_.plan_with(net_, plan, name_); }

void BatchNormLayer::forward(Phase phase) {
  Backend& backend = net_.backend();
  const BatchNormTensors bn = norm_.tensors(*inputs_[0]);
  const Tensor* residual = inputs_.size() > 1 ? &inputs_[1]->value : nullptr;
  if (phase == Phase::train) {
    backend.batchnorm_forward_training(*norm_.plan, bn, residual, output_->value, net_.workspace());
  } else {
    backend.batchnorm_forward_inference(*norm_.plan, bn, residual, output_->value);
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
  net_.backend().batchnorm_backward(*norm_.plan, norm_.tensors(*inputs_[0]), output_->value, output_->grad,
                                    dresidual, net_.parameter_grad_mode(), net_.workspace());
}

std::string BatchNormLayer::plan_summary() const {
  return norm_.plan ? norm_.describe(net_.backend()) : std::string();
}

}  // namespace dlbench
