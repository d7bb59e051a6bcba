#include "nn/causal_self_attention.h"

#include "core/status.h"
#include "nn/linear.h"
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
  Backend& backend = net_.backend();
  backend.attention_backward(qkv, out, stats_, dout, heads_, dqkv);
  if (!qkv_bias_) return;
  const Accumulate mode = net_.parameter_grad_mode();
  const Tensor rows = dqkv.reshaped({batch_ * seq_len_, 3 * channels_});
  Tensor q = qkv_bias_->elements(0, channels_), k = qkv_bias_->elements(channels_, channels_),
         v = qkv_bias_->elements(2 * channels_, channels_);
  backend.bias_backward_columns(rows, 0, q, mode);
  if (mode == Accumulate::overwrite) backend.fill(k, 0.0);  // adding zero changes nothing
  // The projection wrote v's third in its backward, just before this one, in steps that overwrite.
  if (!(value_sums_by_projection_ && mode == Accumulate::overwrite))
    backend.bias_backward_columns(rows, 2 * channels_, v, mode);
}

void CausalSelfAttentionLayer::make_qkv_bias_gradient(Tensor& dbias, LinearLayer* projection) {
  DLB_CHECK(dbias.rank() == 1 && dbias.dim(0) == 3 * channels_, "{}: qkv's bias gradient is {}, not [{}]",
            name_, dbias.describe(), 3 * channels_);
  qkv_bias_ = &dbias;
  value_sums_by_projection_ = projection != nullptr;
  if (projection) projection->write_input_gradient_sums_into(dbias, 2 * channels_);
}

}  // namespace dlbench
