#include "train/optimizer.h"

namespace dlbench {

SgdOptimizer::SgdOptimizer(Backend& backend, MemoryPlan& memory, const RunConfig& config)
    : backend_(backend), memory_(memory), segments_(memory.segments(config.optimizer.decay_norm_and_bias)) {
  hyper_.momentum = static_cast<float>(config.optimizer.momentum);
  hyper_.weight_decay = static_cast<float>(config.optimizer.weight_decay);
  hyper_.nesterov = config.optimizer.nesterov;
}

void SgdOptimizer::step(float grad_scale, const StepScalars* scalars) {
  hyper_.grad_scale = grad_scale;
  backend_.sgd_update(memory_.flat_parameters(), memory_.flat_gradients(), memory_.flat_momentum(), segments_,
                      hyper_, scalars);
}

}  // namespace dlbench
