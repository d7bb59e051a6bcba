// TiedLmHeadLayer: a language model's output projection, logits = x wte^T, with the weight TIED to the
// token embedding (GPT-2's head): there is one parameter, the embedding's token table, and both layers'
// gradients sum into its one gradient buffer.
//   input  x      [N, C]  (the final layer norm's output, N = B * T)
//   weight wte    [V_padded, C], the EmbeddingLayer's (declared there, not here)
//   output logits [N, V_padded]; the columns past the real vocabulary are never predicted (the padded
//          cross-entropy gives them probability 0, so they get no gradient)
// In the backward pass this layer, the later of the two in the network, writes dwte first, by the
// network's parameter mode (overwrite, or += across micro-batches); the embedding's backward then adds
// its rows. The parameter is declared by the embedding, the earlier layer, so that a gradient bucket holding
// it leaves once both have written it (memory_plan.h, add_parameter).
#pragma once

#include "nn/embedding.h"
#include "nn/layer.h"

namespace dlbench {

class TiedLmHeadLayer final : public Layer {
 public:
  TiedLmHeadLayer(Network& net, std::string name, Activation& input, EmbeddingLayer& embedding);
  const char* kind() const override { return "lm_head"; }
  void plan(MemoryPlan&) override {}
  void forward(Phase phase) override;
  void backward() override;
  bool can_accumulate_input_grad(int) const override { return true; }
  bool backward_reads_output() const override { return false; }
  int64_t forward_macs() const override { return rows_ * channels_ * vocab_; }
  // Its tensors meet only cuBLAS's GEMMs: logits past 2^31 elements run (GPT-2 medium at batch 64).
  int64_t largest_32bit_indexed_tensor() const override { return 0; }

 private:
  int64_t rows_, channels_, vocab_;
  Tensor& weight_;
  Tensor& dweight_;
};

}  // namespace dlbench
