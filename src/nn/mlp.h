// MlpLayer: a transformer's MLP as one layer, made by the fusion pass (Fusion::dense_gelu_dense) from
// c_fc (dense), GELU and c_proj (dense), and the residual add after them where that is fused too:
//   h = x Wfc^T + bfc,  g = gelu(h),  y = g Wproj^T + bproj (+ r)
// On a backend with GEMM epilogues that is two GEMMs (the first adds the bias and applies GELU, saving h;
// the second adds the bias and the residual), and the backward's GEMMs take GELU's gradient and the
// biases' (dense_*). In FP8, c_fc's GEMM writes h alone, and GELU and its gradient are taken by the passes
// that quantize c_proj's input and c_fc's output gradient: g is never stored (FP8 GEMMs with GELU's
// epilogues ran far below their plain rate). The parameters are the two layers' under their names
// (`<fc>.weight`, ...); h and g (in FP8 h alone) are saved for the backward (Layer::saved_values), dh is
// the backward's scratch (Layer::backward_scratch). In FP8 on a backend whose GEMMs run in FP8, each
// dense's codes of x^T (c_proj's: gelu(h)'s) and W^T are saved too (DenseParameters::keep_codes).
#pragma once

#include "nn/dense_parameters.h"
#include "nn/layer.h"

namespace dlbench {

class LinearLayer;

class MlpLayer final : public Layer {
 public:
  // `fc` and `proj` are the layers replaced (read for their names, shapes and initialisation); `residual`
  // (may be null) is added to the output, which is then `output` (the residual add's).
  MlpLayer(Network& net, std::string name, const LinearLayer& fc, const LinearLayer& proj, Activation& input,
           Activation* residual, Activation& output);
  const char* kind() const override { return residual() ? "mlp+add" : "mlp"; }
  void plan(MemoryPlan& plan) override;
  void forward(Phase phase) override;
  void backward() override;
  bool can_accumulate_input_grad(int) const override { return true; }
  // Never the residual; not x either where c_fc keeps x^T's FP8 codes for its weight GEMM.
  bool backward_reads_input(int index) const override { return index == 0 && !fc_.backward_needs_no_input(); }
  bool passes_output_gradient_to(int index) const override { return index == 1; }
  bool backward_reads_output() const override { return false; }
  std::vector<SavedValue> saved_values() override;
  std::vector<SavedValue> backward_scratch() override { return {{name_ + ".dh", &pre_grad_}}; }
  void recompute_saved_values() override;  // h and g (FP8: h): c_fc's GEMM alone (no codes are kept then)
  int64_t forward_macs() const override;

  Activation* residual() const { return inputs_.size() > 1 ? inputs_[1] : nullptr; }
  bool in_fp8() const { return fp8_; }
  // c_proj's shape, and its bias gradient, which from now on the first reader of the output makes
  // (LinearLayer::bias_gradient_made_by_reader).
  DenseGeometry proj_geometry() const;
  Tensor& bias_gradient_made_by_reader() {
    proj_bias_by_reader_ = true;
    return proj_.dbias;
  }
  // c_fc's shape, and its parameters, whose input codes from now on the layer that writes the input makes
  // (LinearLayer::input_codes_made_by_writer).
  DenseGeometry fc_geometry() const;
  const DenseParameters& input_codes_made_by_writer() {
    codes_by_writer_ = true;
    return fc_;
  }
  bool backward_needs_no_input() const { return fc_.backward_needs_no_input(); }

 private:
  // h and g = gelu(h) from the input: c_fc's GEMM with its epilogue (in FP8 h alone), in a training pass
  // or not (DenseParameters::fp8).
  void first_dense(bool training);

  int64_t rows_;
  std::string fc_name_, proj_name_;
  DenseParameters fc_, proj_;
  // In FP8 GELU and its gradient are taken by the passes that quantize c_proj's input and c_fc's output
  // gradient, on their way from h and dg: g = gelu(h) is never stored (hidden_ holds no memory).
  bool fp8_;
  bool proj_bias_by_reader_ = false;
  bool codes_by_writer_ = false;
  Tensor pre_, hidden_;  // h = x Wfc^T + bfc and g = gelu(h), [N, hidden]
  Tensor pre_grad_;      // dh in the backward (in FP8 dg = dy Wproj, GELU's gradient taken by c_fc's op)
};

}  // namespace dlbench
