// SgdOptimizer: SGD with momentum (optionally Nesterov) and weight decay, as one fused update over the flat
// FP32 parameter buffer (Backend::sgd_update), with weight decay switched off for BN and bias if asked.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "nn/memory_plan.h"
#include "train/config.h"

namespace dlbench {

class SgdOptimizer {
 public:
  SgdOptimizer(Backend& backend, MemoryPlan& memory, const RunConfig& config);
  // One update with learning rate `lr`; gradients are first multiplied by `grad_scale`
  // (1 / accumulated micro-batches, 1 / loss scale, 1 / ranks).
  void step(double lr, float grad_scale);

 private:
  Backend& backend_;
  MemoryPlan& memory_;
  std::vector<ParamSegment> segments_;
  SgdStep hyper_;
};

}  // namespace dlbench
