// ConvLayer: 2-D convolution without bias (a batch norm follows every conv in a ResNet).
//   input  x  [N, C, H, W]
//   weight w  [K, C, R, S]   He-normal (fan_out), as torchvision initialises ResNets; in the compute
//                            dtype (an FP16/BF16 copy of the FP32 master under mixed precision)
//   output y  [N, K, P, Q]   P = (H + 2*pad - R) / stride + 1
//   sums      [2, K]         master dtype, where the batch norm reading y asked for them
//                            (request_statistics: the fusion pass, Fusion::conv_statistics) and the plan
//                            makes them (ConvPlan::emits_statistics): sum(y), sum(y^2) per channel, written
//                            by the training forward (Backend::conv_forward_with_statistics)
#pragma once

#include <memory>

#include "nn/layer.h"

namespace dlbench {

struct ConvOptions {
  int64_t out_channels = 1;
  int64_t kernel = 1;
  int64_t stride = 1;
  int64_t pad = 0;
};

class ConvLayer final : public Layer {
 public:
  ConvLayer(Network& net, std::string name, Activation& input, const ConvOptions& options);
  const char* kind() const override { return "conv"; }
  void plan(MemoryPlan& plan) override;
  void forward(Phase phase) override;
  void backward() override;
  bool can_accumulate_input_grad(int) const override { return true; }
  bool backward_reads_output() const override { return false; }  // dW and dx need x, dy and w only
  int64_t forward_macs() const override { return geometry_.forward_macs(); }
  std::string plan_summary() const override;

  const ConvGeometry& geometry() const { return geometry_; }
  Tensor& weight() { return weight_; }
  Tensor& dweight() { return dweight_; }

  // Asks the training forward for its output's per-channel sums (before plan()); statistics() says after
  // plan() whether the backend makes them: the sums, or null.
  void request_statistics() { geometry_.output_statistics = true; }
  const Tensor* statistics() const { return emits_statistics_ ? &sums_ : nullptr; }

 private:
  ConvGeometry geometry_;
  std::unique_ptr<ConvPlan> plan_;
  Tensor weight_, dweight_;
  Tensor sums_;
  bool emits_statistics_ = false;
};

}  // namespace dlbench
