#include "nn/tied_lm_head.h"

#include "core/status.h"
#include "nn/network.h"

namespace dlbench {

TiedLmHeadLayer::TiedLmHeadLayer(Network& net, std::string name, Activation& input, EmbeddingLayer& embedding)
    : Layer(net, std::move(name)),
      rows_(input.value.dim(0)),
      channels_(embedding.channels()),
      vocab_(embedding.padded_vocab()),
      weight_(embedding.token_table()),
      dweight_(embedding.token_table_grad()) {
  DLB_CHECK(input.value.rank() == 2 && input.value.dim(1) == channels_, "{}: input must be [N, {}]", name_,
            channels_);
  set_inputs({&input});
  output_ = &net.new_activation(name_ + ".logits", {rows_, vocab_});
  embedding.tie_to_head();
}

void TiedLmHeadLayer::forward(Phase) {
  // logits[N,V] = x[N,C] * wte[V,C]^T
  net_.backend().gemm(Transpose::no, Transpose::yes, rows_, vocab_, channels_, 1.f, inputs_[0]->value,
                      weight_, 0.f, output_->value);
}

void TiedLmHeadLayer::backward() {
  Backend& backend = net_.backend();
  const Tensor& dlogits = output_->grad;
  Activation& in = *inputs_[0];
  // dwte[V,C] (+)= dlogits[N,V]^T * x[N,C]: the first write of the tied gradient in this step.
  const float param_beta = net_.parameter_grad_mode() == Accumulate::add ? 1.f : 0.f;
  backend.gemm(Transpose::yes, Transpose::no, vocab_, channels_, rows_, 1.f, dlogits, in.value, param_beta,
               dweight_);
  if (input_grad_mode(0) == GradMode::none) return;
  // dx[N,C] (+)= dlogits[N,V] * wte[V,C]
  const float beta = input_grad_mode(0) == GradMode::accumulate ? 1.f : 0.f;
  backend.gemm(Transpose::no, Transpose::no, rows_, channels_, vocab_, 1.f, dlogits, weight_, beta, in.grad);
}

}  // namespace dlbench
