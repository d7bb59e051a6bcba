#include "nn/linear.h"

#include "core/status.h"
#include "nn/memory_plan.h"
#include "nn/network.h"
#include "nn/residual_add.h"

namespace dlbench {

LinearLayer::LinearLayer(Network& net, std::string name, Activation& input, int64_t out_features,
                         double normal_std)
    : Layer(net, std::move(name)),
      batch_(input.value.dim(0)),
      params_(net, input.value.numel() / batch_, out_features, normal_std) {
  params_.keep_codes(net, batch_);
  set_inputs({&input});
  output_ = &net.new_activation(name_ + ".out", {batch_, out_features});
}

LinearLayer::LinearLayer(Network& net, std::string name, Activation& input, Activation& residual,
                         Activation& output, int64_t out_features, double normal_std)
    : Layer(net, std::move(name)),
      batch_(input.value.dim(0)),
      params_(net, input.value.numel() / batch_, out_features, normal_std) {
  DLB_CHECK(residual.value.numel() == batch_ * out_features && output.value.dims() == residual.value.dims(),
            "{}: adds {} of {} to an output of [{}, {}]", name_, residual.name, residual.value.describe(),
            batch_, out_features);
  params_.keep_codes(net, batch_);
  set_inputs({&input, &residual});
  output_ = &output;
}

DenseGeometry LinearLayer::geometry() const {
  return {batch_, params_.in_features, params_.out_features, net_.dtype()};
}

void LinearLayer::plan(MemoryPlan& plan) { params_.declare(plan, name_); }

void LinearLayer::forward(Phase phase) {
  const Tensor x = inputs_[0]->value.reshaped({batch_, params_.in_features});
  Tensor y = output_->value.reshaped({batch_, params_.out_features});
  const Tensor* r = residual() ? &residual()->value : nullptr;
  auto fp8 = params_.fp8(phase == Phase::train);
  if (codes_by_writer_) fp8->input_codes = static_cast<const uint8_t*>(x.data());
  net_.backend().dense_forward(x, params_.weight, params_.bias, DenseActivation::none, r, y, nullptr,
                               fp8_or_null(fp8));
}

void LinearLayer::backward() {
  Backend& backend = net_.backend();
  Activation& in = *inputs_[0];
  const Tensor x = in.value.reshaped({batch_, params_.in_features});
  const Tensor dy = output_->grad.reshaped({batch_, params_.out_features});
  if (residual()) pass_gradient(backend, input_grad_mode(1), output_->grad, residual()->grad);
  Backend::DenseGradients g;
  g.params = net_.parameter_grad_mode();
  g.dw = &params_.dweight, g.db = bias_by_reader_ ? nullptr : &params_.dbias;
  Tensor dx;
  if (input_grad_mode(0) != GradMode::none) {
    dx = in.grad.reshaped({batch_, params_.in_features});
    g.dx = &dx, g.accumulate = to_accumulate(input_grad_mode(0));
  }
  const auto fp8 = params_.fp8(true);
  backend.dense_backward(dy, x, params_.weight, g, fp8_or_null(fp8));
  if (input_sums_ && g.params == Accumulate::overwrite) {
    // The bias gradient is complete here: made above, or by the first reader of the output before.
    const int64_t in = params_.in_features, out = params_.out_features;
    Tensor sums = input_sums_->elements(input_sums_first_, in).reshaped({1, in});
    backend.gemm(Transpose::no, Transpose::no, 1, in, out, 1.f, params_.dbias.reshaped({1, out}),
                 params_.weight, 0.f, sums);
  }
}

}  // namespace dlbench
