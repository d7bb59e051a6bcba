// SoftmaxCrossEntropyLayer: the loss. loss = mean_n [ -sum_k target[n,k] * log softmax(logits[n])_k ],
// target = (1 - s) * onehot(label) + s / K (label smoothing s, 0 by default).
//   input  logits [N, K]
//   input  labels [N] i32, or any shape of N labels (a language model's targets [B, T]), fed by the
//          data pipeline; no gradient
//   output loss   [1] f32 (f64 in a double-precision network)
// Backward starts the chain: dlogits = loss_scale * (softmax - target) / N; with
// LossGradient::over_the_logits the training forward has written it already, over the logits.
// A vocabulary padded for speed (GPT-2's 50,257 to 50,304 columns): only the first `valid_classes`
// columns are classes; the padded ones get probability 0 and gradient 0 and are never predicted
// (Backend::softmax_cross_entropy_padded_*). 0: every column is a class.
#pragma once

#include "nn/layer.h"

namespace dlbench {

// Where the gradient comes from.
enum class LossGradient : uint8_t {
  from_probabilities,  // forward saves the probabilities [N, K] f32, backward writes dlogits from them
  over_the_logits,     // a language model's vocabulary: the training forward writes dlogits over the
                       // logits in the same pass as the loss (Backend::softmax_cross_entropy_fused), so
                       // no [N, K] probabilities exist, and the logits' memory is their gradient's
};

class SoftmaxCrossEntropyLayer final : public Layer {
 public:
  SoftmaxCrossEntropyLayer(Network& net, std::string name, Activation& logits, Activation& labels,
                           float label_smoothing = 0.f, int64_t valid_classes = 0,
                           LossGradient gradient = LossGradient::from_probabilities);
  const char* kind() const override { return "softmax_xent"; }
  void plan(MemoryPlan& plan) override;
  void forward(Phase phase) override;
  void backward() override;
  bool gradient_over_input(int index) const override {
    return index == 0 && gradient_ == LossGradient::over_the_logits;
  }
  bool backward_reads_input(int) const override { return gradient_ == LossGradient::from_probabilities; }
  // The loss kernels index rows with 64 bits.
  int64_t largest_32bit_indexed_tensor() const override { return 0; }

  // With LossGradient::from_probabilities.
  const Tensor& probabilities() const { return probabilities_; }

 private:
  float label_smoothing_;
  int64_t valid_classes_;  // < K: a padded vocabulary
  LossGradient gradient_;
  Tensor probabilities_;  // [N, K] f32, forward -> backward (from_probabilities)
  Tensor row_loss_;       // [N] f32, the rows' losses (over_the_logits)
};

}  // namespace dlbench
