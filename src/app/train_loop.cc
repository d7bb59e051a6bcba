#include <fmt/format.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "app/run_setup.h"
#include "backend/backend_factory.h"
#include "bench/clock_sampler.h"
#include "bench/gpu_info.h"
#include "bench/layer_profile.h"
#include "bench/measure.h"
#include "bench/system_info.h"
#include "core/file_io.h"
#include "core/machine_limits.h"
#include "core/signals.h"
#include "core/status.h"
#include "core/timeline.h"
#include "core/timer.h"
#include "data/batch_prefetcher.h"
#include "data/epoch_sampler.h"
#include "data/gpu_image_pipeline.h"
#include "data/idx.h"
#include "data/image_dataset.h"
#include "data/shard.h"
#include "data/synthetic.h"
#include "data/token_sampler.h"
#include "models/resnet.h"
#include "parallel/config_check.h"
#include "parallel/launch.h"
#include "train/checkpoint.h"
#include "train/lr_schedule.h"
#include "train/memory_fit.h"
#include "train/mlperf_log.h"
#include "train/trainer.h"

namespace dlbench::run_detail {

namespace {

// What a checkpoint of this run records and a resumed run must repeat (checkpoint.h).
std::string run_settings(RunSetup& s) {
  nlohmann::json settings = resume_settings(s.config);
  settings["ranks"] = s.comm->size();
  settings["data"] = training_data_digest(s);
  return settings.dump();
}

// When a train run prints a progress line: every --log-every steps when given, else when log_seconds have
// passed since the last line (a CPU step takes seconds, a GPU step milliseconds: neither a fixed count
// suits both), and always at the end.
class ProgressClock {
 public:
  ProgressClock(const RunConfig& config, int64_t total_steps, int64_t samples_per_step_of_all_ranks,
                RateUnit unit)
      : config_(config),
        total_steps_(total_steps),
        samples_per_step_(samples_per_step_of_all_ranks),
        unit_(unit) {}

  // The first line's rate counts from here: the loop's start, not the set-up before it.
  void start() { since_.restart(); }

  // After each step: "step 12/100  epoch 1  loss ...  lr ...  img/s  ETA" (tokens/s for a token model),
  // when a line is due; the rate is the one since the last line.
  void after_step(int64_t step_number, int64_t epoch_number, double loss, double lr) {
    ++steps_since_line_;
    if (!due(step_number, step_number == total_steps_)) return;
    const double seconds_per_step = since_.seconds() / static_cast<double>(steps_since_line_);
    const double rate = static_cast<double>(samples_per_step_) * unit_.per_sample / seconds_per_step;
    const double eta = static_cast<double>(total_steps_ - step_number) * seconds_per_step;
    say("step %lld/%lld  epoch %lld  loss %.4f  lr %.4g  %.1f %s  ETA %s\n",
        static_cast<long long>(step_number), static_cast<long long>(total_steps_),
        static_cast<long long>(epoch_number), loss, lr, rate, unit_.name, format_duration(eta).c_str());
    std::fflush(stdout);
    since_.restart();
    steps_since_line_ = 0;
  }

 private:
  bool due(int64_t step_number, bool last) const {
    if (last) return true;
    if (config_.output.log_every) return step_number % *config_.output.log_every == 0;
    return since_.seconds() >= config_.output.log_seconds;
  }

