// Trainer: one training step of a built model, spelled out — load data, forward, backward, exchange
// gradients, update — plus evaluation and checkpoint state. The run loops (train.cc, bench) drive it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "core/tensor.h"
#include "data/dataset.h"
#include "data/token_source.h"
#include "models/model.h"
#include "parallel/communicator.h"
#include "parallel/gradient_exchange.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/optimizer.h"

namespace dlbench {

class Trainer {
 public:
  // The model must be built for config.batch_size and not yet finalized; the trainer finalizes it
  // (plans every op, allocates the arenas, initialises parameters from config.seed). With a communicator
  // of several ranks, rank 0's weights are broadcast, and every step sums the gradients of all ranks in
  // buckets that leave while backward runs (config.bucket_mb, config.allreduce_precision).
  Trainer(Backend& backend, Model& model, const RunConfig& config, parallel::Communicator* comm = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Copies samples `indices` (at most the batch size; fewer are padded by repeating the first) into
  // the network's inputs.
  void load_batch(const Dataset& data, std::span<const int64_t> indices);
  // Copies a batch already in host memory (a BatchPrefetcher's): images in the network's dtype and layout
  // (one copy) or in FP32 (copied, then cast on the device); labels i32.
  void load_batch(const Tensor& host_images, const Tensor& host_labels);
  // A token model's batch: the windows of `data` starting at `starts` (TokenSource::gather; at most the
  // batch size, fewer padded by repeating the first) as tokens and targets.
  void load_tokens(const TokenSource& data, std::span<const int64_t> starts);

  // One optimizer step over config.accumulate_steps micro-batches. `feed(k)` loads micro-batch k (or
  // does nothing when the inputs stay the same, as with synthetic data). Returns the mean loss over the
  // micro-batches if `read_loss`, else NaN (reading the loss waits for the device).
  float step(const std::function<void(int64_t micro_batch)>& feed, double lr, bool read_loss);

  // Records one whole step on the current input buffers (forward, backward, loss-scale check, update) for
  // replay as a CUDA graph; from then on step() replays it after feed(0). The learning rate and the loss
  // scale are read from device memory, so they still change between replays. False when the backend
  // cannot record or with several micro-batches (each loads data from the host). Call after at least one
  // ordinary step (libraries initialise lazily).
  bool record_step();
  bool step_recorded() const { return recorded_step_ != nullptr; }
  // The loss of the last step run or replayed (waits for the device).
  float read_loss();

  // Top-1 accuracy over the first `count` samples of `data` (inference mode: running batch-norm
  // statistics). `keep_going(done, count)` is asked after each batch; nullopt when it said no (a stop).
  std::optional<double> evaluate(const Dataset& data, int64_t count,
                                 const std::function<bool(int64_t done, int64_t count)>& keep_going);
  // The same with the batches loaded by `load(start, n)`: samples start .. start + n - 1 (n at most the
  // batch size; the rest of the batch padded as load_batch pads) into the network's inputs, returning
  // their labels in host memory (a GPU pipeline's next()).
  using BatchLoader = std::function<std::span<const int32_t>(int64_t start, int64_t n)>;
  std::optional<double> evaluate(int64_t count, const BatchLoader& load,
                                 const std::function<bool(int64_t done, int64_t count)>& keep_going);

  // A token model's mean loss (nats per token) over the windows of `data` at `starts`, in batches (the
  // last one filled up with the first windows again, so every window counts once or, in that batch, twice
  // at most); nullopt when `keep_going(done, count)` said no after a batch.
  std::optional<double> evaluate_loss(const TokenSource& data, std::span<const int64_t> starts,
                                      const std::function<bool(int64_t done, int64_t count)>& keep_going);

  Checkpoint make_checkpoint(int64_t step, int64_t epoch) const;
  void restore(const Checkpoint& checkpoint);

  // Loss scaling (fp16): the current scale and the steps skipped because gradients overflowed (both read
  // from the device: they wait for it).
  float loss_scale() const { return read_scalars().loss_scale; }
  int64_t skipped_steps() const { return read_scalars().skipped_steps; }

  // Sums the whole gradient buffer over the ranks once more, alone and synchronised, `iterations` times:
  // the mean milliseconds of one exchange (what a step would pay with no overlap). 0 with one rank.
  double time_gradient_exchange(int iterations);
  int ranks() const { return ranks_; }

  Model& model() { return model_; }
  Network& net() { return *model_.net; }
  // Samples (images, or a token model's sequences) of one optimizer step on this rank.
  int64_t images_per_step() const { return batch_ * accumulate_steps_; }

 private:
  // FP8 delayed scaling has no amax history before the first step, which would run at scales of 1 (E5M2
  // then loses every gradient below 2^-16). One forward and backward pass on the first batch, its
  // gradients thrown away, records the amaxes and makes the first step's scales from them.
  void calibrate_fp8_scales(const std::function<void(int64_t)>& feed);
  // Forward and backward of micro-batch `micro` on the current inputs.
  void forward_backward(int64_t micro);
  // Everything after the micro-batches' backward passes: gradients to FP32, overflow check, update,
  // loss-scale adaptation. Issues device work only (no host synchronisation).
  void finish_step();
  StepScalars read_scalars() const;
  Tensor scalar_view(size_t offset, DType dtype) const;  // one field of the device StepScalars

  Backend& backend_;
  Model& model_;
  int64_t batch_;
  int64_t accumulate_steps_;
  std::unique_ptr<Optimizer> optimizer_;
  HostBuffer staging_images_, staging_labels_;  // host side of every batch copy (a token model's tokens
                                                // and targets)
  void* device_staging_ = nullptr;              // FP32 images on the device, cast to a narrower compute dtype
  StepScalars* scalars_ = nullptr;  // in the backend's memory: lr, loss scale, overflow flag, counters
  bool dynamic_loss_scale_ = false;
  // FP8: the first step's scales are still to be made from a pass of its own (calibrate_fp8_scales);
  // false once made, or where a checkpoint brought them.
  bool fp8_scales_pending_ = false;
  std::unique_ptr<CapturedWork> recorded_step_;
  parallel::Communicator* comm_ = nullptr;
  int ranks_ = 1;
  std::unique_ptr<parallel::GradientExchange> exchange_;

  std::string config_digest_;
};

}  // namespace dlbench
