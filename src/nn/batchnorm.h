// BatchNormLayer: batch normalisation over (N, H, W) per channel, optionally followed by a residual add and
// a ReLU in the same pass — y = relu(gamma * (x - mean) / sqrt(var + eps) + beta [+ residual]) — which is
// how every ResNet block ends, and one read and write of the activations cheaper than three layers.
//   input    x         [N, C, H, W]
//   input    residual  [N, C, H, W]   (BatchNormFusion::add_relu only)
//   params   gamma = 1, beta = 0      [C] master dtype (FP32; FP64 in a double network)
//   buffers  running mean = 0, var = 1 [C] (used at inference, saved in checkpoints)
//   saved    batch mean, 1/sqrt(var + eps) [C] (forward -> backward)
//
// A projection block's closing batch norm may fold in the shortcut's (`shortcut_name`, the shortcut
// batch norm's own name): its residual input is then the shortcut convolution's output s, and the layer
// computes y = relu(bn(x) + bn_s(s)), holding bn_s's parameters, buffers and saved statistics under the
// shortcut's names (so parameters, checkpoints and their order are those of the two layers), through
// Backend::batchnorm_shortcut_*: bn_s(s) and the gradient between the two need never be stored.
//
// The training forward takes an input's statistics from the convolution that produced it where that
// convolution sums its output in its own pass (take_input_sums_from, ConvLayer::statistics): no pass over
// the input for them.
#pragma once

#include <array>
#include <memory>

#include "nn/layer.h"

namespace dlbench {

class ConvLayer;

// The geometry of a batch norm over x in `net` (its dtype and layout).
BatchNormGeometry batchnorm_geometry(const Network& net, const Tensor& x, BatchNormFusion fusion);

// One batch norm's plan, parameters, buffers and saved statistics, as the layers that hold batch norms keep
// them (BatchNormLayer one or two, BatchNormMaxPoolLayer one).
struct BatchNormState {
  BatchNormGeometry geometry;
  std::unique_ptr<BatchNormPlan> plan;
  Tensor gamma, beta, dgamma, dbeta;
  Tensor running_mean, running_var, saved_mean, saved_inv_std;

  // Shapes every tensor ([C], the master dtype) for `geometry`, before planning.
  void shape_tensors(Network& net);
  // Plans the batch norm and declares its parameters ("<name>.weight", "<name>.bias"), buffers and saved
  // statistics, in the order a checkpoint holds them.
  void plan_with(Network& net, MemoryPlan& memory, const std::string& name);
  // The tensors for the ops that take BatchNormTensors: normalising `input` (its gradient as dx), with its
  // sums from a convolution or null.
  BatchNormTensors tensors(Activation& input, const Tensor* input_sums);
};

class BatchNormLayer final : public Layer {
 public:
  BatchNormLayer(Network& net, std::string name, Activation& input, BatchNormFusion fusion,
                 Activation* residual = nullptr, std::string shortcut_name = "");
  const char* kind() const override { return "batchnorm"; }
  void plan(MemoryPlan& plan) override;
  void forward(Phase phase) override;
  void backward() override;
  std::string plan_summary() const override;
  // The residual's value is added in the forward pass only (its gradient is a masked copy of dy; a folded
  // shortcut's input is normalised again in the backward, so read there), and the
  // output's masks the ReLU: without one it is not read (Backend::batchnorm_backward).
  bool backward_reads_input(int index) const override { return index == 0 || folds_shortcut(); }
  bool backward_reads_output() const override { return own_.geometry.fusion != BatchNormFusion::none; }

  // Input `index`'s statistics from `conv`, the layer that produces it (before either is planned): asks the
  // convolution for its output's sums, which the training forward uses where the backend makes them.
  void take_input_sums_from(int index, ConvLayer& conv);

  Tensor& gamma() { return own_.gamma; }
  Tensor& beta() { return own_.beta; }
  Tensor& running_mean() { return own_.running_mean; }
  Tensor& running_var() { return own_.running_var; }

 private:
  bool folds_shortcut() const { return !shortcut_name_.empty(); }
  BatchNormTensors tensors(BatchNormState& norm, int input);

  // The sums of the input this batch norm normalises (own_: input 0, shortcut_: input 1), or null.
  const Tensor* input_sums(const BatchNormState& norm) const;

  BatchNormState own_, shortcut_;
  std::string shortcut_name_;              // "" when nothing is folded in
  std::array<ConvLayer*, 2> sums_from_{};  // the convolutions asked for input 0's and 1's sums
};

}  // namespace dlbench