  const RunConfig& config_;
  const int64_t total_steps_, samples_per_step_;
  const RateUnit unit_;
  WallTimer since_;
  int64_t steps_since_line_ = 0;
};

// The train loop's state between steps, and where a stop leaves it.
struct TrainProgress {
  int64_t first_step = 0, total_steps = 0;
  int64_t saved_step = -1;  // the step of the last checkpoint this run saved (-1: none yet)
};

void save_checkpoint_announced(const RunConfig& config, RunSetup& s, TrainProgress& progress, int64_t step,
                               int64_t epoch) {
  if (config.output.checkpoint_path.empty() || progress.saved_step == step) return;
  progress.saved_step = step;
  if (s.comm->rank() != 0) return;
  WallTimer timer;
  Checkpoint checkpoint = s.trainer->make_checkpoint(step, epoch);
  checkpoint.settings = run_settings(s);
  save_checkpoint(config.output.checkpoint_path, checkpoint);
  say("checkpoint of step %lld saved to %s (%.1f s)\n", static_cast<long long>(step),
      config.output.checkpoint_path.c_str(), timer.seconds());
  std::fflush(stdout);
}

// Every rank agrees whether a stop was asked (a collective: the ranks stop after the same step). If so, the
// state after `step` is saved where the run keeps checkpoints, and Stopped says where the run stopped.
void stop_if_asked(const RunConfig& config, RunSetup& s, TrainProgress& progress, int64_t step,
                   int64_t epoch) {
  if (s.comm->max(stop_requested() ? 1.0 : 0.0) == 0.0) return;
  save_checkpoint_announced(config, s, progress, step, epoch);
  const int signal_number = stop_signal() != 0 ? stop_signal() : SIGTERM;
  std::string kept;
  if (progress.saved_step >= 0) {
    kept = fmt::format("checkpoint of step {} in {}; continue with --resume {}", progress.saved_step,
                       config.output.checkpoint_path, config.output.checkpoint_path);
  } else if (!config.output.resume_path.empty()) {
    kept = fmt::format("nothing saved (no --checkpoint); {} is as it was", config.output.resume_path);
  } else {
    kept = "nothing saved (give --checkpoint FILE to keep a stopped run's state)";
  }
  throw Stopped(signal_number,
                s.comm->rank() != 0
                    ? std::string()
                    : fmt::format("stopped by {} after step {} of {}: {}; no result written",
                                  signal_name(signal_number), step, progress.total_steps, kept));
}

// --resume: the checkpoint's state, after checking it continues this run; returns its step.
int64_t resume_from_checkpoint(const RunConfig& config, RunSetup& s, int64_t total_steps) {
  Checkpoint checkpoint = load_checkpoint(config.output.resume_path);
  s.trainer->restore(checkpoint);  // first the model and its sizes, then the settings
  const std::vector<std::string> differences = check_checkpoint_settings(
      checkpoint, run_settings(s),
      config.output.resume_anyway ? SettingsMismatch::continue_anyway : SettingsMismatch::refuse,
      config.output.resume_path);
  for (const std::string& difference : differences)
    say("--resume-anyway: continuing with %s\n", difference.c_str());
  DLB_REQUIRE(checkpoint.step < total_steps,
              "--resume {}: the checkpoint is at step {}, the run ends at step {}; "
              "ask for more --steps or --epochs",
              config.output.resume_path, checkpoint.step, total_steps);
  return checkpoint.step;
}

void log_mlperf_start(MlperfLog& mllog, const RunConfig& config, RunSetup& s, int64_t init_start_ms) {
  if (!mllog.enabled()) return;
  mllog.start("init_start", nullptr, {{"time_at_process_start_ms", init_start_ms}});
  mllog.point("submission_benchmark", config.model.name);
  mllog.point("submission_platform",
              s.memory_fit.device ? s.memory_fit.device->name : device_name(config.device));
  mllog.point("global_batch_size", s.trainer->images_per_step() * s.comm->size());
  mllog.point("gradient_accumulation_steps", config.accumulate_steps);
  mllog.point("train_samples",
              s.train_tokens ? s.train_tokens->windows(s.model.seq_len) : s.train_data->size());
  if (s.test_data) mllog.point("eval_samples", s.test_data->size());
  mllog.point("opt_name", config.optimizer.nesterov ? "sgd_nesterov" : "sgd");
  mllog.point("opt_base_learning_rate", config.optimizer.lr);
  mllog.point("opt_momentum", config.optimizer.momentum);
  mllog.point("opt_weight_decay", config.optimizer.weight_decay);
  mllog.point("opt_learning_rate_warmup_epochs", config.optimizer.lr_warmup_epochs);
  mllog.point("opt_learning_rate_schedule", lr_schedule_name(config.optimizer.lr_schedule));
  mllog.point("precision", precision_name(config.model.precision));
  mllog.point("seed", config.seed);
  mllog.end("init_stop");
  mllog.start("run_start");
}

// One pass over the first `count` test images (rank 0's), on the GPU pipeline where the run decodes
// there; its counts are added to `finished_gpu`. Nothing where a stop was asked during it.
std::optional<double> evaluate_test_set(const RunConfig& config, RunSetup& s, int64_t count,
                                        GpuPipelineStats& finished_gpu) {
  Trainer& trainer = *s.trainer;
  WallTimer since_line;  // evaluation reports by time whatever --log-every says: it has no steps
  auto keep_going = [&](int64_t done, int64_t total) {
    if (stop_requested()) return false;
    if (since_line.seconds() >= config.output.log_seconds) {
      say("evaluating: %lld/%lld test images\n", static_cast<long long>(done), static_cast<long long>(total));
      std::fflush(stdout);
      since_line.restart();
    }
    return true;
  };
  // The evaluation transform on the GPU too where the run decodes there: a pipeline of its own for this
  // pass over the test images, in order, each batch padded as load_batch pads.
  const int64_t batch = *config.batch_size;
  std::unique_ptr<GpuImagePipeline> eval_feed =
      make_gpu_pipeline(s, *s.test_data, (count + batch - 1) / batch, [&](int64_t n) {
        std::vector<int64_t> indices(static_cast<size_t>(batch));
        for (int64_t i = 0; i < batch; ++i)
          indices[static_cast<size_t>(i)] = n * batch + i < count ? n * batch + i : n * batch;
        return indices;
      });
  if (!eval_feed) return trainer.evaluate(*s.test_data, count, keep_going);
  std::optional<double> accuracy = trainer.evaluate(
      count,
      [&](int64_t, int64_t) {
        return eval_feed->next(trainer.model().images->value, trainer.model().labels->value,
                               s.backend->native_stream());
      },
      keep_going);
  const GpuPipelineStats done = eval_feed->stats();
  finished_gpu.decoded_on_cpu += done.decoded_on_cpu;
  finished_gpu.decoded_on_hardware += done.decoded_on_hardware;
  finished_gpu.decoded_on_gpu_cuda += done.decoded_on_gpu_cuda;
  return accuracy;
}

// The pipelines that decode a train run's images ahead of its steps (none for data held in memory).
struct TrainInput {
  std::unique_ptr<BatchPrefetcher> prefetcher;
  std::unique_ptr<GpuImagePipeline> gpu;
  double waited_seconds() const {
    return prefetcher ? prefetcher->waited_seconds() : gpu ? gpu->waited_seconds() : 0.0;
  }
};

// The pipelines walk the batches in the loop's order (train_rank's feed): each on its own thread with its
// own copy of the epoch's order.
TrainInput make_train_input(const RunConfig& config, RunSetup& s, const EpochSampler& sampler,
                            int64_t first_step, int64_t steps_per_epoch, int64_t total_steps) {
  const int64_t micro_batches = config.accumulate_steps;
  const int64_t rank = s.comm->rank(), ranks = s.comm->size(), batch_size = *config.batch_size;
  auto batch_indices = [=, &sampler, order = std::vector<int64_t>(),
                        order_epoch = int64_t{-1}](int64_t n) mutable {
    const int64_t step = first_step + n / micro_batches, micro = n % micro_batches;
    if (step / steps_per_epoch != order_epoch) {
      order_epoch = step / steps_per_epoch;
      order = sampler.epoch_order(order_epoch);
    }
    const int64_t b = ((step % steps_per_epoch) * ranks + rank) * micro_batches + micro;
    auto batch = EpochSampler::batch(order, b, batch_size);
    std::vector<int64_t> indices(batch.begin(), batch.end());
    indices.resize(static_cast<size_t>(batch_size), indices[0]);  // as load_batch pads
    return indices;
  };
  const int64_t batches_to_feed = (total_steps - first_step) * micro_batches;
  TrainInput input;
  if (!s.train_data) return input;  // token windows are gathered in memory, step by step
  input.prefetcher = make_prefetcher(s, batches_to_feed, batch_indices);
  input.gpu = make_gpu_pipeline(s, *s.train_data, batches_to_feed, batch_indices);
  if (input.gpu) say("  decoding on the GPU: %s\n", input.gpu->description().c_str());
  return input;
}

// What the train loop measured, for its result.
struct TrainRecord {
  std::vector<double> losses;
  std::vector<EvaluationResult> evaluations;
  double last_accuracy = NAN;
  std::vector<double> val_losses;  // a token model's, after each evaluation
  MeasuredWindow window;
  double train_seconds = 0;
  double window_wait_seconds = 0;  // waits for data over the timed steps
  double window_cpu_seconds = 0;   // the process's user + system CPU time over the timed steps
};

// The train run's result; a collective (every rank calls it).
RunResult train_result(const RunConfig& config, RunSetup& s, const TrainProgress& progress,
                       int64_t steps_per_epoch, const TrainRecord& record, const DataFeed& data_feed,
                       int64_t eval_count) {
  const int ranks = s.comm->size();
  RunResult result = result_skeleton(config, s);
  result.steps = progress.total_steps - progress.first_step;
  result.cuda_graph = s.trainer->step_recorded();
  result.final_loss = record.losses.empty() ? NAN : record.losses.back();
  if (!record.val_losses.empty()) result.val_loss = record.val_losses.back();
  TrainFigures& t = result.train.emplace();
  t.first_step = progress.first_step;
  t.epochs = static_cast<double>(progress.total_steps) / static_cast<double>(steps_per_epoch);
  t.losses = record.losses;
  add_throughput(result, s, record.window);
  add_token_throughput(result, s);
  add_data_pipeline(result, s, data_feed, record.window_wait_seconds, record.window);
  // What the run cost the host's cores over the timed steps, every thread (the data pipeline's, and the
  // step's own launches and waits), per 1,000 images of all ranks. The ranks of one process (--gpus N)
  // each read the whole process's time: counted once.
  const bool one_process = s.comm->name() == "nccl-threads" || s.comm->name() == "local";
  const double all_images = s.comm->sum(static_cast<double>(record.window.images()));
  const double cpu_seconds = s.comm->sum(record.window_cpu_seconds) / (one_process ? ranks : 1);
  if (all_images > 0) t.cpu_seconds_per_1000_images = 1e3 * cpu_seconds / all_images;
  t.train_seconds = record.train_seconds;
  if (s.test_data) t.test = TestFigures{record.last_accuracy, eval_count, record.evaluations};
  return result;
}

// "done: 8 steps, final loss 2.1234, 123.4 img/s (median step ...), test accuracy 12.50%" (a token
// model: tokens/s)
void print_train_summary(const RunResult& result, const Distribution& d, RateUnit unit) {
  say("done: %lld steps, final loss %.4f", static_cast<long long>(result.steps), result.final_loss);
  if (d.count > 0)
    say(", %.1f %s (median step %.1f ms, p5 %.1f, p95 %.1f)",
        result.images_per_second.value_or(0) * unit.per_sample, unit.name, d.median, d.p5, d.p95);
  else
    say(", no throughput measured (no timed steps)");
  if (result.train->test) say(", test accuracy %.2f%%", 100.0 * result.train->test->test_accuracy);
  if (d.count > 0 && result.measurement_note) say(" | warning: %s", result.measurement_note->c_str());
  say("\n");
}

// One rank's train run after its set-up: the state its steps share, and the steps' parts in the order
// they happen. Every rank draws the same global order of the epoch; a step of the whole run takes ranks x
// micro-batches consecutive batches of it, and rank r's micro-batch k is batch r * K + k of those. One
// rank accumulating R x K micro-batches therefore sees exactly the samples of R ranks.
class TrainLoop {
 public:
  // Resumes a --resume checkpoint, prints the header and starts the input pipelines.
  TrainLoop(RunSetup& s, const RunConfig& config, MlperfLog& mllog)
      : s_(s),
        config_(config),
        mllog_(mllog),
        trainer_(*s.trainer),
        rank_(s.comm->rank()),
        ranks_(s.comm->size()),
        images_per_step_(trainer_.images_per_step()),
        // A token model draws windows (token_windows_) and leaves this sampler unused, over one sample.
        sampler_(s.train_data ? s.train_data->size() : 1, config.seed + 1, /*shuffle=*/true),
        token_windows_(make_token_windows(s, config)),
        steps_per_epoch_(token_windows_ ? token_windows_->batches_per_epoch(images_per_step_ * ranks_)
                                        : sampler_.batches_per_epoch(images_per_step_ * ranks_)),
        total_steps_(*config.epochs > 0 ? *config.epochs * steps_per_epoch_ : *config.steps),
        schedule_(config, steps_per_epoch_, total_steps_),
        progress_clock_(config, total_steps_, images_per_step_ * ranks_, rate_unit(s.model)),
        tracer_(config, s),
        eval_count_(s.test_data
                        ? std::min(config.data.eval_images.value_or(s.test_data->size()), s.test_data->size())
                        : 0) {
    progress_.total_steps = total_steps_;
    progress_.first_step =
        config.output.resume_path.empty() ? 0 : resume_from_checkpoint(config, s, total_steps_);
    first_step_ = progress_.first_step;
    print_header("train", config, s,
                 fmt::format("{} steps ({} per epoch){}", total_steps_, steps_per_epoch_,
                             first_step_ > 0 ? fmt::format(", resuming at step {}", first_step_) : ""));
    input_ = make_train_input(config, s, sampler_, first_step_, steps_per_epoch_, total_steps_);
    data_feed_ = {input_.prefetcher.get(), input_.gpu.get(), {}};
  }

