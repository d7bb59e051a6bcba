#include "nn/causal_self_attention.h"

#include "core/status.h"
#include "nn/memory_plan.h"
#include "nn/network.h"

namespace dlbench {

CausalSelfAttentionLayer::CausalSelfAttentionLayer(Network& net, std::string name, Activation& qkv,
                                                   int64_t seq_len, int64_t heads)
    : Layer(net, std::move(name)), seq_len_(seq_len), heads_(heads) {
  DLB_CHECK(qkv.value.rank() == 2 && qkv.value.dim(1) % 3 == 0, "{}: qkv must be [B * T, 3C]", name_);
  DLB_CHECK(seq_len > 0 && qkv.value.dim(0) % seq_len == 0, "{}: {} rows are no whole sequences of {}", name_,
            qkv.value.dim(0), seq_len);
  channels_ = qkv.value.dim(1) / 3;
  DLB_CHECK(heads > 0 && channels_ % heads == 0, "{}: {} heads do not divide {} channels", name_, heads,
            channels_);
  batch_ = qkv.value.dim(0) / seq_len;
  set_inputs({&qkv});
  output_ = &net.new_activation(name_ + ".out", {batch_ * seq_len_, channels_});
  stats_ =
      Tensor(nullptr, {batch_, heads_, seq_len_}, net.master_dtype(), Layout::nchw, net.backend().device());
}

void CausalSelfAttentionLayer::plan(MemoryPlan& plan) { plan.add_activation(stats_, name_ + ".stats"); }

void CausalSelfAttentionLayer::forward(Phase) {
  const Tensor qkv = inputs_[0]->value.reshaped({batch_, seq_len_, 3 * channels_});
  Tensor out = output_->value.reshaped({batch_, seq_len_, channels_});
  net_.backend().attention_forward(qkv, heads_, out, stats_);
}

void CausalSelfAttentionLayer::backward() {
  if (input_grad_mode(0) == GradMode::none) return;
  DLB_CHECK(input_grad_mode(0) == GradMode::overwrite, "{}: qkv gradient must be overwritten", name_);
  const Tensor qkv = inputs_[0]->value.reshaped({batch_, seq_len_, 3 * channels_});
  const Tensor out = output_->value.reshaped({batch_, seq_len_, channels_});
  const Tensor dout = output_->grad.reshaped({batch_, seq_len_, channels_});
  Tensor dqkv = inputs_[0]->grad.reshaped({batch_, seq_len_, 3 * channels_});
  net_.backend().attention_backward(qkv, out, stats_, dout, heads_, dqkv);
}

}  // namespace dlbench
