// LinearLayer: y = x W^T + b, a ResNet's classifier and a transformer's projections.
//   input  x [N, I]  (a 4-D input is flattened per sample; a transformer's rows are its B * T tokens)
//   weight W [O, I], bias b [O]   (nn/dense_parameters.h: PyTorch's or GPT-2's initialisation)
//   output y [N, O]
// With a residual (the fusion pass's, where the backend adds it in the GEMM: Fusion::dense_residual),
// y = x W^T + b + r, in the place and into the output of the residual add it replaces; backward hands dy
// to r's gradient as that add would.
// Where a layer norm reads the output first (a transformer's residual stream), its backward may sum the
// output's gradient for this layer's bias gradient (the fusion pass's Fusion::layernorm_dx_sums,
// bias_gradient_made_by_reader), and the layer's backward then makes none.
// Where attention reads the input (a transformer's attn.c_proj), the sums over the rows of the input's
// gradient give the v third of c_attn's bias gradient (Fusion::attention_qkv_bias): the layer writes them
// for it (write_input_gradient_sums_into).
// In FP8 the codes of x^T and W^T are kept from the forward for the backward's GEMMs where the backend
// runs FP8 GEMMs (DenseParameters::keep_codes), values the layer saves.
#pragma once

#include "nn/dense_parameters.h"
#include "nn/layer.h"

namespace dlbench {

class LinearLayer final : public Layer {
 public:
  LinearLayer(Network& net, std::string name, Activation& input, int64_t out_features,
              double normal_std = 0.0);
  LinearLayer(Network& net, std::string name, Activation& input, Activation& residual, Activation& output,
              int64_t out_features, double normal_std);
  const char* kind() const override { return residual() ? "linear+add" : "linear"; }
  void plan(MemoryPlan& plan) override;
  void forward(Phase phase) override;
  void backward() override;
  bool can_accumulate_input_grad(int) const override { return true; }
  // Never the residual; not x either where x^T's FP8 codes are kept for the weight GEMM.
  bool backward_reads_input(int index) const override {
    return index == 0 && !params_.backward_needs_no_input();
  }
  bool passes_output_gradient_to(int index) const override { return index == 1; }
  bool backward_reads_output() const override { return false; }  // dW, db and dx need x, dy and W only
  std::vector<SavedValue> saved_values() override { return params_.kept_codes(name_); }
  int64_t forward_macs() const override { return batch_ * params_.in_features * params_.out_features; }

  DenseGeometry geometry() const;
  bool in_fp8() const { return params_.in_fp8(); }
  // The bias gradient, which from now on the first reader of the output makes (a layer norm by summing the
  // output's gradient as its backward leaves it, attention from a third of it) and this layer's backward
  // does not.
  Tensor& bias_gradient_made_by_reader() {
    bias_by_reader_ = true;
    return params_.dbias;
  }
  // The parameters, whose input codes from now on the layer that writes the input makes
  // (Fusion::layernorm_fp8_codes): the input's memory holds them, and the forward quantizes no input.
  const DenseParameters& input_codes_made_by_writer() {
    codes_by_writer_ = true;
    return params_;
  }
  // From now on, in the backward of a step that overwrites the parameter gradients, the sums over the rows
  // of the input's gradient go to elements [first, first + in_features) of `sums`: db W, as the rows of
  // dx = dy W sum to (the sum of dy's rows) W, written once the bias gradient is complete (one GEMV, no
  // pass over dx). A step that adds to the parameter gradients (a later micro-batch) writes none: db then
  // holds earlier micro-batches' sums too, and the reader sums the input's gradient itself.
  void write_input_gradient_sums_into(Tensor& sums, int64_t first) {
    input_sums_ = &sums;
    input_sums_first_ = first;
  }
  bool backward_needs_no_input() const { return params_.backward_needs_no_input(); }
  int64_t out_features() const { return params_.out_features; }
  double normal_std() const { return params_.normal_std; }
  Activation* residual() const { return inputs_.size() > 1 ? inputs_[1] : nullptr; }

 private:
  int64_t batch_;
  DenseParameters params_;
  bool bias_by_reader_ = false;
  bool codes_by_writer_ = false;
  Tensor* input_sums_ = nullptr;  // write_input_gradient_sums_into
  int64_t input_sums_first_ = 0;
};

}  // namespace dlbench