  // The steps, evaluation after each epoch (and at a mid-epoch end) and checkpoints; the result.
  RunResult run() {
    progress_clock_.start();
    for (int64_t step = first_step_; step < total_steps_; ++step) train_step(step);
    tracer_.write();
    // A run that stops mid-epoch is still evaluated at its end.
    if ((s_.test_data || s_.val_tokens) && (total_steps_ % steps_per_epoch_ != 0))
      evaluate(total_steps_ / steps_per_epoch_ + 1, total_steps_);
    // The window of a training run is the sum of its timed steps: evaluation and checkpoints stay out of it.
    double window_seconds = 0;
    for (double ms : record_.window.step_ms()) window_seconds += ms / 1e3;
    record_.window.set_wall_seconds(window_seconds);
    return train_result(config_, s_, progress_, steps_per_epoch_, record_, data_feed_, eval_count_);
  }

  const MeasuredWindow& window() const { return record_.window; }

 private:
  // Step `step` (0-based): its micro-batches, the optimizer step, its timing and loss, and what follows it
  // (the progress line, a stop asked for, the epoch's evaluation, a checkpoint).
  void train_step(int64_t step) {
    s_.comm->set_step(step + 1);
    const int64_t epoch = step / steps_per_epoch_;
    const int64_t batch_in_epoch = step % steps_per_epoch_;
    if (batch_in_epoch == 0 || step == first_step_)
      mllog_.start("epoch_start", nullptr, {{"epoch_num", epoch + 1}});
    if (epoch != order_epoch_) {
      order_ = token_windows_ ? token_windows_->epoch_starts(epoch) : sampler_.epoch_order(epoch);
      order_epoch_ = epoch;
    }
    // After one ordinary step (libraries initialise lazily), the step is recorded and replayed where the
    // backend can (CUDA graphs); the data, the rate and the loss scale still change every step.
    if (step == first_step_ + 1 && config_.cuda_graph) trainer_.record_step();
    tracer_.before(step + 1);
    WallTimer step_timer;
    const double waited_before = input_.waited_seconds();
    const double cpu_before = process_cpu_seconds();
    const float rank_loss = trainer_.step([&](int64_t micro) { load_micro_batch(step, micro); },
                                          schedule_.at(step), /*read_loss=*/true);
    tracer_.after(step + 1);
    double step_ms = step_timer.milliseconds();
    record_.train_seconds += step_ms / 1e3;
    if (step >= first_step_ + *config_.warmup_steps) {
      record_.window.add_step(step_ms, images_per_step_);
      record_.window_wait_seconds += input_.waited_seconds() - waited_before;
      record_.window_cpu_seconds += process_cpu_seconds() - cpu_before;
    }
    // The step's loss is the global batch's: the mean of the ranks' (equal) shares, as one rank
    // accumulating every rank's micro-batches computes it.
    const double loss = s_.comm->sum(rank_loss) / ranks_;
    record_.losses.push_back(loss);
    DLB_REQUIRE(std::isfinite(loss), "training diverged: loss is {} at step {}; lower --lr", loss, step + 1);

    progress_clock_.after_step(step + 1, epoch + 1, loss, schedule_.at(step));
    const bool epoch_done = batch_in_epoch + 1 == steps_per_epoch_;
    if (epoch_done || step + 1 == total_steps_) mllog_.end("epoch_stop", nullptr, {{"epoch_num", epoch + 1}});
    stop_if_asked(config_, s_, progress_, step + 1, (step + 1) / steps_per_epoch_);
    if (epoch_done) evaluate(epoch + 1, step + 1);
    const int64_t save_every = config_.output.save_every;
    if (epoch_done || (save_every > 0 && (step + 1) % save_every == 0) || step + 1 == total_steps_)
      save_checkpoint_announced(config_, s_, progress_, step + 1, (step + 1) / steps_per_epoch_);
  }

