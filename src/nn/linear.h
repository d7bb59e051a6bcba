// LinearLayer: y = x W^T + b, a ResNet's classifier and a transformer's projections.
//   input  x [N, I]  (a 4-D input is flattened per sample; a transformer's rows are its B * T tokens)
//   weight W [O, I], bias b [O]   U(-1/sqrt(I), 1/sqrt(I)), PyTorch's default; or, with a normal_std
//                                 above 0, W ~ N(0, normal_std^2) and b = 0 (GPT-2's initialisation)
//   output y [N, O]
#pragma once

#include "nn/layer.h"

namespace dlbench {

class LinearLayer final : public Layer {
 public:
  LinearLayer(Network& net, std::string name, Activation& input, int64_t out_features,
              double normal_std = 0.0);
  const char* kind() const override { return "linear"; }
  void plan(MemoryPlan& plan) override;
  void forward(Phase phase) override;
  void backward() override;
  bool can_accumulate_input_grad(int) const override { return true; }
  bool backward_reads_output() const override { return false; }  // dW, db and dx need x, dy and W only
  int64_t forward_macs() const override { return batch_ * in_features_ * out_features_; }

 private:
  int64_t batch_, in_features_, out_features_;
  double normal_std_;
  Tensor weight_, dweight_, bias_, dbias_;
};

}  // namespace dlbench
