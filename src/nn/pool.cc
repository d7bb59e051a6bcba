#include "nn/pool.h"

#include "core/status.h"
#include "nn/memory_plan.h"
#include "nn/network.h"

namespace dlbench {

namespace {
PoolGeometry pool_geometry(const Network& net, const Tensor& x, PoolKind kind, int64_t kernel_h,
                           int64_t kernel_w, int64_t stride, int64_t pad) {
  PoolGeometry g;
  g.batch = x.n();
  g.channels = x.c();
  g.in_h = x.h();
  g.in_w = x.w();
  g.kernel_h = kernel_h;
  g.kernel_w = kernel_w;
  g.stride_h = g.stride_w = stride;
  g.pad_h = g.pad_w = pad;
  g.kind = kind;
  g.dtype = net.dtype();
  g.layout = net.layout();
  return g;
}
}  // namespace

PoolGeometry max_pool_geometry(const Network& net, const Tensor& x, int64_t kernel, int64_t stride,
                               int64_t pad) {
  return pool_geometry(net, x, PoolKind::max, kernel, kernel, stride, pad);
}

MaxPoolLayer::MaxPoolLayer(Network& net, std::string name, Activation& input, int64_t kernel, int64_t stride,
                           int64_t pad)
    : Layer(net, std::move(name)) {
  geometry_ = max_pool_geometry(net, input.value, kernel, stride, pad);
  set_inputs({&input});
  output_ = &net.new_activation(name_ + ".out",
                                {geometry_.batch, geometry_.channels, geometry_.out_h(), geometry_.out_w()});
}

void MaxPoolLayer::plan(MemoryPlan& plan) {
  plan_ = net_.backend().plan_pool(geometry_);
  if (plan_->saved_bytes() > 0) plan.add_saved_bytes(&saved_, plan_->saved_bytes());
}

void MaxPoolLayer::forward(Phase) {
  net_.backend().pool_forward(*plan_, inputs_[0]->value, output_->value, saved_);
}

void MaxPoolLayer::backward() {
  if (input_grad_mode(0) == GradMode::none) return;
  DLB_CHECK(input_grad_mode(0) == GradMode::overwrite, "{}: input gradient must be overwritten", name_);
  net_.backend().pool_backward(*plan_, inputs_[0]->value, output_->value, output_->grad, saved_,
                               inputs_[0]->grad);
}

GlobalAvgPoolLayer::GlobalAvgPoolLayer(Network& net, std::string name, Activation& input)
    : Layer(net, std::move(name)) {
  const Tensor& x = input.value;
  geometry_ = pool_geometry(net, x, PoolKind::average, x.h(), x.w(), 1, 0);
  set_inputs({&input});
  output_ = &net.new_activation(name_ + ".out", {x.n(), x.c()});
}

void GlobalAvgPoolLayer::plan(MemoryPlan& plan) {
  plan_ = net_.backend().plan_pool(geometry_);
  if (plan_->saved_bytes() > 0) plan.add_saved_bytes(&saved_, plan_->saved_bytes());
}

void GlobalAvgPoolLayer::forward(Phase) {
  // With a 1 x 1 output, [N, C] and [N, C, 1, 1] are the same bytes in either layout.
  Tensor y = output_->value.reshaped({geometry_.batch, geometry_.channels, 1, 1});
  net_.backend().pool_forward(*plan_, inputs_[0]->value, y, saved_);
}

void GlobalAvgPoolLayer::backward() {
  if (input_grad_mode(0) == GradMode::none) return;
  DLB_CHECK(input_grad_mode(0) == GradMode::overwrite, "{}: input gradient must be overwritten", name_);
  Tensor y = output_->value.reshaped({geometry_.batch, geometry_.channels, 1, 1});
  Tensor dy = output_->grad.reshaped({geometry_.batch, geometry_.channels, 1, 1});
  net_.backend().pool_backward(*plan_, inputs_[0]->value, y, dy, saved_, inputs_[0]->grad);
}

}  // namespace dlbench
