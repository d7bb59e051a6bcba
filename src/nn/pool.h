// Pooling layers.
//   MaxPoolLayer         [N, C, H, W] -> [N, C, P, Q]  max over kernel windows (padding never wins)
//   GlobalAvgPoolLayer   [N, C, H, W] -> [N, C]        mean over H x W (the ResNet head)
#pragma once

#include <memory>

#include "nn/layer.h"

namespace dlbench {

// The geometry of a max pool over x in `net` (square kernel, stride and padding).
PoolGeometry max_pool_geometry(const Network& net, const Tensor& x, int64_t kernel, int64_t stride,
                               int64_t pad);

class MaxPoolLayer final : public Layer {
 public:
  MaxPoolLayer(Network& net, std::string name, Activation& input, int64_t kernel, int64_t stride,
               int64_t pad);
  const char* kind() const override { return "maxpool"; }
  void plan(MemoryPlan& plan) override;
  void forward(Phase phase) override;
  void backward() override;
  const PoolGeometry& geometry() const { return geometry_; }

 private:
  PoolGeometry geometry_;
  std::unique_ptr<PoolPlan> plan_;
  void* saved_ = nullptr;  // argmax state kept from forward to backward
};

class GlobalAvgPoolLayer final : public Layer {
 public:
  GlobalAvgPoolLayer(Network& net, std::string name, Activation& input);
  const char* kind() const override { return "avgpool"; }
  void plan(MemoryPlan& plan) override;
  void forward(Phase phase) override;
  void backward() override;

 private:
  PoolGeometry geometry_;
  std::unique_ptr<PoolPlan> plan_;
  void* saved_ = nullptr;
};

}  // namespace dlbench
