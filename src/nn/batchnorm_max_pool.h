// BatchNormMaxPoolLayer: y = maxpool(relu(bn(x))) — the ImageNet stem's batch norm, ReLU and max pool as one
// layer, through Backend::batchnorm_max_pool_*. relu(bn(x)) is read by the pool alone: on a backend with
// kernels for the pair (Backend::fuses_batchnorm_max_pool) neither it nor its gradient is stored (in
// ResNet-50's FP16 step at batch 256, 411 MB each, and a write and two reads of each fewer), elsewhere the
// backend composes the single ops with the same results as the two layers.
//   input    x         [N, C, H, W]
//   output   y         [N, C, P, Q]   max over kernel x kernel windows (stride, padding) of relu(bn(x))
//   params, buffers and saved statistics: the batch norm's (BatchNormLayer), under the layer's name, so a
//   checkpoint is the same as the two layers'.
#pragma once

#include <memory>

#include "nn/batchnorm.h"

namespace dlbench {

class ConvLayer;

class BatchNormMaxPoolLayer final : public Layer {
 public:
  BatchNormMaxPoolLayer(Network& net, std::string name, Activation& input, int64_t kernel, int64_t stride,
                        int64_t pad);
  const char* kind() const override { return "batchnorm+maxpool"; }
  void plan(MemoryPlan& plan) override;
  void forward(Phase phase) override;
  void backward() override;
  std::string plan_summary() const override;

  // x's statistics from `conv`, the layer that produces it (before either is planned), as
  // BatchNormLayer::take_input_sums_from.
  void take_input_sums_from(ConvLayer& conv);

 private:
  BatchNormTensors tensors();

  BatchNormState norm_;
  PoolGeometry pool_geometry_;
  std::unique_ptr<PoolPlan> pool_plan_;
  void* saved_ = nullptr;  // Backend::batchnorm_max_pool_saved_bytes, forward -> backward
  ConvLayer* sums_from_ = nullptr;
};

}  // namespace dlbench
