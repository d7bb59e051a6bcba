// BatchNormMaxPoolLayer: y = maxpool(relu(bn(x))) — the ImageNet stem's batch norm, ReLU and max pool as one
// layer, through Backend::batchnorm_max_pool_*. relu(bn(x)) is read by the pool alone: on a backend with
// kernels for the pair neither it nor its gradient is stored (in ResNet-50's FP16 step at batch 256, 411 MB
// each, and a write and two reads of each fewer), elsewhere the backend composes the single ops with the
// same results as the two layers. The fusion pass (nn/fusion_pass.h) puts it in the place of the two layers
// where the backend fuses them (Fusion::batchnorm_max_pool).
//   input    x         [N, C, H, W]
//   output   y         [N, C, P, Q]   max over kernel x kernel windows (stride, padding) of relu(bn(x))
//   params, buffers and saved statistics: the batch norm's (BatchNormLayer), under the layer's name, so a
//   checkpoint is the same as the two layers'.
#pragma once

#include <memory>

#include "nn/batchnorm.h"

namespace dlbench {

class BatchNormMaxPoolLayer final : public Layer {
 public:
  // `name` is the batch norm's, `pool` the max pool's geometry and `output` its output, which this layer
  // writes in its place.
  BatchNormMaxPoolLayer(Network& net, std::string name, Activation& input, const PoolGeometry& pool,
                        Activation& output);
  const char* kind() const override { return "batchnorm+maxpool"; }
  void plan(MemoryPlan& plan) override;
  void forward(Phase phase) override;
  void backward() override;
  std::string plan_summary() const override;

  BatchNormState& state() { return norm_; }

 private:
  BatchNormState norm_;
  PoolGeometry pool_geometry_;
  std::unique_ptr<PoolPlan> pool_plan_;
  void* saved_ = nullptr;  // Backend::batchnorm_max_pool_saved_bytes, forward -> backward
};

}  // namespace dlbench
