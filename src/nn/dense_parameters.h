// A dense layer's parameters: W [O, I] and b [O] with their gradients, in the network's compute dtype,
// declared to the memory plan as `<name>.weight` and `<name>.bias`. LinearLayer holds one; the fused MLP
// (nn/mlp.h) holds two, under the names of the layers it replaces, so checkpoints and initial values do
// not depend on what was fused.
//   initialisation: U(-1/sqrt(I), 1/sqrt(I)) for both (PyTorch's default); or, with a normal_std above 0,
//   W ~ N(0, normal_std^2) and b = 0 (GPT-2's)
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace dlbench {

class MemoryPlan;
class Network;

struct DenseParameters {
  DenseParameters(Network& net, int64_t in_features, int64_t out_features, double normal_std);
  void declare(MemoryPlan& plan, const std::string& name);

  int64_t in_features, out_features;
  double normal_std;
  Tensor weight, dweight, bias, dbias;
};

}  // namespace dlbench
