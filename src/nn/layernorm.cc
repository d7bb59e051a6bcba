#include "nn/layernorm.h"

#include "core/status.h"
#include "nn/dense_parameters.h"
#include "nn/memory_plan.h"
#include "nn/network.h"

namespace dlbench {

LayerNormLayer::LayerNormLayer(Network& net, std::string name, Activation& input, float eps)
    : Layer(net, std::move(name)), eps_(eps) {
  DLB_CHECK(input.value.rank() == 2, "{}: input must be [N, C]", name_);
  set_inputs({&input});
  output_ = &net.new_activation(name_ + ".out", input.value.dims());
  const int64_t rows = input.value.dim(0), channels = input.value.dim(1);
  const Device device = net.backend().device();
  for (Tensor* t : {&weight_, &dweight_, &bias_, &dbias_})
    *t = Tensor(nullptr, {channels}, net.dtype(), Layout::nchw, device);
  mean_ = Tensor(nullptr, {rows}, net.master_dtype(), Layout::nchw, device);
  rstd_ = Tensor(nullptr, {rows}, net.master_dtype(), Layout::nchw, device);
}

void LayerNormLayer::plan(MemoryPlan& plan) {
  plan.add_parameter(name_ + ".weight", weight_, dweight_, ParamInit::ones, 1, true, ParamUse::compute);
  plan.add_parameter(name_ + ".bias", bias_, dbias_, ParamInit::zeros, 1, true, ParamUse::compute);
  plan.add_activation(mean_, name_ + ".mean");
  plan.add_activation(rstd_, name_ + ".rstd");
  plan.require_workspace(inputs_[0]->grad.bytes());  // the input's gradient where nothing reads it
}

void LayerNormLayer::forward(Phase phase) {
  if (!codes_reader_) {
    net_.backend().layernorm_forward(inputs_[0]->value, weight_, bias_, eps_, output_->value, mean_, rstd_);
    return;
  }
  // The reader's scaling as its own forward takes it: a training pass counts |y| towards the next scale
  // and writes the x^T codes its backward reads; an evaluation pass does neither.
  const auto fp8 = codes_reader_->fp8(phase == Phase::train);
  net_.backend().layernorm_forward_fp8(inputs_[0]->value, weight_, bias_, eps_, fp8->scale + kFp8X,
                                       static_cast<uint8_t*>(output_->value.data()),
                                       fp8->input_codes_transposed, fp8->amax ? fp8->amax + kFp8X : nullptr,
                                       mean_, rstd_);
}

void LayerNormLayer::backward() {
  Backend& backend = net_.backend();
  Activation& in = *inputs_[0];
  const GradMode mode = input_grad_mode(0);
  // Parameter gradients only where the input needs none: its gradient lands in the workspace and is dropped.
  Tensor scratch;
  if (mode == GradMode::none)
    scratch = Tensor(net_.workspace(), in.grad.dims(), in.grad.dtype(), Layout::nchw, in.grad.device());
  Tensor& dx = mode == GradMode::none ? scratch : in.grad;
  const Accumulate params = net_.parameter_grad_mode(), dx_mode = to_accumulate(mode);
  if (input_grad_sums_)
    backend.layernorm_backward_summing_dx(in.value, weight_, mean_, rstd_, output_->grad, dx, dweight_,
                                          dbias_, *input_grad_sums_, params, dx_mode);
  else
    backend.layernorm_backward(in.value, weight_, mean_, rstd_, output_->grad, dx, dweight_, dbias_, params,
                               dx_mode);
}

}  // namespace dlbench
