// EmbeddingLayer: GPT-2's input, token plus position embedding.
//   input  tokens [B, T] i32 (fed by the data pipeline; no gradient), each in [0, vocab)
//   wte    [padded_vocab, C]  "PREFIX.wte.weight"   N(0, 0.02)
//   wpe    [context, C]       "PREFIX.wpe.weight"   N(0, 0.02)
//   output x [B * T, C]: x[b*T + t] = wte[tokens[b, t]] + wpe[t]
// The token table may be tied to a language-model head (TiedLmHeadLayer), which reads wte as its output
// projection and writes its gradient first in the backward pass: the table is then still one parameter
// (declared here, once), and this layer's backward adds into the gradient the head wrote.
#pragma once

#include "nn/layer.h"

namespace dlbench {

struct EmbeddingOptions {
  int64_t padded_vocab = 0;  // rows of wte
  int64_t context = 0;       // rows of wpe: the longest sequence the model takes
  int64_t channels = 0;
  double init_std = 0.02;
  std::string parameter_prefix = "transformer";
};

class EmbeddingLayer final : public Layer {
 public:
  EmbeddingLayer(Network& net, std::string name, Activation& tokens, const EmbeddingOptions& options);
  const char* kind() const override { return "embedding"; }
  void plan(MemoryPlan& plan) override;
  void forward(Phase phase) override;
  void backward() override;
  bool backward_reads_output() const override { return false; }
  // A gather: no multiply-accumulates.

  // The token table and its gradient, for a head that ties its projection to it. Tying makes this
  // layer's backward add into dwte (the head, later in the network, writes it first).
  Tensor& token_table() { return wte_; }
  Tensor& token_table_grad() { return dwte_; }
  void tie_to_head() { tied_ = true; }
  int64_t channels() const { return channels_; }
  int64_t padded_vocab() const { return wte_.dim(0); }

 private:
  int64_t batch_, seq_len_, channels_;
  double init_std_;
  std::string prefix_;
  bool tied_ = false;
  Tensor wte_, dwte_, wpe_, dwpe_;
};

}  // namespace dlbench
