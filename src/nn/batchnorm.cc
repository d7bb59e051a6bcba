#include "nn/batchnorm.h"

#include "core/status.h"
#include "nn/memory_plan.h"
#include "nn/network.h"

namespace dlbench {

BatchNormLayer::BatchNormLayer(Network& net, std::string name, Activation& input, BatchNormFusion fusion,
                               Activation* residual)
    : Layer(net, std::move(name)) {
  const Tensor& x = input.value;
  DLB_CHECK((fusion == BatchNormFusion::add_relu) == (residual != nullptr),
            "{}: a residual input goes with the add_relu fusion and only with it", name_);
  if (residual) DLB_CHECK(residual->value.dims() == x.dims(), "{}: residual shape differs", name_);
  geometry_.batch = x.n();
  geometry_.channels = x.c();
  geometry_.h = x.h();
  geometry_.w = x.w();
  geometry_.dtype = net.dtype();
  geometry_.layout = net.layout();
  geometry_.fusion = fusion;
  set_inputs(residual ? std::vector<Activation*>{&input, residual} : std::vector<Activation*>{&input});
  output_ = &net.new_activation(name_ + ".out", x.dims());
  Device device = net.backend().device();
  for (Tensor* t :
       {&gamma_, &beta_, &dgamma_, &dbeta_, &running_mean_, &running_var_, &saved_mean_, &saved_inv_std_}) {
    *t = Tensor(nullptr, {x.c()}, net.master_dtype(), Layout::nchw, device);
  }
}

void BatchNormLayer::plan(MemoryPlan& plan) {
  plan_ = plan.estimate_only() ? net_.backend().estimate_batchnorm(geometry_)
                               : net_.backend().plan_batchnorm(geometry_);
  plan.add_parameter(name_ + ".weight", gamma_, dgamma_, ParamInit::ones, 1, true, ParamUse::master);
  plan.add_parameter(name_ + ".bias", beta_, dbeta_, ParamInit::zeros, 1, true, ParamUse::master);
  plan.add_buffer(running_mean_, 0.f);
  plan.add_buffer(running_var_, 1.f);
  plan.add_activation(saved_mean_, name_ + ".saved_mean");
  plan.add_activation(saved_inv_std_, name_ + ".saved_inv_std");
  plan.require_workspace(plan_->workspace_bytes());
  plan.add_held_bytes(plan_->held_bytes());
}

void BatchNormLayer::forward(Phase phase) {
  Backend& backend = net_.backend();
  const Tensor* residual = inputs_.size() > 1 ? &inputs_[1]->value : nullptr;
  if (phase == Phase::train) {
    backend.batchnorm_forward_training(*plan_, inputs_[0]->value, residual, gamma_, beta_, output_->value,
                                       running_mean_, running_var_, saved_mean_, saved_inv_std_,
                                       net_.workspace());
  } else {
    backend.batchnorm_forward_inference(*plan_, inputs_[0]->value, residual, gamma_, beta_, running_mean_,
                                        running_var_, output_->value);
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
  net_.backend().batchnorm_backward(*plan_, inputs_[0]->value, output_->value, output_->grad, gamma_,
                                    saved_mean_, saved_inv_std_, inputs_[0]->grad, dresidual, dgamma_, dbeta_,
                                    net_.parameter_grad_mode(), net_.workspace());
}

std::string BatchNormLayer::plan_summary() const {
  return plan_ ? net_.backend().describe(*plan_) : std::string();
}

}  // namespace dlbench
