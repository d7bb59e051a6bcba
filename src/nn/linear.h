// LinearLayer: the classifier. y = x W^T + b.
//   input  x [N, I]  (a 4-D input is flattened per sample)
//   weight W [O, I], bias b [O]   U(-1/sqrt(I), 1/sqrt(I)), PyTorch's default
//   output y [N, O]
#pragma once

#include "nn/layer.h"

namespace dlbench {

class LinearLayer final : public Layer {
 public:
  LinearLayer(Network& net, std::string name, Activation& input, int64_t out_features);
  const char* kind() const override { return "linear"; }
  void plan(MemoryPlan& plan) override;
  void forward(Phase phase) override;
  void backward() override;
  bool can_accumulate_input_grad(int) const override { return true; }
  bool backward_reads_output() const override { return false; }  // dW, db and dx need x, dy and W only
  int64_t forward_macs() const override { return batch_ * in_features_ * out_features_; }

 private:
  int64_t batch_, in_features_, out_features_;
  Tensor weight_, dweight_, bias_, dbias_;
};

}  // namespace dlbench
