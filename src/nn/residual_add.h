// ResidualAddLayer: y = a + b (a transformer block's residual connection; the same shapes).
// Backward hands dy to both inputs: each input's gradient is overwritten with dy or dy is added to it, as
// the gradient modes say (layer.h). Neither value is read in backward.
#pragma once

#include "nn/layer.h"

namespace dlbench {

// Hands dy to an input's gradient by `mode`: nothing, dx = dy (nothing to do where the memory plan gave
// both one placement: Layer::passes_output_gradient_to), or dx += dy.
void pass_gradient(Backend& backend, GradMode mode, const Tensor& dy, Tensor& dx);

class ResidualAddLayer final : public Layer {
 public:
  ResidualAddLayer(Network& net, std::string name, Activation& a, Activation& b);
  const char* kind() const override { return "add"; }
  void plan(MemoryPlan&) override {}
  void forward(Phase phase) override;
  void backward() override;
  bool can_accumulate_input_grad(int) const override { return true; }
  bool backward_reads_input(int) const override { return false; }
  bool passes_output_gradient_to(int index) const override { return index == 0; }  // the first: the stream
  bool backward_reads_output() const override { return false; }
};

}  // namespace dlbench