  // Micro-batch k of step `step` is batch (batch_in_epoch * K + k) of the epoch's order, from the
  // pipeline that decoded it ahead where there is one. Synthetic data stays where the first step put it.
  void load_micro_batch(int64_t step, int64_t micro) {
    if (config_.data.kind == DataKind::synthetic && config_.accumulate_steps == 1 && step > first_step_)
      return;
    if (input_.prefetcher) {
      const BatchPrefetcher::Batch& batch = input_.prefetcher->next();
      trainer_.load_batch(batch.images, batch.labels);
      return;
    }
    if (input_.gpu) {
      TimelineSpan span("load batch", "data");
      input_.gpu->next(trainer_.model().images->value, trainer_.model().labels->value,
                       s_.backend->native_stream());
      return;
    }
    const int64_t batch_in_epoch = step % steps_per_epoch_;
    const int64_t b = (batch_in_epoch * ranks_ + rank_) * config_.accumulate_steps + micro;
    if (token_windows_) {
      trainer_.load_tokens(*s_.train_tokens, EpochSampler::batch(order_, b, *config_.batch_size));
      return;
    }
    trainer_.load_batch(*s_.train_data, EpochSampler::batch(order_, b, *config_.batch_size));
  }

  // Rank 0 evaluates (its batch-norm statistics); the others wait for it at the stop check after it.
  // Epochs count from 1, in the console, the result and the MLPerf log alike.
  void evaluate(int64_t epoch_number, int64_t step) {
    if (s_.val_tokens) return evaluate_tokens(epoch_number);
    if (!s_.test_data) return;
    if (rank_ == 0) {
      WallTimer timer;
      mllog_.start("eval_start", nullptr, {{"epoch_num", epoch_number}});
      std::optional<double> accuracy = evaluate_test_set(config_, s_, eval_count_, data_feed_.finished_gpu);
      if (accuracy) {
        record_.last_accuracy = *accuracy;
        mllog_.point("eval_accuracy", *accuracy, {{"epoch_num", epoch_number}});
        mllog_.end("eval_stop", nullptr, {{"epoch_num", epoch_number}});
        record_.evaluations.push_back({epoch_number, step, *accuracy, eval_count_});
        say("epoch %lld  test accuracy %.2f%% (%lld images, %.1f s)\n", static_cast<long long>(epoch_number),
            100.0 * *accuracy, static_cast<long long>(eval_count_), timer.seconds());
        std::fflush(stdout);
      }
    }
    stop_if_asked(config_, s_, progress_, step, step / steps_per_epoch_);
  }

