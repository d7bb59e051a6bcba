// SoftmaxCrossEntropyLayer: the loss. loss = mean_n [ -sum_k target[n,k] * log softmax(logits[n])_k ],
// target = (1 - s) * onehot(label) + s / K (label smoothing s, 0 by default).
//   input  logits [N, K]
//   input  labels [N] i32 (fed by the data pipeline; no gradient)
//   output loss   [1] f32 (f64 in a double-precision network)
// Backward starts the chain: dlogits = loss_scale * (softmax - target) / N.
#pragma once

#include "nn/layer.h"

namespace dlbench {

class SoftmaxCrossEntropyLayer final : public Layer {
 public:
  SoftmaxCrossEntropyLayer(Network& net, std::string name, Activation& logits, Activation& labels,
                           float label_smoothing = 0.f);
  const char* kind() const override { return "softmax_xent"; }
  void plan(MemoryPlan& plan) override;
  void forward(Phase phase) override;
  void backward() override;

  const Tensor& probabilities() const { return probabilities_; }

 private:
  float label_smoothing_;
  Tensor probabilities_;  // [N, K] f32, forward -> backward
};

}  // namespace dlbench
