#include "nn/mlp.h"

#include "core/status.h"
#include "nn/linear.h"
#include "nn/memory_plan.h"
#include "nn/network.h"
#include "nn/residual_add.h"

namespace dlbench {

MlpLayer::MlpLayer(Network& net, std::string name, const LinearLayer& fc, const LinearLayer& proj,
                   Activation& input, Activation* residual, Activation& output)
    : Layer(net, std::move(name)),
      rows_(input.value.dim(0)),
      fc_name_(fc.name()),
      proj_name_(proj.name()),
      fc_(net, input.value.numel() / rows_, fc.out_features(), fc.normal_std()),
      proj_(net, fc.out_features(), proj.out_features(), proj.normal_std()),
      fp8_(fc_.in_fp8()) {
  fc_.keep_codes(net, rows_);
  proj_.keep_codes(net, rows_);
  DLB_CHECK(output.value.numel() == rows_ * proj_.out_features, "{}: output {} is not [{}, {}]", name_,
            output.value.describe(), rows_, proj_.out_features);
  if (residual) {
    DLB_CHECK(residual->value.dims() == output.value.dims(), "{}: adds {} of {} to {}", name_, residual->name,
              residual->value.describe(), output.value.describe());
    set_inputs({&input, residual});
  } else {
    set_inputs({&input});
  }
  output_ = &output;
  const Device device = net.backend().device();
  pre_ = Tensor(nullptr, {rows_, fc_.out_features}, net.dtype(), Layout::nchw, device);
  hidden_ = Tensor(nullptr, {rows_, fc_.out_features}, net.dtype(), Layout::nchw, device);
  pre_grad_ = Tensor(nullptr, {rows_, fc_.out_features}, net.dtype(), Layout::nchw, device);
}

std::vector<SavedValue> MlpLayer::saved_values() {
  if (!fp8_) return {{fc_name_ + ".out", &pre_}, {name_ + ".gelu.out", &hidden_}};
  std::vector<SavedValue> saved = {{fc_name_ + ".out", &pre_}};  // g = gelu(h) is never stored
  for (SavedValue& codes : fc_.kept_codes(fc_name_)) saved.push_back(codes);
  for (SavedValue& codes : proj_.kept_codes(proj_name_)) saved.push_back(codes);
  return saved;
}

DenseGeometry MlpLayer::proj_geometry() const {
  return {rows_, proj_.in_features, proj_.out_features, net_.dtype()};
}

DenseGeometry MlpLayer::fc_geometry() const {
  return {rows_, fc_.in_features, fc_.out_features, net_.dtype()};
}

int64_t MlpLayer::forward_macs() const {
  return rows_ * fc_.out_features * (fc_.in_features + proj_.out_features);
}

void MlpLayer::plan(MemoryPlan& plan) {
  fc_.declare(plan, fc_name_);
  proj_.declare(plan, proj_name_);
}

// h = x Wfc^T + bfc and g = gelu(h), in one GEMM where the backend applies epilogues; in FP8 h alone.
void MlpLayer::recompute_saved_values() { first_dense(true); }

void MlpLayer::first_dense(bool training) {
  const Tensor x = inputs_[0]->value.reshaped({rows_, fc_.in_features});
  auto fp8 = fc_.fp8(training);
  if (fp8 && codes_by_writer_) fp8->input_codes = static_cast<const uint8_t*>(x.data());
  if (fp8_)
    net_.backend().dense_forward(x, fc_.weight, fc_.bias, DenseActivation::none, nullptr, pre_, nullptr,
                                 fp8_or_null(fp8));
  else
    net_.backend().dense_forward(x, fc_.weight, fc_.bias, DenseActivation::gelu, nullptr, hidden_, &pre_);
}

void MlpLayer::forward(Phase phase) {
  const bool training = phase == Phase::train;
  first_dense(training);
  Tensor y = output_->value.reshaped({rows_, proj_.out_features});
  const Tensor* r = residual() ? &residual()->value : nullptr;
  const auto fp8 = proj_.fp8(training);
  if (fp8_)  // c_proj's input is gelu(h), GELU taken by the pass that quantizes it
    net_.backend().dense_forward(pre_, proj_.weight, proj_.bias, DenseActivation::none, r, y, nullptr,
                                 fp8_or_null(fp8), DenseActivation::gelu);
  else
    net_.backend().dense_forward(hidden_, proj_.weight, proj_.bias, DenseActivation::none, r, y, nullptr);
}

void MlpLayer::backward() {
  Backend& backend = net_.backend();
  Activation& in = *inputs_[0];
  const Accumulate params = net_.parameter_grad_mode();
  const Tensor dy = output_->grad.reshaped({rows_, proj_.out_features});
  if (residual()) pass_gradient(backend, input_grad_mode(1), output_->grad, residual()->grad);
  const auto proj_fp8 = proj_.fp8(true), fc_fp8 = fc_.fp8(true);
  // GELU's gradient: in BF16 c_proj's data GEMM takes it (its DGELU epilogue); in FP8 the pass that
  // quantizes c_fc's output gradient does (FP8 GEMMs with that epilogue ran at a fifth of their speed).
  // c_proj: its weights' gradient (its input g = gelu(h): in FP8 made on the way from h), and the gradient
  // of g: dg = dy Wproj, or dh = dg * gelu'(h).
  Backend::DenseGradients proj_grads;
  proj_grads.params = params;
  proj_grads.dw = &proj_.dweight, proj_grads.dx = &pre_grad_;
  proj_grads.db = proj_bias_by_reader_ ? nullptr : &proj_.dbias;
  if (fp8_)
    proj_grads.input_act = DenseActivation::gelu;
  else
    proj_grads.act = DenseActivation::gelu, proj_grads.pre = &pre_;
  backend.dense_backward(dy, fp8_ ? pre_ : hidden_, proj_.weight, proj_grads, fp8_or_null(proj_fp8));
  // c_fc.
  const Tensor x = in.value.reshaped({rows_, fc_.in_features});
  Backend::DenseGradients fc_grads;
  fc_grads.params = params;
  fc_grads.dw = &fc_.dweight, fc_grads.db = &fc_.dbias;
  if (fp8_) fc_grads.output_act = DenseActivation::gelu, fc_grads.output = &pre_;
  Tensor dx;
  if (input_grad_mode(0) != GradMode::none) {
    dx = in.grad.reshaped({rows_, fc_.in_features});
    fc_grads.dx = &dx, fc_grads.accumulate = to_accumulate(input_grad_mode(0));
  }
  backend.dense_backward(pre_grad_, x, fc_.weight, fc_grads, fp8_or_null(fc_fp8));
}

}  // namespace dlbench