  // A token model's mean loss over every window of the val split (rank 0's; the others wait at the stop
  // check after it).
  void evaluate_tokens(int64_t epoch_number) {
    if (rank_ != 0) return;
    WallTimer timer;
    const TokenWindowSampler windows(*s_.val_tokens, s_.model.seq_len, config_.seed, /*shuffle=*/false);
    const std::vector<int64_t> starts = windows.epoch_starts(0);
    std::optional<double> loss =
        trainer_.evaluate_loss(*s_.val_tokens, starts, [](int64_t, int64_t) { return !stop_requested(); });
    if (!loss) return;
    record_.val_losses.push_back(*loss);
    say("epoch %lld  val loss %.4f (%.3f bits per token, %lld windows of %lld, %.1f s)\n",
        static_cast<long long>(epoch_number), *loss, *loss / std::log(2.0),
        static_cast<long long>(starts.size()), static_cast<long long>(s_.model.seq_len), timer.seconds());
    std::fflush(stdout);
  }

  // A token model's windows (data/token_sampler.h), in the epoch's global order that every rank draws
  // alike: a step takes its ranks x micro-batches batches of windows from it as an image model's step
  // takes its batches of images, so that R ranks train on the windows one rank accumulating R
  // micro-batches does.
  static std::optional<TokenWindowSampler> make_token_windows(RunSetup& s, const RunConfig& config) {
    if (!s.train_tokens) return std::nullopt;
    TokenWindowSampler windows(*s.train_tokens, s.model.seq_len, config.seed + 1, /*shuffle=*/true);
    const int64_t per_step = *config.batch_size * config.accumulate_steps * s.comm->size();
    DLB_REQUIRE(windows.batches_per_epoch(per_step) >= 1,
                "--data {}: {} windows of {} tokens, fewer than one step's {} sequences (all ranks); lower "
                "--batch-size or --seq-len, or give more text",
                config.data.source, windows.windows(), s.model.seq_len, per_step);
    return windows;
  }

