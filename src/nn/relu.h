// ReluLayer: y = max(x, 0); dx = dy * (y > 0). (ResNets fuse their ReLUs into batch norm; this layer is
// for networks that do not.)
#pragma once

#include "nn/layer.h"

namespace dlbench {

class ReluLayer final : public Layer {
 public:
  ReluLayer(Network& net, std::string name, Activation& input);
  const char* kind() const override { return "relu"; }
  void plan(MemoryPlan&) override {}
  void forward(Phase phase) override;
  void backward() override;
  bool backward_reads_input(int) const override { return false; }  // the mask comes from y
};

}  // namespace dlbench
