// The optimizers, each one fused update over the flat FP32 parameter buffer:
//   SgdOptimizer    SGD with momentum (optionally Nesterov) and weight decay (Backend::sgd_update), weight
//                   decay switched off for BN and bias if asked; the ResNets' optimizer.
//   AdamWOptimizer  AdamW with decoupled weight decay on matrices and embeddings only, and gradient
//                   clipping by the global norm (Backend::sum_of_squares, then Backend::adamw_update); the
//                   GPT models'. Its first moment m is the plan's momentum buffer, its second moment v the
//                   plan's second-moment buffer (MemoryPlan::require_second_moment, asked before the plan
//                   allocates: prepare()).
// Under mixed precision either update also refreshes the FP16/BF16 copies of the weights, and with one
// rank reads the FP16/BF16 gradients as the backward wrote them, in the same pass
// (MemoryPlan::compute_copies).
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "nn/memory_plan.h"
#include "train/config.h"

namespace dlbench {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update; gradients are first multiplied by `grad_scale` (1 / accumulated micro-batches, 1 / ranks).
  // The learning rate and the loss scale (the gradients are divided by it too) come from `scalars`, in
  // the backend's memory; the update is skipped there when scalars->overflow is set.
  virtual void step(float grad_scale, const StepScalars* scalars) = 0;
  // The updates applied so far (AdamW's bias corrections count them; a step skipped for an overflow is
  // not one); a resumed run sets it. Reading it may wait for the device.
  virtual int64_t steps_taken() const { return 0; }
  virtual void set_steps_taken(int64_t) {}
};

class SgdOptimizer final : public Optimizer {
 public:
  SgdOptimizer(Backend& backend, MemoryPlan& memory, const RunConfig& config);
  void step(float grad_scale, const StepScalars* scalars) override;

 private:
  Backend& backend_;
  MemoryPlan& memory_;
  std::vector<ParamSegment> segments_;
  ComputeCopies copies_;  // the plan's, fixed once it is allocated
  SgdStep hyper_;
};

class AdamWOptimizer final : public Optimizer {
 public:
  // `memory` must have been prepared (prepare_optimizer_memory) and allocated.
  AdamWOptimizer(Backend& backend, MemoryPlan& memory, const RunConfig& config);
  ~AdamWOptimizer() override;
  AdamWOptimizer(const AdamWOptimizer&) = delete;
  AdamWOptimizer& operator=(const AdamWOptimizer&) = delete;
  void step(float grad_scale, const StepScalars* scalars) override;
  int64_t steps_taken() const override;
  void set_steps_taken(int64_t steps) override;

 private:
  Backend& backend_;
  MemoryPlan& memory_;
  std::vector<ParamSegment> segments_;
  ComputeCopies copies_;
  std::vector<Tensor> stored_gradients_;  // what the clipping norm sums
  AdamWStep hyper_;
  // In backend memory: f32 [1] the gradients' sum of squares, i32 [1] the updates applied (the update
  // reads and advances it there, so that a step recorded as a CUDA graph replays with a rising t).
  void* norm_squared_ = nullptr;
  int32_t* step_count_ = nullptr;
};

// Asks `memory` for what the optimizer of `config` keeps beside the momentum buffer (AdamW: the second
// moment); before the network is finalized.
void prepare_optimizer_memory(MemoryPlan& memory, const RunConfig& config);
std::unique_ptr<Optimizer> make_optimizer(Backend& backend, MemoryPlan& memory, const RunConfig& config);

}  // namespace dlbench
