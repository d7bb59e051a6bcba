// BatchNormLayer: batch normalisation over (N, H, W) per channel, optionally followed by a residual add and
// a ReLU in the same pass — y = relu(gamma * (x - mean) / sqrt(var + eps) + beta [+ residual]) — which is
// how every ResNet block ends, and one read and write of the activations cheaper than three layers.
//   input    x         [N, C, H, W]
//   input    residual  [N, C, H, W]   (BatchNormFusion::add_relu only)
//   params   gamma = 1, beta = 0      [C] master dtype (FP32; FP64 in a double network)
//   buffers  running mean = 0, var = 1 [C] (used at inference, saved in checkpoints)
//   saved    batch mean, 1/sqrt(var + eps) [C] (forward -> backward)
#pragma once

#include <memory>

#include "nn/layer.h"

namespace dlbench {

class BatchNormLayer final : public Layer {
 public:
  BatchNormLayer(Network& net, std::string name, Activation& input, BatchNormFusion fusion,
                 Activation* residual = nullptr);
  const char* kind() const override { return "batchnorm"; }
  void plan(MemoryPlan& plan) override;
  void forward(Phase phase) override;
  void backward() override;
  std::string plan_summary() const override;
  // The residual's value is added in the forward pass only (its gradient is a masked copy of dy), and the
  // output's masks the ReLU: without one it is not read (Backend::batchnorm_backward).
  bool backward_reads_input(int index) const override { return index == 0; }
  bool backward_reads_output() const override { return geometry_.fusion != BatchNormFusion::none; }

  Tensor& gamma() { return gamma_; }
  Tensor& beta() { return beta_; }
  Tensor& running_mean() { return running_mean_; }
  Tensor& running_var() { return running_var_; }

 private:
  BatchNormGeometry geometry_;
  std::unique_ptr<BatchNormPlan> plan_;
  Tensor gamma_, beta_, dgamma_, dbeta_;
  Tensor running_mean_, running_var_, saved_mean_, saved_inv_std_;
};

}  // namespace dlbench
