#include "nn/batchnorm.h"

#include <algorithm>

#include "core/status.h"
#include "nn/conv.h"
#include "nn/memory_plan.h"
#include "nn/network.h"

namespace dlbench {
namespace {

BatchNormGeometry geometry_of(const Network& net, const Tensor& x, BatchNormFusion fusion) {
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

}  // namespace

BatchNormLayer::BatchNormLayer(Network& net, std::string name, Activation& input, BatchNormFusion fusion,
                               Activation* residual, std::string shortcut_name)
    : Layer(net, std::move(name)), shortcut_name_(std::move(shortcut_name)) {
  const Tensor& x = input.value;
  DLB_CHECK((fusion == BatchNormFusion::add_relu) == (residual != nullptr),
            "{}: a residual input goes with the add_relu fusion and only with it", name_);
  DLB_CHECK(!folds_shortcut() || residual != nullptr, "{}: a folded shortcut needs its convolution's output",
            name_);
  if (residual) DLB_CHECK(residual->value.dims() == x.dims(), "{}: residual shape differs", name_);
  own_.geometry = geometry_of(net, x, fusion);
  if (folds_shortcut()) shortcut_.geometry = geometry_of(net, residual->value, BatchNormFusion::none);
  set_inputs(residual ? std::vector<Activation*>{&input, residual} : std::vector<Activation*>{&input});
  output_ = &net.new_activation(name_ + ".out", x.dims());
  Device device = net.backend().device();
  for (Norm* norm : {&own_, &shortcut_}) {
    if (norm == &shortcut_ && !folds_shortcut()) break;
    for (Tensor* t : {&norm->gamma, &norm->beta, &norm->dgamma, &norm->dbeta, &norm->running_mean,
                      &norm->running_var, &norm->saved_mean, &norm->saved_inv_std}) {
      *t = Tensor(nullptr, {x.c()}, net.master_dtype(), Layout::nchw, device);
    }
  }
}

void BatchNormLayer::plan_norm(MemoryPlan& plan, Norm& norm, const std::string& name) {
  norm.plan = plan.estimate_only() ? net_.backend().estimate_batchnorm(norm.geometry)
                                   : net_.backend().plan_batchnorm(norm.geometry);
  plan.add_parameter(name + ".weight", norm.gamma, norm.dgamma, ParamInit::ones, 1, true, ParamUse::master);
  plan.add_parameter(name + ".bias", norm.beta, norm.dbeta, ParamInit::zeros, 1, true, ParamUse::master);
  plan.add_buffer(norm.running_mean, 0.f);
  plan.add_buffer(norm.running_var, 1.f);
  plan.add_activation(norm.saved_mean, name + ".saved_mean");
  plan.add_activation(norm.saved_inv_std, name + ".saved_inv_std");
  plan.require_workspace(norm.plan->workspace_bytes());
  plan.add_held_bytes(norm.plan->held_bytes());
}

void BatchNormLayer::plan(MemoryPlan& plan) {
  // The shortcut's first: the order its own layer would have registered them in (it comes before this one).
  if (folds_shortcut()) plan_norm(plan, shortcut_, shortcut_name_);
  plan_norm(plan, own_, name_);
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

const Tensor* BatchNormLayer::input_sums(const Norm& norm) const {
  const ConvLayer* conv = sums_from_[&norm == &own_ ? 0 : 1];
  return conv ? conv->statistics() : nullptr;
}

BatchNormTensors BatchNormLayer::tensors(Norm& norm, int input) {
  BatchNormTensors t;
  t.x = &inputs_[static_cast<size_t>(input)]->value;
  t.gamma = &norm.gamma;
  t.beta = &norm.beta;
  t.running_mean = &norm.running_mean;
  t.running_var = &norm.running_var;
  t.saved_mean = &norm.saved_mean;
  t.saved_inv_std = &norm.saved_inv_std;
  t.dx = &inputs_[static_cast<size_t>(input)]->grad;
  t.dgamma = &norm.dgamma;
  t.dbeta = &norm.dbeta;
  t.input_sums = input_sums(norm);
  return t;
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
