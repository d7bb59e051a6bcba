#include "app/run.h"

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
#include "data/idx.h"
#include "data/image_dataset.h"
#include "data/shard.h"
#include "data/synthetic.h"
#include "models/resnet.h"
#include "parallel/config_check.h"
#include "parallel/launch.h"
#include "train/checkpoint.h"
#include "train/lr_schedule.h"
#include "train/memory_fit.h"
#include "train/mlperf_log.h"
#include "train/trainer.h"

namespace dlbench {

namespace {

using namespace run_detail;

// Runs `rank_body` on every rank this process holds (one, or one thread per GPU with --gpus N) and returns
// rank 0's result; null in an MPI process of another rank.
std::optional<RunResult> run_ranks(
    const RunConfig& config,
    const std::function<std::optional<RunResult>(parallel::Launch&, int slot)>& rank_body) {
  parallel::LaunchOptions options;
  options.launcher = config.parallel.launcher;
  options.device = config.device.kind;
  options.gpus = config.parallel.gpus;
  options.timeout_seconds = config.parallel.timeout_seconds;
  options.nccl.symmetric = config.parallel.nccl_symmetric;
  auto launch = parallel::make_launch(options);
  std::optional<RunResult> result;
  std::mutex result_mutex;
  parallel::run_local_ranks(*launch, [&](int slot) {
    std::optional<RunResult> mine = rank_body(*launch, slot);
    std::lock_guard<std::mutex> lock(result_mutex);
    if (mine) result = std::move(mine);
  });
  return result;
}

using Feed = std::function<void(int64_t micro)>;

// The warm-up steps, each timed on the host and printed.
void run_warm_up(const RunConfig& config, RunSetup& s, const Feed& feed, const LearningRateSchedule& schedule,
                 StepTracer& tracer) {
  for (int64_t step = 0; step < *config.warmup_steps; ++step) {
    s.comm->set_step(step + 1);
    tracer.before(step + 1);
    WallTimer timer;
    const float loss = static_cast<float>(
        s.comm->sum(s.trainer->step(feed, schedule.at(step), /*read_loss=*/true)) / s.comm->size());
    tracer.after(step + 1);
    DLB_REQUIRE(std::isfinite(loss), "training diverged: loss is {} at warm-up step {}; lower --lr", loss,
                step + 1);
    say("warm-up %lld/%lld  loss %.4f  %.1f ms\n", static_cast<long long>(step + 1),
        static_cast<long long>(*config.warmup_steps), loss, timer.milliseconds());
    std::fflush(stdout);
  }
}

// The timed window and what was read around it.
struct BenchWindow {
  MeasuredWindow window;
  float loss = NAN;  // the last step's (bench reads it)
  double seconds_to_first_timed_step = 0;
  std::optional<double> energy_before, energy_after;  // NVML's counter, joules
  std::optional<ClockSummary> clocks;
  std::chrono::milliseconds clock_period{0};
};

// The host never waits inside the window, except to read a logged loss: it enqueues step after step
// while the device runs, as training does. A marker (a CUDA event on a GPU) after each step times it on
// the device; the markers are read after the window. Waiting after every step would add the launch of
// the next step (a whole CUDA graph's, over a thousand kernels) to every step's time.
BenchWindow run_timed_window(const RunConfig& config, RunSetup& s, const Feed& feed,
                             const LearningRateSchedule& schedule, StepTracer& tracer) {
  Trainer& trainer = *s.trainer;
  const int64_t images_per_step = trainer.images_per_step();
  BenchWindow w;
  s.backend->synchronize();
  const std::string bus_id = s.memory_fit.device ? s.memory_fit.device->pci_bus_id : std::string();
  w.energy_before = gpu_energy_joules(bus_id);
  ClockSampler clocks(bus_id);
  w.seconds_to_first_timed_step = seconds_since_process_start();
  WallTimer window_timer;
  std::vector<int64_t> markers = {s.backend->mark()};
  for (int64_t step = 0; step < *config.steps; ++step) {
    s.comm->set_step(*config.warmup_steps + step + 1);
    tracer.before(*config.warmup_steps + step + 1);
    bool read_loss = (step + 1) % *config.output.log_every == 0 || step + 1 == *config.steps;
    w.loss = trainer.step(feed, schedule.at(*config.warmup_steps + step), read_loss);
    markers.push_back(s.backend->mark());
    tracer.after(*config.warmup_steps + step + 1);
    if (read_loss) {
      s.backend->synchronize();  // the loss was read: the device has (almost) nothing left to do
      const double ms =
          s.backend->marker_ms(markers.back()) - s.backend->marker_ms(markers[markers.size() - 2]);
      w.loss = static_cast<float>(s.comm->sum(w.loss) / s.comm->size());  // the global batch's
      DLB_REQUIRE(std::isfinite(w.loss), "training diverged: loss is {} at step {}; lower --lr", w.loss,
                  *config.warmup_steps + step + 1);
      double eta = ms * static_cast<double>(*config.steps - step - 1) / 1e3;
      const RateUnit unit = rate_unit(s.model);
      say("step %lld/%lld  loss %.4f  %.1f ms  %.1f %s  ETA %s\n", static_cast<long long>(step + 1),
          static_cast<long long>(*config.steps), w.loss, ms,
          static_cast<double>(images_per_step) * unit.per_sample * 1e3 / ms, unit.name,
          format_duration(eta).c_str());
      std::fflush(stdout);
    }
  }
  s.backend->synchronize();
  // The window ends when the device is done: reading the energy counter and the markers stays out of it.
  w.window.set_wall_seconds(window_timer.seconds());
  w.energy_after = gpu_energy_joules(bus_id);
  w.clocks = clocks.stop();
  w.clock_period = clocks.period();
  for (size_t i = 1; i < markers.size(); ++i)
    w.window.add_step(s.backend->marker_ms(markers[i]) - s.backend->marker_ms(markers[i - 1]),
                      images_per_step);
  return w;
}

// The bench run's result, with what is measured after the window (the gradient exchange alone, the
// layers' times); a collective.
RunResult bench_result(const RunConfig& config, RunSetup& s, const BenchWindow& w, bool graph) {
  Trainer& trainer = *s.trainer;
  RunResult result = result_skeleton(config, s);
  result.steps = *config.steps;
  result.final_loss = w.loss;
  result.cuda_graph = graph;
  add_throughput(result, s, w.window);
  BenchFigures& b = result.bench.emplace();
  b.warmup_steps = *config.warmup_steps;
  b.step_times_ms = w.window.step_ms();
  b.window_seconds = w.window.wall_seconds();
  b.energy =
      window_energy(s, w.energy_before, w.energy_after,
                    static_cast<double>(*config.steps * trainer.images_per_step()), w.window.wall_seconds());
  b.clocks = window_clocks(s, w.clocks, w.clock_period);
  b.seconds_to_first_timed_step = w.seconds_to_first_timed_step;
  b.flops_per_image =
      3.0 * 2.0 * static_cast<double>(trainer.net().forward_macs()) / static_cast<double>(*config.batch_size);
  if (s.comm->size() > 1) {
    // What one exchange of all gradients costs alone (the overlap hides part of it inside a step).
    result.communication_ms = trainer.time_gradient_exchange(5);
    say("gradient exchange alone: %.2f ms per step (%d ranks, %s)\n", *result.communication_ms,
        s.comm->size(), s.comm->name().c_str());
  }
  if (config.output.per_layer && s.comm->rank() == 0) {
    // After the window, so it cannot disturb the measurement.
    std::vector<LayerTime> times = profile_layers(trainer.net(), 3);
    say("\nper-layer times (mean of 3 iterations, each layer synchronised):\n%s\n",
        format_layer_profile(times).c_str());
    b.per_layer = std::move(times);
  }
  return result;
}

std::optional<RunResult> bench_rank(const RunConfig& given, parallel::Launch& launch, int slot,
                                    const std::shared_ptr<tuning::AlgorithmCache>& algorithms) {
  RunSetup s = set_up(given, launch, slot, algorithms);
  const RunConfig config = with_scaled_lr(s.config, s.comm->size());
  Trainer& trainer = *s.trainer;
  print_header("bench", config, s,
               fmt::format("{} warm-up + {} timed steps", *config.warmup_steps, *config.steps));
  LearningRateSchedule schedule(config, *config.warmup_steps + *config.steps,
                                *config.warmup_steps + *config.steps);

  // Synthetic inputs are loaded once and stay on the device (several micro-batches: reloaded each). A
  // token model's micro-batch k is windows k * B .. of the synthetic tokens.
  const bool tokens = s.model.family == ModelFamily::gpt;
  std::vector<int64_t> all(
      static_cast<size_t>(tokens ? s.train_tokens->size() / s.model.seq_len : s.train_data->size()));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  // Real images decoded on the GPU go through its pipeline (each micro-batch's, in the order of the loads).
  const int64_t micro_batches = config.accumulate_steps;
  std::unique_ptr<GpuImagePipeline> gpu_feed =
      tokens
          ? nullptr
          : make_gpu_pipeline(
                s, *s.train_data,
                micro_batches == 1 ? 1 : micro_batches * (1 + *config.warmup_steps + *config.steps),
                [&](int64_t n) {
                  auto batch = EpochSampler::batch(all, n % micro_batches, *config.batch_size);
                  std::vector<int64_t> indices(batch.begin(), batch.end());
                  indices.resize(static_cast<size_t>(*config.batch_size), indices[0]);  // as load_batch pads
                  return indices;
                });
  auto load = [&](int64_t micro) {
    if (tokens) {
      std::vector<int64_t> starts;
      for (int64_t window : EpochSampler::batch(all, micro, *config.batch_size))
        starts.push_back(window * s.model.seq_len);
      trainer.load_tokens(*s.train_tokens, starts);
      return;
    }
    if (gpu_feed) {
      gpu_feed->next(trainer.model().images->value, trainer.model().labels->value,
                     s.backend->native_stream());
      return;
    }
    trainer.load_batch(*s.train_data, EpochSampler::batch(all, micro, *config.batch_size));
  };
  load(0);
  const Feed feed = [&](int64_t micro) {
    if (config.accumulate_steps > 1) load(micro);
  };

  StepTracer tracer(config, s);
  run_warm_up(config, s, feed, schedule, tracer);
  // After warm-up the step is recorded once and replayed (on backends that can: CUDA graphs).
  const bool graph = config.cuda_graph && *config.warmup_steps > 0 && trainer.record_step();
  say("step as one graph: %s\n", graph ? "yes" : config.cuda_graph ? "no (not supported here)" : "no (off)");
  if (const std::string digest = algorithm_digest(trainer.net()); !digest.empty())
    say("algorithms chosen: digest %s\n", digest.c_str());
  const BenchWindow w = run_timed_window(config, s, feed, schedule, tracer);
  tracer.write();

  RunResult result = bench_result(config, s, w, graph);
  add_token_throughput(result, s);
  const Distribution d = w.window.step_distribution();
  const RateUnit unit = rate_unit(s.model);
  say("%s %s batch %lld on %s: %.2f %s | step median %.1f ms, p5 %.1f, p95 %.1f, mean %.1f +- %.1f ms%s\n",
      config.model.name.c_str(), precision_name(config.model.precision),
      static_cast<long long>(*config.batch_size), device_name(config.device).c_str(),
      w.window.images_per_second() * unit.per_sample, unit.name, d.median, d.p5, d.p95, d.mean, d.ci95,
      result.measurement_note ? (" | warning: " + *result.measurement_note).c_str() : "");
  if (s.comm->size() > 1)
    say("%d ranks: %.2f %s in total, %.2f per device\n", s.comm->size(),
        result.images_per_second.value_or(0) * unit.per_sample, unit.name,
        result.images_per_second_per_device.value_or(0) * unit.per_sample);
  if (s.comm->rank() != 0) return std::nullopt;
  return result;
}

}  // namespace

std::optional<RunResult> run_train(const RunConfig& given) {
  // SIGINT/SIGTERM stop the run after the step under way, its state saved first (stop_if_asked).
  defer_stop_to_safe_points();
  const std::shared_ptr<tuning::AlgorithmCache> algorithms = open_algorithm_cache(given);
  return run_ranks(
      given, [&](parallel::Launch& launch, int slot) { return train_rank(given, launch, slot, algorithms); });
}

std::optional<RunResult> run_bench(const RunConfig& given) {
  const std::shared_ptr<tuning::AlgorithmCache> algorithms = open_algorithm_cache(given);
  return run_ranks(
      given, [&](parallel::Launch& launch, int slot) { return bench_rank(given, launch, slot, algorithms); });
}

}  // namespace dlbench
