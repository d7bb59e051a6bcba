// GeluLayer: GPT-2's activation, tanh form: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
//   input x, output y: the same shape (any). Backward: dx = dy * gelu'(x), from the input.
#pragma once

#include "nn/layer.h"

namespace dlbench {

class GeluLayer final : public Layer {
 public:
  GeluLayer(Network& net, std::string name, Activation& input);
  const char* kind() const override { return "gelu"; }
  void plan(MemoryPlan&) override {}
  void forward(Phase phase) override;
  void backward() override;
  bool backward_reads_output() const override { return false; }
};

}  // namespace dlbench
