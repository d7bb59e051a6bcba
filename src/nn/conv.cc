#include "nn/conv.h"

#include "nn/memory_plan.h"
#include "nn/network.h"

namespace dlbench {

ConvLayer::ConvLayer(Network& net, std::string name, Activation& input, const ConvOptions& options)
    : Layer(net, std::move(name)) {
  const Tensor& x = input.value;
  geometry_.batch = x.n();
  geometry_.in_channels = x.c();
  geometry_.in_h = x.h();
  geometry_.in_w = x.w();
  geometry_.out_channels = options.out_channels;
  geometry_.kernel_h = geometry_.kernel_w = options.kernel;
  geometry_.stride_h = geometry_.stride_w = options.stride;
  geometry_.pad_h = geometry_.pad_w = options.pad;
  geometry_.dtype = net.dtype();
  geometry_.layout = net.layout();
  set_inputs({&input});
  output_ = &net.new_activation(
      name_ + ".out", {geometry_.batch, geometry_.out_channels, geometry_.out_h(), geometry_.out_w()});
  std::vector<int64_t> wdims{options.out_channels, x.c(), options.kernel, options.kernel};
  weight_ = Tensor(nullptr, wdims, net.dtype(), net.layout(), net.backend().device());
  dweight_ = Tensor(nullptr, wdims, net.dtype(), net.layout(), net.backend().device());
}

void ConvLayer::plan(MemoryPlan& plan) {
  geometry_.accumulates_input_grad = input_grad_mode(0) == GradMode::accumulate;  // set by Network::plan
  plan_ =
      plan.estimate_only() ? net_.backend().estimate_conv(geometry_) : net_.backend().plan_conv(geometry_);
  int64_t fan_out = geometry_.out_channels * geometry_.kernel_h * geometry_.kernel_w;
  plan.add_parameter(name_ + ".weight", weight_, dweight_, ParamInit::he_normal_fan_out, fan_out, false,
                     ParamUse::compute);
  plan.require_workspace(plan_->workspace_bytes());
  // An estimate plan has searched nothing: it counts the sums wherever they were asked for.
  emits_statistics_ = geometry_.output_statistics && (plan.estimate_only() || plan_->emits_statistics());
  if (emits_statistics_) {
    sums_ = Tensor(nullptr, {2, geometry_.out_channels}, net_.master_dtype(), Layout::nchw,
                   net_.backend().device());
    plan.add_activation(sums_, name_ + ".sums");
  }
}

void ConvLayer::forward(Phase phase) {
  if (phase == Phase::train && emits_statistics_) {
    net_.backend().conv_forward_with_statistics(*plan_, inputs_[0]->value, weight_, output_->value, sums_,
                                                net_.workspace());
    return;
  }
  net_.backend().conv_forward(*plan_, inputs_[0]->value, weight_, output_->value, net_.workspace());
}

void ConvLayer::backward() {
  Backend& backend = net_.backend();
  Activation& x = *inputs_[0];
  backend.conv_backward_filter(*plan_, x.value, output_->grad, dweight_, net_.parameter_grad_mode(),
                               net_.workspace());
  if (input_grad_mode(0) != GradMode::none) {
    backend.conv_backward_data(*plan_, output_->grad, weight_, x.grad, to_accumulate(input_grad_mode(0)),
                               net_.workspace());
  }
}

std::string ConvLayer::plan_summary() const {
  return plan_ ? net_.backend().describe(*plan_) : std::string();
}

}  // namespace dlbench
