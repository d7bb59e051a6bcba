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
  // One update; gradients are first multiplied by `grad_scale` (1 / accumulated micro-batches, 1 / ranks).
  // The learning rate and the loss scale (the gradients are divided by it too) come from `scalars`, in
  // the backend's memory; the update is skipped there when scalars->overflow is set.
  void step(float grad_scale, const StepScalars* scalars);

 private:
  Backend& backend_;
  MemoryPlan& memory_;
  std::vector<ParamSegment> segments_;
  SgdStep hyper_;
};

}  // namespace dlbench
