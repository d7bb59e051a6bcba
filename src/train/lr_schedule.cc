#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "models/gpt.h"

namespace dlbench {

LearningRateSchedule::LearningRateSchedule(const RunConfig& config, int64_t steps_per_epoch,
                                           int64_t total_steps)
    : base_lr_(config.optimizer.lr),
      kind_(config.optimizer.lr_schedule),
      warmup_steps_(static_cast<int64_t>(std::llround(config.optimizer.lr_warmup_epochs * steps_per_epoch))),
      total_steps_(total_steps),
      decay_factor_(config.optimizer.lr_decay_factor) {
  // Warm-up in steps where given; a GPT model without any warm-up given ramps over 5% of the run, at most
  // 700 steps (llm.c's GPT-2 recipe): Adam's first steps, with a tiny second moment, would otherwise
  // take steps of the full rate.
  if (config.optimizer.lr_warmup_steps) {
    warmup_steps_ = *config.optimizer.lr_warmup_steps;
  } else if (is_gpt_model(config.model.name) && config.optimizer.lr_warmup_epochs == 0) {
    warmup_steps_ = std::clamp<int64_t>(total_steps / 20, 1, 700);
  }
  for (double epoch : config.optimizer.lr_decay_epochs) {
    decay_steps_.push_back(static_cast<int64_t>(std::llround(epoch * steps_per_epoch)));
  }
}

double LearningRateSchedule::at(int64_t step) const {
  // Warm-up ramps linearly so that the first step already moves (rate lr/W, never 0).
  if (step < warmup_steps_)
    return base_lr_ * static_cast<double>(step + 1) / static_cast<double>(warmup_steps_);
  switch (kind_) {
    case LrSchedule::constant:
      return base_lr_;
    case LrSchedule::step: {
      auto passed =
          std::count_if(decay_steps_.begin(), decay_steps_.end(), [&](int64_t s) { return step >= s; });
      return base_lr_ * std::pow(decay_factor_, static_cast<double>(passed));
    }
    case LrSchedule::cosine: {
      int64_t span = std::max<int64_t>(1, total_steps_ - warmup_steps_);
      double progress = std::min(1.0, static_cast<double>(step - warmup_steps_) / static_cast<double>(span));
      return base_lr_ * 0.5 * (1.0 + std::cos(M_PI * progress));
    }
  }
  return base_lr_;
}

}  // namespace dlbench
