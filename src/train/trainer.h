// Trainer: one training step of a built model, spelled out — load data, forward, backward, exchange
// gradients, update — plus evaluation and checkpoint state. The run loops (train.cc, bench) drive it.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "core/tensor.h"
#include "data/dataset.h"
#include "models/resnet.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/optimizer.h"

namespace dlbench {

class Trainer {
 public:
  // The model must be built for config.batch_size and not yet finalized; the trainer finalizes it
  // (plans every op, allocates the arenas, initialises parameters from config.seed).
  Trainer(Backend& backend, Model& model, const RunConfig& config);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Copies samples `indices` (at most the batch size; fewer are padded by repeating the first) into
  // the network's inputs.
  void load_batch(const Dataset& data, std::span<const int64_t> indices);

  // One optimizer step over config.accumulate_steps micro-batches. `feed(k)` loads micro-batch k (or
  // does nothing when the inputs stay the same, as with synthetic data). Returns the mean loss over the
  // micro-batches if `read_loss`, else NaN (reading the loss waits for the device).
  float step(const std::function<void(int64_t micro_batch)>& feed, double lr, bool read_loss);

  // Records one whole step on the current inputs (forward, backward, update at rate `lr`) for replay as a
  // CUDA graph. nullptr when the backend cannot capture, or the step needs the host (dynamic loss scaling
  // reads the overflow flag; several micro-batches load data).
  std::unique_ptr<CapturedWork> capture_step(double lr);
  // The loss of the last step run or replayed (waits for the device).
  float read_loss();

  // Top-1 accuracy over the whole dataset (inference mode: running batch-norm statistics).
  double evaluate(const Dataset& data);

  Checkpoint make_checkpoint(int64_t step, int64_t epoch) const;
  void restore(const Checkpoint& checkpoint);

  // Dynamic loss scaling (fp16): the current scale and the steps skipped because gradients overflowed.
  float loss_scale() const { return model_.net->loss_scale(); }
  int64_t skipped_steps() const { return skipped_steps_; }

  Model& model() { return model_; }
  Network& net() { return *model_.net; }
  int64_t images_per_step() const { return batch_ * accumulate_steps_; }

 private:
  bool gradients_overflowed();  // reads a flag from the device: waits for the step

  Backend& backend_;
  Model& model_;
  int64_t batch_;
  int64_t accumulate_steps_;
  std::unique_ptr<SgdOptimizer> optimizer_;
  HostBuffer staging_images_, staging_labels_;  // host side of every batch copy
  void* device_staging_ = nullptr;              // FP32 images on the device, cast to a narrower compute dtype
  Tensor overflow_flag_;                        // i32 [1] on the device: set when a gradient is Inf/NaN
  bool dynamic_loss_scale_ = false;
  int64_t growth_interval_ = 2000;
  int64_t good_steps_ = 0, skipped_steps_ = 0;

  std::string config_digest_;
};

}  // namespace dlbench
