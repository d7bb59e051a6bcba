// LayerNormLayer: each row normalised over its features, y = (x - mean) * rstd * weight + bias.
//   input  x [N, C]  (N = B * T in a transformer)
//   weight [C] ones, bias [C] zeros   ("NAME.weight", "NAME.bias"; no weight decay)
//   output y [N, C]
// mean and rstd [N] (master dtype) are saved from the forward for the backward. The input's gradient may
// have to be added into (a pre-LN block's input also feeds the residual add, whose backward runs first):
// the backend's op overwrites, so the layer then writes into the workspace and adds from there.
// Where the input is a dense layer's output and this layer reads it first, so that its backward is the
// last to add to the input's gradient, the fusion pass may have it sum that gradient over the rows as it
// writes it: the dense layer's bias gradient (Fusion::layernorm_dx_sums, sum_input_gradient_into).
// Where an FP8 dense layer alone reads the output and keeps x^T's codes, the fusion pass may have this
// layer write the codes of its output instead of the output, in both layouts and at that layer's scale
// (Fusion::layernorm_fp8_codes, write_fp8_codes_for): the output's memory then holds the codes [N, C], one
// byte each, and the dense layer quantizes no input.
#pragma once

#include "nn/layer.h"

namespace dlbench {

struct DenseParameters;

class LayerNormLayer final : public Layer {
 public:
  LayerNormLayer(Network& net, std::string name, Activation& input, float eps = 1e-5f);
  const char* kind() const override { return "layernorm"; }
  void plan(MemoryPlan& plan) override;
  void forward(Phase phase) override;
  void backward() override;
  bool can_accumulate_input_grad(int) const override { return true; }
  bool backward_reads_output() const override { return false; }  // x, mean and rstd rebuild xhat
  // From now on the backward sums the input's gradient over the rows into `sums` (by the parameters'
  // accumulation mode): the bias gradient of the dense layer that makes the input.
  void sum_input_gradient_into(Tensor& sums) { input_grad_sums_ = &sums; }
  bool sums_input_gradient() const { return input_grad_sums_ != nullptr; }
  // From now on the forward writes the output's E4M3 codes for `reader`, the dense layer that alone reads
  // it (its scale and amax for x, its kept x^T codes), in place of the output.
  void write_fp8_codes_for(const DenseParameters& reader) { codes_reader_ = &reader; }
  bool writes_fp8_codes() const { return codes_reader_ != nullptr; }

 private:
  float eps_;
  Tensor weight_, dweight_, bias_, dbias_;
  Tensor mean_, rstd_;  // [N], forward -> backward
  Tensor* input_grad_sums_ = nullptr;
  const DenseParameters* codes_reader_ = nullptr;
};

}  // namespace dlbench
