// BatchNormLayer: batch normalisation over (N, H, W) per channel, optionally followed by a residual add and
// a ReLU in the same pass — y = relu(gamma * (x - mean) / sqrt(var + eps) + beta [+ residual]) — which is
// how every ResNet block ends, and one read and write of the activations cheaper than three layers.
//   input    x         [N, C, H, W]
//   input    residual  [N, C, H, W]   (BatchNormFusion::add_relu only)
//   params   gamma = 1, beta = 0      [C] master dtype (FP32; FP64 in a double network)
//   buffers  running mean = 0, var = 1 [C] (used at inference, saved in checkpoints)
//   saved    batch mean, 1/sqrt(var + eps) [C] (forward -> backward)
//
// The training forward takes x's statistics from the convolution that produced it where the fusion pass
// wired them (BatchNormState::take_input_sums_from) and that convolution sums its output in its own pass
// (ConvLayer::statistics): no pass over x for them.
#pragma once

#include <memory>

#include "nn/layer.h"

namespace dlbench {

class ConvLayer;

// The geometry of a batch norm over x in `net` (its dtype and layout).
BatchNormGeometry batchnorm_geometry(const Network& net, const Tensor& x, BatchNormFusion fusion);

// One batch norm's plan, parameters, buffers and saved statistics, as the layers that hold batch norms keep
// them (BatchNormLayer and BatchNormMaxPoolLayer one, BatchNormShortcutLayer two).
struct BatchNormState {
  BatchNormGeometry geometry;
  std::unique_ptr<BatchNormPlan> plan;
  Tensor gamma, beta, dgamma, dbeta;
  Tensor running_mean, running_var, saved_mean, saved_inv_std;
  // The convolution that produces the normalised input and sums it for the training forward, or null.
  ConvLayer* sums_from = nullptr;

  // Shapes every tensor ([C], the master dtype) for `geometry`, before planning.
  void shape_tensors(Network& net);
  // Plans the batch norm and declares its parameters ("<name>.weight", "<name>.bias"), buffers and saved
  // statistics, in the order a checkpoint holds them.
  void plan_with(Network& net, MemoryPlan& memory, const std::string& name);
  // The normalised input's statistics from `conv`, which produces it (before either is planned): asks the
  // convolution for its output's sums, which the training forward uses where the backend makes them.
  void take_input_sums_from(ConvLayer& conv);
  // The tensors for the batch-norm ops: normalising `input` (its gradient as dx), with its sums where the
  // convolution makes them.
  BatchNormTensors tensors(Activation& input);
  // The plan in words, and where the statistics come from, for the per-layer profile.
  std::string describe(Backend& backend) const;
};

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
  bool backward_reads_output() const override { return norm_.geometry.fusion != BatchNormFusion::none; }

  BatchNormState& state() { return norm_; }
  const BatchNormGeometry& geometry() const { return norm_.geometry; }
  Tensor& gamma() { return norm_.gamma; }
  Tensor& beta() { return norm_.beta; }
  Tensor& running_mean() { return norm_.running_mean; }
  Tensor& running_var() { return norm_.running_var; }

 private:
  BatchNormState norm_;
};

}  // namespace dlbench
