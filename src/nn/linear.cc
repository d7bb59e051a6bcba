#include "nn/linear.h"

#include "nn/memory_plan.h"
#include "nn/network.h"

namespace dlbench {

LinearLayer::LinearLayer(Network& net, std::string name, Activation& input, int64_t out_features,
                         double normal_std)
    : Layer(net, std::move(name)),
      batch_(input.value.dim(0)),
      out_features_(out_features),
      normal_std_(normal_std) {
  in_features_ = input.value.numel() / batch_;
  set_inputs({&input});
  output_ = &net.new_activation(name_ + ".out", {batch_, out_features_});
  Device device = net.backend().device();
  weight_ = Tensor(nullptr, {out_features_, in_features_}, net.dtype(), Layout::nchw, device);
  dweight_ = Tensor(nullptr, {out_features_, in_features_}, net.dtype(), Layout::nchw, device);
  bias_ = Tensor(nullptr, {out_features_}, net.dtype(), Layout::nchw, device);
  dbias_ = Tensor(nullptr, {out_features_}, net.dtype(), Layout::nchw, device);
}

void LinearLayer::plan(MemoryPlan& plan) {
  if (normal_std_ > 0) {
    plan.add_parameter(name_ + ".weight", weight_, dweight_, ParamInit::normal, in_features_, false,
                       ParamUse::compute, normal_std_);
    plan.add_parameter(name_ + ".bias", bias_, dbias_, ParamInit::zeros, in_features_, true,
                       ParamUse::compute);
    return;
  }
  plan.add_parameter(name_ + ".weight", weight_, dweight_, ParamInit::uniform_fan_in, in_features_, false,
                     ParamUse::compute);
  plan.add_parameter(name_ + ".bias", bias_, dbias_, ParamInit::uniform_fan_in, in_features_, true,
                     ParamUse::compute);
}

void LinearLayer::forward(Phase) {
  Backend& backend = net_.backend();
  Tensor x = inputs_[0]->value.reshaped({batch_, in_features_});
  // y[N,O] = x[N,I] * W[O,I]^T
  backend.gemm(Transpose::no, Transpose::yes, batch_, out_features_, in_features_, 1.f, x, weight_, 0.f,
               output_->value);
  backend.add_bias(output_->value, bias_);
}

void LinearLayer::backward() {
  Backend& backend = net_.backend();
  Activation& in = *inputs_[0];
  Tensor x = in.value.reshaped({batch_, in_features_});
  const Tensor& dy = output_->grad;
  float param_beta = net_.parameter_grad_mode() == Accumulate::add ? 1.f : 0.f;
  // dW[O,I] (+)= dy[N,O]^T * x[N,I];  db[O] (+)= sum_n dy
  backend.gemm(Transpose::yes, Transpose::no, out_features_, in_features_, batch_, 1.f, dy, x, param_beta,
               dweight_);
  backend.bias_backward(dy, dbias_, net_.parameter_grad_mode());
  if (input_grad_mode(0) != GradMode::none) {
    // dx[N,I] (+)= dy[N,O] * W[O,I]
    Tensor dx = in.grad.reshaped({batch_, in_features_});
    float beta = input_grad_mode(0) == GradMode::accumulate ? 1.f : 0.f;
    backend.gemm(Transpose::no, Transpose::no, batch_, in_features_, out_features_, 1.f, dy, weight_, beta,
                 dx);
  }
}

}  // namespace dlbench
