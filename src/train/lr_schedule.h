// Learning rate per optimizer step: linear warm-up (in epochs or steps; GPT models by default over 5% of
// the run), then constant, step decay or cosine decay to zero.
#pragma once

#include <cstdint>
#include <vector>

#include "train/config.h"

namespace dlbench {

class LearningRateSchedule {
 public:
  LearningRateSchedule(const RunConfig& config, int64_t steps_per_epoch, int64_t total_steps);
  // The rate for optimizer step `step` (0-based).
  double at(int64_t step) const;

 private:
  double base_lr_;
  LrSchedule kind_;
  int64_t warmup_steps_, total_steps_;
  std::vector<int64_t> decay_steps_;
  double decay_factor_;
};

}  // namespace dlbench
