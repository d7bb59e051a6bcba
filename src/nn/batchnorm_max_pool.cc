#include "nn/batchnorm_max_pool.h"

#include "core/status.h"
#include "nn/memory_plan.h"
#include "nn/network.h"
#include "nn/pool.h"

namespace dlbench {

BatchNormMaxPoolLayer::BatchNormMaxPoolLayer(Network& net, std::string name, Activation& input,
                                             const PoolGeometry& pool, Activation& output)
    : Layer(net, std::move(name)), pool_geometry_(pool) {
  norm_.geometry = batchnorm_geometry(net, input.value, BatchNormFusion::relu);
  const Tensor& x = input.value;
  DLB_CHECK(pool.kind == PoolKind::max && pool.batch == x.n() && pool.channels == x.c() &&
                pool.in_h == x.h() && pool.in_w == x.w(),
            "{}: the pool must be a max pool over x", name_);
  DLB_CHECK(
      output.value.dims() == std::vector<int64_t>({pool.batch, pool.channels, pool.out_h(), pool.out_w()}),
      "{}: the output must have the pool's shape", name_);
  set_inputs({&input});
  output_ = &output;
  norm_.shape_tensors(net);
}

void BatchNormMaxPoolLayer::plan(MemoryPlan& plan) {
  norm_.plan_with(net_, plan, name_);
  pool_plan_ = net_.backend().plan_pool(pool_geometry_);
  plan.add_saved_bytes(&saved_, net_.backend().batchnorm_max_pool_saved_bytes(*norm_.plan, *pool_plan_));
}

void BatchNormMaxPoolLayer::forward(Phase phase) {
  Backend& backend = net_.backend();
  if (phase == Phase::train) {
    backend.batchnorm_max_pool_forward_training(*norm_.plan, *pool_plan_, norm_.tensors(*inputs_[0]),
                                                output_->value, saved_, net_.workspace());
  } else {
    backend.batchnorm_max_pool_forward_inference(*norm_.plan, *pool_plan_, norm_.tensors(*inputs_[0]),
                                                 output_->value, saved_);
  }
}

void BatchNormMaxPoolLayer::backward() {
  DLB_CHECK(input_grad_mode(0) == GradMode::overwrite, "{}: input gradient must be overwritten", name_);
  net_.backend().batchnorm_max_pool_backward(*norm_.plan, *pool_plan_, norm_.tensors(*inputs_[0]),
                                             output_->value, output_->grad, saved_,
                                             net_.parameter_grad_mode(), net_.workspace());
}

std::string BatchNormMaxPoolLayer::plan_summary() const {
  if (!norm_.plan) return std::string();
  const bool fused =
      net_.backend().fuses(FusionCandidate::batchnorm_max_pool(norm_.geometry, pool_geometry_));
  return fmt::format("{}; max pool {}x{}/{} {}", norm_.describe(net_.backend()), pool_geometry_.kernel_h,
                     pool_geometry_.kernel_w, pool_geometry_.stride_h, fused ? "fused" : "composed");
}

}  // namespace dlbench