  RunSetup& s_;
  const RunConfig config_;  // with the learning rate scaled to the ranks
  MlperfLog& mllog_;
  Trainer& trainer_;
  const int rank_, ranks_;
  const int64_t images_per_step_;
  EpochSampler sampler_;
  std::optional<TokenWindowSampler> token_windows_;
  const int64_t steps_per_epoch_, total_steps_;
  LearningRateSchedule schedule_;
  ProgressClock progress_clock_;
  StepTracer tracer_;
  const int64_t eval_count_;
  int64_t first_step_ = 0;
  TrainProgress progress_;
  TrainInput input_;
  DataFeed data_feed_;
  TrainRecord record_;
  std::vector<int64_t> order_;  // the epoch order_epoch_'s sample indices (a token model's window starts)
  int64_t order_epoch_ = -1;
};

}  // namespace

std::optional<RunResult> train_rank(const RunConfig& given, parallel::Launch& launch, int slot,
                                    std::shared_ptr<tuning::AlgorithmCache> algorithms) {
  // Only rank 0 logs (every rank could not open the same file in threads mode); the rank is known after
  // set-up, so init_start is stamped with the time before it.
  const auto init_start_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
  RunSetup s = set_up(given, launch, slot, std::move(algorithms));
  MlperfLog mllog(s.comm->rank() == 0 ? given.output.mlperf_log_path : std::string());
  const RunConfig config = with_scaled_lr(s.config, s.comm->size());
  TrainLoop loop(s, config, mllog);
  log_mlperf_start(mllog, config, s, init_start_ms);
  const RunResult result = loop.run();
  mllog.run_succeeded();
  print_train_summary(result, loop.window().step_distribution(), rate_unit(s.model));
  if (s.comm->rank() != 0) return std::nullopt;
  return result;
}

}  // namespace dlbench::run_detail
