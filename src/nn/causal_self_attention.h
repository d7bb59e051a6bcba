// CausalSelfAttentionLayer: GPT-2's multi-head causal attention, between its two projections (the
// c_attn linear that makes qkv, and the c_proj linear after it).
//   input  qkv  [B * T, 3C]: q, k, v side by side in each row, head h on columns [h*d, (h+1)*d) of each
//   output out  [B * T, C]: softmax(q k^T / sqrt(d), masked to positions <= t) v, the heads side by side
// The forward saves each row's log-sum-exp of its scores (stats [B, heads, T], master dtype), from which
// the backward rebuilds the softmax without keeping [T, T] per head (Backend::attention_forward).
#pragma once

#include "nn/layer.h"

namespace dlbench {

class CausalSelfAttentionLayer final : public Layer {
 public:
  CausalSelfAttentionLayer(Network& net, std::string name, Activation& qkv, int64_t seq_len, int64_t heads);
  const char* kind() const override { return "attention"; }
  void plan(MemoryPlan& plan) override;
  void forward(Phase phase) override;
  void backward() override;
  // q k^T and the weighted sum of v, over the causal half: B * heads * T(T+1)/2 * d each.
  int64_t forward_macs() const override { return 2 * batch_ * seq_len_ * (seq_len_ + 1) / 2 * channels_; }

 private:
  int64_t batch_, seq_len_, channels_, heads_;
  Tensor stats_;  // [B, heads, T], forward -> backward
};

}  // namespace dlbench
