#include "train/optimizer.h"

#include <cstdint>

#include "core/status.h"

namespace dlbench {

SgdOptimizer::SgdOptimizer(Backend& backend, MemoryPlan& memory, const RunConfig& config)
    : backend_(backend),
      memory_(memory),
      segments_(memory.segments(config.optimizer.decay_norm_and_bias)),
      copies_(memory.compute_copies()) {
  hyper_.momentum = static_cast<float>(config.optimizer.momentum);
  hyper_.weight_decay = static_cast<float>(config.optimizer.weight_decay);
  hyper_.nesterov = config.optimizer.nesterov;
}

void SgdOptimizer::step(float grad_scale, const StepScalars* scalars) {
  hyper_.grad_scale = grad_scale;
  backend_.sgd_update(memory_.flat_parameters(), memory_.flat_gradients(), memory_.flat_momentum(), segments_,
                      hyper_, scalars, copies_);
}

AdamWOptimizer::AdamWOptimizer(Backend& backend, MemoryPlan& memory, const RunConfig& config)
    // Biases and layer norms never decay (nanoGPT's parameter groups): decay_norm_and_bias false.
    : backend_(backend),
      memory_(memory),
      segments_(memory.segments(/*decay_norm_and_bias=*/false)),
      copies_(memory.compute_copies()),
      stored_gradients_(memory.stored_gradients()) {
  DLB_CHECK(memory.has_second_moment() && memory.allocated(), "AdamW needs the plan's second moment");
  const OptimizerConfig& o = config.optimizer;
  hyper_.beta1 = static_cast<float>(o.adam_beta1);
  hyper_.beta2 = static_cast<float>(o.adam_beta2);
  hyper_.eps = static_cast<float>(o.adam_eps);
  hyper_.weight_decay = static_cast<float>(o.weight_decay);
  hyper_.max_grad_norm = static_cast<float>(o.clip_grad_norm.value_or(0));
  norm_squared_ = backend.allocate(sizeof(float));
  hyper_.grad_norm_squared = static_cast<const float*>(norm_squared_);
  step_count_ = static_cast<int32_t*>(backend.allocate(sizeof(int32_t)));
  hyper_.step_count = step_count_;
  set_steps_taken(0);
}

AdamWOptimizer::~AdamWOptimizer() {
  backend_.deallocate(step_count_);
  backend_.deallocate(norm_squared_);
}

int64_t AdamWOptimizer::steps_taken() const {
  int32_t count = 0;
  backend_.copy_to_host(&count, step_count_, sizeof count);
  return count;
}

void AdamWOptimizer::set_steps_taken(int64_t steps) {
  DLB_CHECK(steps >= 0 && steps < INT32_MAX, "AdamW: {} steps taken", steps);
  const auto count = static_cast<int32_t>(steps);
  backend_.copy_to_device(step_count_, &count, sizeof count);
}

void AdamWOptimizer::step(float grad_scale, const StepScalars* scalars) {
  hyper_.grad_scale = grad_scale;
  if (hyper_.max_grad_norm > 0) {
    // The global norm of the stored gradients, summed in backend memory: the update reads it there.
    Tensor norm(norm_squared_, {1}, DType::f32, Layout::nchw, backend_.device());
    Accumulate mode = Accumulate::overwrite;
    for (const Tensor& gradients : stored_gradients_) {
      backend_.sum_of_squares(gradients, norm, mode);
      mode = Accumulate::add;
    }
  }
  backend_.adamw_update(memory_.flat_parameters(), memory_.flat_gradients(), memory_.flat_momentum(),
                        memory_.flat_second_moment(), segments_, hyper_, scalars, copies_);
}

void prepare_optimizer_memory(MemoryPlan& memory, const RunConfig& config) {
  if (config.optimizer.kind == OptimizerKind::adamw) memory.require_second_moment();
}

std::unique_ptr<Optimizer> make_optimizer(Backend& backend, MemoryPlan& memory, const RunConfig& config) {
  if (config.optimizer.kind == OptimizerKind::adamw)
    return std::make_unique<AdamWOptimizer>(backend, memory, config);
  return std::make_unique<SgdOptimizer>(backend, memory, config);
}

}  // namespace dlbench
