#include "nn/batchnorm_max_pool.h"

#include "core/status.h"
#include "nn/conv.h"
#include "nn/memory_plan.h"
#include "nn/network.h"
#include "nn/pool.h"

namespace dlbench {

BatchNormMaxPoolLayer::BatchNormMaxPoolLayer(Network& net, std::string name, Activation& input,
                                             int64_t kernel, int64_t stride, int64_t pad)
    : Layer(net, std::move(name)) {
  norm_.geometry = batchnorm_geometry(net, input.value, BatchNormFusion::relu);
  pool_geometry_ = max_pool_geometry(net, input.value, kernel, stride, pad);
  set_inputs({&input});
  output_ = &net.new_activation(name_ + ".out", {pool_geometry_.batch, pool_geometry_.channels,
                                                 pool_geometry_.out_h(), pool_geometry_.out_w()});
  norm_.shape_tensors(net);
}

void BatchNormMaxPoolLayer::plan(MemoryPlan& plan) {
  norm_.plan_with(net_, plan, name_);
  pool_plan_ = net_.backend().plan_pool(pool_geometry_);
  plan.add_saved_bytes(&saved_, net_.backend().batchnorm_max_pool_saved_bytes(*norm_.plan, *pool_plan_));
}

void BatchNormMaxPoolLayer::take_input_sums_from(ConvLayer& conv) {
  DLB_CHECK(conv.output() == inputs_[0], "{}: {} does not produce its input", name_, conv.name());
  conv.request_statistics();
  sums_from_ = &conv;
}

BatchNormTensors BatchNormMaxPoolLayer::tensors() {
  return norm_.tensors(*inputs_[0], sums_from_ ? sums_from_->statistics() : nullptr);
}

void BatchNormMaxPoolLayer::forward(Phase phase) {
  Backend& backend = net_.backend();
  if (phase == Phase::train) {
    backend.batchnorm_max_pool_forward_training(*norm_.plan, *pool_plan_, tensors(), output_->value, saved_,
                                                net_.workspace());
  } else {
    backend.batchnorm_max_pool_forward_inference(*norm_.plan, *pool_plan_, tensors(), output_->value, saved_);
  }
}

void BatchNormMaxPoolLayer::backward() {
  DLB_CHECK(input_grad_mode(0) == GradMode::overwrite, "{}: input gradient must be overwritten", name_);
  net_.backend().batchnorm_max_pool_backward(*norm_.plan, *pool_plan_, tensors(), output_->value,
                                             output_->grad, saved_, net_.parameter_grad_mode(),
                                             net_.workspace());
}

std::string BatchNormMaxPoolLayer::plan_summary() const {
  if (!norm_.plan) return std::string();
  std::string summary = net_.backend().describe(*norm_.plan);
  if (sums_from_ && sums_from_->statistics())
    summary += fmt::format("; statistics from {}", sums_from_->name());
  const bool fused = net_.backend().fuses_batchnorm_max_pool(norm_.geometry, pool_geometry_);
  return fmt::format("{}; max pool {}x{}/{} {}", summary, pool_geometry_.kernel_h, pool_geometry_.kernel_w,
                     pool_geometry_.stride_h, fused ? "fused" : "composed");
}

}  // namespace dlbench
