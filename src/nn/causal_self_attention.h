// CausalSelfAttentionLayer: GPT-2's multi-head causal attention, between its two projections (the
// c_attn linear that makes qkv, and the c_proj linear after it).
//   input  qkv  [B * T, 3C]: q, k, v side by side in each row, head h on columns [h*d, (h+1)*d) of each
//   output out  [B * T, C]: softmax(q k^T / sqrt(d), masked to positions <= t) v, the heads side by side
// The forward saves each row's log-sum-exp of its scores (stats [B, heads, T], master dtype), from which
// the backward rebuilds the softmax without keeping [T, T] per head (Backend::attention_forward).
// The bias gradient of c_attn, where this layer makes it (Fusion::attention_qkv_bias), needs a third of
// the pass over dqkv that c_attn's own backward would make:
//   * q's third: the sums of dq's rows, a pass over those columns;
//   * k's third: zero. A bias b on every key adds q.b to each of a row's scores, the same for all of
//     them, and the softmax does not change when all of a row's scores move together;
//   * v's third: the sums of dout's rows. out[s] = sum_t P[s,t] v[t], so dv[t] = sum_s P[s,t] dout[s],
//     and as each row of P sums to 1, the rows of dv sum to those of dout. Where a dense projection reads
//     out, it writes those sums from its own bias gradient (LinearLayer::write_input_gradient_sums_into);
//     in steps that add to the parameter gradients, and without such a projection, this layer sums dv.
#pragma once

#include "nn/layer.h"

namespace dlbench {

class LinearLayer;

class CausalSelfAttentionLayer final : public Layer {
 public:
  CausalSelfAttentionLayer(Network& net, std::string name, Activation& qkv, int64_t seq_len, int64_t heads);
  const char* kind() const override { return "attention"; }
  void plan(MemoryPlan& plan) override;
  void forward(Phase phase) override;
  void backward() override;
  // q k^T and the weighted sum of v, over the causal half: B * heads * T(T+1)/2 * d each.
  int64_t forward_macs() const override { return 2 * batch_ * seq_len_ * (seq_len_ + 1) / 2 * channels_; }

  // From now on the backward makes the bias gradient of the layer that makes qkv, `dbias` [3C]; its v third
  // is written by `projection` (the dense layer that reads the output) where not null (see the top).
  void make_qkv_bias_gradient(Tensor& dbias, LinearLayer* projection);
  bool makes_qkv_bias_gradient() const { return qkv_bias_ != nullptr; }

 private:
  int64_t batch_, seq_len_, channels_, heads_;
  Tensor stats_;                // [B, heads, T], forward -> backward
  Tensor* qkv_bias_ = nullptr;  // make_qkv_bias_gradient
  bool value_sums_by_projection_ = false;
};

}  // namespace dlbench
