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
#include "parallel/config_check.h"
#include "parallel/launch.h"
#include "models/resnet.h"
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
nlohmann::json run_ranks(const RunConfig& config,
                         const std::function<nlohmann::json(parallel::Launch&, int slot)>& rank_body) {
  parallel::LaunchOptions options;
  options.launcher = config.launcher;
  options.device = config.device.kind;
  options.gpus = config.gpus;
  options.timeout_seconds = config.timeout_seconds;
  options.nccl.symmetric = config.nccl_symmetric;
  auto launch = parallel::make_launch(options);
  nlohmann::json result;
  std::mutex result_mutex;
  parallel::run_local_ranks(*launch, [&](int slot) {
    nlohmann::json j = rank_body(*launch, slot);
    std::lock_guard<std::mutex> lock(result_mutex);
    if (!j.is_null()) result = std::move(j);
  });
  return result;
}

nlohmann::json bench_rank(const RunConfig& given, parallel::Launch& launch, int slot,
                          const std::shared_ptr<tuning::AlgorithmCache>& algorithms) {
  RunSetup s = set_up(given, launch, slot, algorithms);
  const RunConfig config = with_scaled_lr(s.config, s.comm->size());
  Trainer& trainer = *s.trainer;
  const int64_t images_per_step = trainer.images_per_step();
  print_header("bench", config, s,
               fmt::format("{} warm-up + {} timed steps", *config.warmup_steps, *config.steps));
  LearningRateSchedule schedule(config, *config.warmup_steps + *config.steps,
                                *config.warmup_steps + *config.steps);

  // Synthetic inputs are loaded once and stay on the device (several micro-batches: reloaded each).
  std::vector<int64_t> all(static_cast<size_t>(s.train_data->size()));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  // Real images decoded on the GPU go through its pipeline (each micro-batch's, in the order of the loads).
  const int64_t micro_batches = config.accumulate_steps;
  std::unique_ptr<GpuImagePipeline> gpu_feed = make_gpu_pipeline(
      s, *s.train_data, micro_batches == 1 ? 1 : micro_batches * (1 + *config.warmup_steps + *config.steps),
      [&](int64_t n) {
        auto batch = EpochSampler::batch(all, n % micro_batches, *config.batch_size);
        std::vector<int64_t> indices(batch.begin(), batch.end());
        indices.resize(static_cast<size_t>(*config.batch_size), indices[0]);  // as load_batch pads
        return indices;
      });
  auto load = [&](int64_t micro) {
    if (gpu_feed) {
      gpu_feed->next(trainer.model().images->value, trainer.model().labels->value,
                     s.backend->native_stream());
      return;
    }
    trainer.load_batch(*s.train_data, EpochSampler::batch(all, micro, *config.batch_size));
  };
  load(0);
  auto feed = [&](int64_t micro) {
    if (config.accumulate_steps > 1) load(micro);
  };

  float loss = NAN;
  StepTracer tracer(config, s);
  for (int64_t step = 0; step < *config.warmup_steps; ++step) {
    s.comm->set_step(step + 1);
    tracer.before(step + 1);
    WallTimer timer;
    loss = static_cast<float>(s.comm->sum(trainer.step(feed, schedule.at(step), /*read_loss=*/true)) /
                              s.comm->size());
    tracer.after(step + 1);
    DLB_REQUIRE(std::isfinite(loss), "training diverged: loss is {} at warm-up step {}; lower --lr", loss,
                step + 1);
    say("warm-up %lld/%lld  loss %.4f  %.1f ms\n", static_cast<long long>(step + 1),
        static_cast<long long>(*config.warmup_steps), loss, timer.milliseconds());
    std::fflush(stdout);
  }
  // After warm-up the step is recorded once and replayed (on backends that can: CUDA graphs).
  const bool graph = config.cuda_graph && *config.warmup_steps > 0 && trainer.record_step();
  say("step as one graph: %s\n", graph ? "yes" : config.cuda_graph ? "no (not supported here)" : "no (off)");
  if (const std::string digest = algorithm_digest(trainer.net()); !digest.empty())
    say("algorithms chosen: digest %s\n", digest.c_str());

  // The host never waits inside the window, except to read a logged loss: it enqueues step after step
  // while the device runs, as training does. A marker (a CUDA event on a GPU) after each step times it on
  // the device; the markers are read after the window. Waiting after every step would add the launch of
  // the next step (a whole CUDA graph's, over a thousand kernels) to every step's time.
  MeasuredWindow window;
  std::vector<double> losses;
  s.backend->synchronize();
  const std::string bus_id = s.memory_fit.device ? s.memory_fit.device->pci_bus_id : std::string();
  const std::optional<double> energy_before = gpu_energy_joules(bus_id);
  ClockSampler clocks(bus_id);
  const double seconds_to_first_timed_step = seconds_since_process_start();
  WallTimer window_timer;
  std::vector<int64_t> markers = {s.backend->mark()};
  for (int64_t step = 0; step < *config.steps; ++step) {
    s.comm->set_step(*config.warmup_steps + step + 1);
    tracer.before(*config.warmup_steps + step + 1);
    bool read_loss = (step + 1) % *config.log_every == 0 || step + 1 == *config.steps;
    loss = trainer.step(feed, schedule.at(*config.warmup_steps + step), read_loss);
    markers.push_back(s.backend->mark());
    tracer.after(*config.warmup_steps + step + 1);
    if (read_loss) {
      s.backend->synchronize();  // the loss was read: the device has (almost) nothing left to do
      const double ms =
          s.backend->marker_ms(markers.back()) - s.backend->marker_ms(markers[markers.size() - 2]);
      loss = static_cast<float>(s.comm->sum(loss) / s.comm->size());  // the global batch's
      DLB_REQUIRE(std::isfinite(loss), "training diverged: loss is {} at step {}; lower --lr", loss,
                  *config.warmup_steps + step + 1);
      losses.push_back(loss);
      double eta = ms * static_cast<double>(*config.steps - step - 1) / 1e3;
      say("step %lld/%lld  loss %.4f  %.1f ms  %.1f img/s  ETA %s\n", static_cast<long long>(step + 1),
          static_cast<long long>(*config.steps), loss, ms, static_cast<double>(images_per_step) * 1e3 / ms,
          format_duration(eta).c_str());
      std::fflush(stdout);
    }
  }
  s.backend->synchronize();
  // The window ends when the device is done: reading the energy counter and the markers stays out of it.
  window.set_wall_seconds(window_timer.seconds());
  const std::optional<double> energy_after = gpu_energy_joules(bus_id);
  const std::optional<ClockSummary> clock_summary = clocks.stop();
  for (size_t i = 1; i < markers.size(); ++i)
    window.add_step(s.backend->marker_ms(markers[i]) - s.backend->marker_ms(markers[i - 1]), images_per_step);
  tracer.write();
  Distribution d = window.step_distribution();

  nlohmann::json j = result_skeleton(config, s);
  j["steps"] = *config.steps;
  j["warmup_steps"] = *config.warmup_steps;
  j["final_loss"] = loss;
  add_throughput(j, s, window);
  j["step_times_ms"] = window.step_ms();
  j["window_seconds"] = window.wall_seconds();
  add_energy(j, s, energy_before, energy_after, static_cast<double>(*config.steps * images_per_step),
             window.wall_seconds());
  add_clocks(j, s, clock_summary, clocks.period());
  j["seconds_to_first_timed_step"] = seconds_to_first_timed_step;
  j["cuda_graph"] = graph;
  j["flops_per_image"] =
      3.0 * 2.0 * static_cast<double>(trainer.net().forward_macs()) / static_cast<double>(*config.batch_size);
  if (s.comm->size() > 1) {
    // What one exchange of all gradients costs alone (the overlap hides part of it inside a step).
    j["communication_ms"] = trainer.time_gradient_exchange(5);
    say("gradient exchange alone: %.2f ms per step (%d ranks, %s)\n", j["communication_ms"].get<double>(),
        s.comm->size(), s.comm->name().c_str());
  }
  if (config.per_layer && s.comm->rank() == 0) {
    // After the window, so it cannot disturb the measurement.
    std::vector<LayerTime> times = profile_layers(trainer.net(), 3);
    say("\nper-layer times (mean of 3 iterations, each layer synchronised):\n%s\n",
        format_layer_profile(times).c_str());
    j["per_layer"] = to_json(times);
  }
  say("%s %s batch %lld on %s: %.2f img/s | step median %.1f ms, p5 %.1f, p95 %.1f, mean %.1f +- %.1f ms%s\n",
      config.model.c_str(), precision_name(config.precision), static_cast<long long>(*config.batch_size),
      device_name(config.device).c_str(), window.images_per_second(), d.median, d.p5, d.p95, d.mean, d.ci95,
      j.contains("measurement_note") ? (" | warning: " + j["measurement_note"].get<std::string>()).c_str()
                                     : "");
  if (s.comm->size() > 1)
    say("%d ranks: %.2f img/s in total, %.2f per device\n", s.comm->size(),
        j["images_per_second"].get<double>(), j["images_per_second_per_device"].get<double>());
  return s.comm->rank() == 0 ? j : nlohmann::json();
}

}  // namespace

nlohmann::json run_train(const RunConfig& given) {
  // SIGINT/SIGTERM stop the run after the step under way, its state saved first (stop_if_asked).
  defer_stop_to_safe_points();
  const std::shared_ptr<tuning::AlgorithmCache> algorithms = open_algorithm_cache(given);
  return run_ranks(
      given, [&](parallel::Launch& launch, int slot) { return train_rank(given, launch, slot, algorithms); });
}

nlohmann::json run_bench(const RunConfig& given) {
  const std::shared_ptr<tuning::AlgorithmCache> algorithms = open_algorithm_cache(given);
  return run_ranks(
      given, [&](parallel::Launch& launch, int slot) { return bench_rank(given, launch, slot, algorithms); });
}

}  // namespace dlbench
