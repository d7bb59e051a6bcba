#include "train/run.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include "backend/backend_factory.h"
#include "bench/layer_profile.h"
#include "bench/measure.h"
#include "bench/system_info.h"
#include "core/file_io.h"
#include "core/status.h"
#include "core/timer.h"
#include "data/epoch_sampler.h"
#include "data/idx.h"
#include "data/synthetic.h"
#include "models/resnet.h"
#include "train/checkpoint.h"
#include "train/lr_schedule.h"
#include "train/memory_fit.h"
#include "train/trainer.h"

namespace dlbench {

namespace {

// When the process started (static initialisation), for the time to the first timed step.
const WallTimer process_clock;

// 25557032 -> "25,557,032"
std::string with_thousands(int64_t value) {
  std::string digits = std::to_string(value), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && digits[i - 1] != '-' && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

// Everything a run needs, set up in the order the work happens.
struct RunSetup {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Dataset> train_data;
  std::unique_ptr<Dataset> test_data;
  Model model;
  std::unique_ptr<Trainer> trainer;
  MemoryFit memory_fit;
};

RunSetup set_up(const RunConfig& config) {
  RunSetup s;
  // Fail on bad output paths before any work.
  if (!config.json_path.empty()) check_writable(config.json_path, "--json");
  if (!config.checkpoint_path.empty()) check_writable(config.checkpoint_path, "--checkpoint");

  ModelOptions options;
  options.label_smoothing = static_cast<float>(config.label_smoothing);
  if (config.data == "synthetic") {
    ImageShape in = default_input_shape(config.model);
    options.input = in;
    options.num_classes = default_num_classes(config.model);
    // Generated once, as the classic benchmarks do: one step's worth of distinct samples.
    s.train_data = std::make_unique<SyntheticDataset>(*config.batch_size * config.accumulate_steps,
                                                      SampleShape{in.channels, in.height, in.width},
                                                      static_cast<int>(options.num_classes), config.seed + 2);
  } else {
    s.train_data = std::make_unique<IdxDataset>(load_fashion_mnist(config.data_dir, Split::train));
    if (config.kind == RunKind::train) {
      s.test_data = std::make_unique<IdxDataset>(load_fashion_mnist(config.data_dir, Split::test));
    }
    SampleShape shape = s.train_data->sample_shape();
    options.input = {shape.channels, shape.height, shape.width};
    options.num_classes = s.train_data->num_classes();
  }

  s.backend =
      make_backend(config.backend_name, config.device, config.threads, config.precision == Precision::tf32);
  // Before the model takes any memory or searches an algorithm: a batch that does not fit stops here.
  s.memory_fit = largest_batch_that_fits(config, *s.backend, options);
  require_fit(s.memory_fit);
  NetworkOptions net_options;
  net_options.batch = *config.batch_size;
  net_options.layout = config.layout;
  net_options.dtype = compute_dtype(config.precision);
  s.model = build_model(config.model, *s.backend, net_options, options);
  s.trainer = std::make_unique<Trainer>(*s.backend, s.model, config);
  return s;
}

void print_header(const char* command, const RunConfig& config, RunSetup& s, const std::string& length) {
  Network& net = s.trainer->net();
  const Tensor& images = s.model.images->value;
  std::printf("dlbench %s | %s, %s parameters, %.2f GMAC per image forward\n", command, config.model.c_str(),
              with_thousands(net.parameter_count()).c_str(),
              static_cast<double>(net.forward_macs()) / static_cast<double>(*config.batch_size) / 1e9);
  const double planned = static_cast<double>(net.memory().total_bytes());
  std::printf("  device %s (%s backend, %d threads) | precision %s | layout %s | memory %.1f %s planned%s\n",
              device_name(config.device).c_str(), s.backend->name().c_str(), config.threads,
              precision_name(config.precision), layout_name(config.layout),
              planned >= (1 << 30) ? planned / (1 << 30) : planned / (1 << 20),
              planned >= (1 << 30) ? "GiB" : "MiB",
              s.memory_fit.largest_batch
                  ? fmt::format(" (largest batch that fits: {})", *s.memory_fit.largest_batch).c_str()
                  : "");
  std::printf(
      "  data %s: %lld samples of %lldx%lldx%lld%s | batch %lld per device%s | %s\n", config.data.c_str(),
      static_cast<long long>(s.train_data->size()), static_cast<long long>(images.c()),
      static_cast<long long>(images.h()), static_cast<long long>(images.w()),
      s.test_data ? fmt::format(", {} test", s.test_data->size()).c_str() : "",
      static_cast<long long>(*config.batch_size),
      config.accumulate_steps > 1 ? fmt::format(" x {} micro-batches", config.accumulate_steps).c_str() : "",
      length.c_str());
  std::printf("  sgd lr %g (%s", config.lr, lr_schedule_name(config.lr_schedule));
  if (config.lr_warmup_epochs > 0) std::printf(", warm-up %g epochs", config.lr_warmup_epochs);
  std::printf(") momentum %g%s weight decay %g%s | seed %llu\n", config.momentum,
              config.nesterov ? " nesterov" : "", config.weight_decay,
              config.decay_norm_and_bias ? "" : " (not on BN/bias)",
              static_cast<unsigned long long>(config.seed));
  std::fflush(stdout);
}

nlohmann::json result_skeleton(const RunConfig& config, RunSetup& s) {
  nlohmann::json j;
  j["model"] = config.model;
  j["parameters"] = s.trainer->net().parameter_count();
  j["device"] = device_name(config.device);
  j["backend"] = s.backend->name();
  j["precision"] = precision_name(config.precision);
  j["batch_size"] = *config.batch_size;
  j["global_batch_size"] = *config.batch_size * config.accumulate_steps;  // x ranks once several run
  j["ranks"] = 1;
  j["threads"] = config.threads;
  j["peak_memory_bytes"] = s.trainer->net().memory().total_bytes();
  j["largest_batch"] = s.memory_fit.largest_batch ? nlohmann::json(*s.memory_fit.largest_batch) : nullptr;
  j["loss_scale"] = s.trainer->loss_scale();
  j["skipped_steps"] = s.trainer->skipped_steps();
  j["date"] = iso_date_utc();
  j["config"] = config_to_json(config);
  j["system"] = system_info();
  return j;
}

void save_checkpoint_to(const RunConfig& config, Trainer& trainer, int64_t step, int64_t epoch) {
  save_checkpoint(config.checkpoint_path, trainer.make_checkpoint(step, epoch));
}

}  // namespace

nlohmann::json run_train(const RunConfig& config) {
  RunSetup s = set_up(config);
  Trainer& trainer = *s.trainer;
  const int64_t images_per_step = trainer.images_per_step();
  EpochSampler sampler(s.train_data->size(), config.seed + 1, /*shuffle=*/true);
  const int64_t steps_per_epoch = sampler.batches_per_epoch(images_per_step);
  const int64_t total_steps = *config.epochs > 0 ? *config.epochs * steps_per_epoch : *config.steps;
  LearningRateSchedule schedule(config, steps_per_epoch, total_steps);

  int64_t first_step = 0;
  if (!config.resume_path.empty()) {
    Checkpoint checkpoint = load_checkpoint(config.resume_path);
    trainer.restore(checkpoint);
    first_step = checkpoint.step;
    DLB_REQUIRE(first_step < total_steps,
                "--resume {}: the checkpoint is at step {}, the run ends at step {}; "
                "ask for more --steps or --epochs",
                config.resume_path, first_step, total_steps);
  }
  print_header("train", config, s,
               fmt::format("{} steps ({} per epoch){}", total_steps, steps_per_epoch,
                           first_step > 0 ? fmt::format(", resuming at step {}", first_step) : ""));

  std::vector<int64_t> order;
  int64_t order_epoch = -1;
  std::vector<double> losses;
  std::vector<nlohmann::json> evaluations;
  MeasuredWindow window;
  double train_seconds = 0;
  double last_accuracy = NAN;
  WallTimer since_log;
  int64_t images_since_log = 0;

  auto evaluate = [&](int64_t epoch, int64_t step) {
    if (!s.test_data) return;
    WallTimer timer;
    last_accuracy = trainer.evaluate(*s.test_data);
    evaluations.push_back({{"epoch", epoch}, {"step", step}, {"test_accuracy", last_accuracy}});
    std::printf("epoch %lld  test accuracy %.2f%% (%lld images, %.1f s)\n", static_cast<long long>(epoch + 1),
                100.0 * last_accuracy, static_cast<long long>(s.test_data->size()), timer.seconds());
    std::fflush(stdout);
  };

  for (int64_t step = first_step; step < total_steps; ++step) {
    const int64_t epoch = step / steps_per_epoch;
    const int64_t batch_in_epoch = step % steps_per_epoch;
    if (epoch != order_epoch) {
      order = sampler.epoch_order(epoch);
      order_epoch = epoch;
    }
    // Micro-batch k of this step is batch (batch_in_epoch * K + k) of the epoch's order.
    auto feed = [&](int64_t micro) {
      if (config.data == "synthetic" && config.accumulate_steps == 1 && step > first_step) return;
      int64_t b = batch_in_epoch * config.accumulate_steps + micro;
      trainer.load_batch(*s.train_data, EpochSampler::batch(order, b, *config.batch_size));
    };
    WallTimer step_timer;
    float loss = trainer.step(feed, schedule.at(step), /*read_loss=*/true);
    double step_ms = step_timer.milliseconds();
    train_seconds += step_ms / 1e3;
    if (step >= first_step + *config.warmup_steps) window.add_step(step_ms, images_per_step);
    losses.push_back(loss);
    images_since_log += images_per_step;
    DLB_REQUIRE(std::isfinite(loss), "training diverged: loss is {} at step {}; lower --lr", loss, step + 1);

    if ((step + 1) % *config.log_every == 0 || step + 1 == total_steps) {
      double rate = static_cast<double>(images_since_log) / since_log.seconds();
      double eta = static_cast<double>(total_steps - step - 1) * images_per_step / rate;
      std::printf("step %lld/%lld  epoch %lld  loss %.4f  lr %.4g  %.1f img/s  ETA %s\n",
                  static_cast<long long>(step + 1), static_cast<long long>(total_steps),
                  static_cast<long long>(epoch + 1), loss, schedule.at(step), rate,
                  format_duration(eta).c_str());
      std::fflush(stdout);
      since_log.restart();
      images_since_log = 0;
    }
    const bool epoch_done = batch_in_epoch + 1 == steps_per_epoch;
    if (epoch_done) evaluate(epoch, step + 1);
    if (!config.checkpoint_path.empty() &&
        (epoch_done || (config.save_every > 0 && (step + 1) % config.save_every == 0) ||
         step + 1 == total_steps)) {
      save_checkpoint_to(config, trainer, step + 1, (step + 1) / steps_per_epoch);
    }
  }
  // A run that stops mid-epoch is still evaluated at its end.
  if (s.test_data && (total_steps % steps_per_epoch != 0))
    evaluate(total_steps / steps_per_epoch, total_steps);
  // The window of a training run is the sum of its timed steps: evaluation and checkpoints stay out of it.
  double window_seconds = 0;
  for (double ms : window.step_ms()) window_seconds += ms / 1e3;
  window.set_wall_seconds(window_seconds);

  nlohmann::json j = result_skeleton(config, s);
  Distribution d = window.step_distribution();
  j["steps"] = total_steps - first_step;
  j["first_step"] = first_step;
  j["epochs"] = static_cast<double>(total_steps) / static_cast<double>(steps_per_epoch);
  j["final_loss"] = losses.empty() ? NAN : losses.back();
  j["losses"] = losses;
  j["images_per_second"] = window.images_per_second();
  j["step_ms"] = to_json(d);
  j["train_seconds"] = train_seconds;
  if (s.test_data) {
    j["test_accuracy"] = last_accuracy;
    j["evaluations"] = evaluations;
  }
  std::printf("done: %lld steps, final loss %.4f, %.1f img/s (median step %.1f ms, p5 %.1f, p95 %.1f)",
              static_cast<long long>(total_steps - first_step), losses.empty() ? NAN : losses.back(),
              window.images_per_second(), d.median, d.p5, d.p95);
  if (s.test_data) std::printf(", test accuracy %.2f%%", 100.0 * last_accuracy);
  std::printf("\n");
  return j;
}

nlohmann::json run_bench(const RunConfig& config) {
  RunSetup s = set_up(config);
  Trainer& trainer = *s.trainer;
  const int64_t images_per_step = trainer.images_per_step();
  print_header("bench", config, s,
               fmt::format("{} warm-up + {} timed steps", *config.warmup_steps, *config.steps));
  LearningRateSchedule schedule(config, *config.warmup_steps + *config.steps,
                                *config.warmup_steps + *config.steps);

  // Synthetic inputs are loaded once and stay on the device (several micro-batches: reloaded each).
  std::vector<int64_t> all(static_cast<size_t>(s.train_data->size()));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  auto load = [&](int64_t micro) {
    trainer.load_batch(*s.train_data, EpochSampler::batch(all, micro, *config.batch_size));
  };
  load(0);
  auto feed = [&](int64_t micro) {
    if (config.accumulate_steps > 1) load(micro);
  };

  float loss = NAN;
  for (int64_t step = 0; step < *config.warmup_steps; ++step) {
    WallTimer timer;
    loss = trainer.step(feed, schedule.at(step), /*read_loss=*/true);
    std::printf("warm-up %lld/%lld  loss %.4f  %.1f ms\n", static_cast<long long>(step + 1),
                static_cast<long long>(*config.warmup_steps), loss, timer.milliseconds());
    std::fflush(stdout);
  }
  // After warm-up the step is recorded once and replayed (on backends that can: CUDA graphs).
  std::unique_ptr<CapturedWork> graph;
  if (config.cuda_graph) graph = trainer.capture_step(schedule.at(*config.warmup_steps));
  std::printf("step as one graph: %s\n", graph               ? "yes"
                                         : config.cuda_graph ? "no (not supported here)"
                                                             : "no (off)");

  MeasuredWindow window;
  std::vector<double> losses;
  s.backend->synchronize();
  const double seconds_to_first_timed_step = process_clock.seconds();
  WallTimer window_timer;
  for (int64_t step = 0; step < *config.steps; ++step) {
    WallTimer timer;
    bool read_loss = (step + 1) % *config.log_every == 0 || step + 1 == *config.steps;
    if (graph) {
      graph->replay();
      if (read_loss) loss = trainer.read_loss();
    } else {
      loss = trainer.step(feed, schedule.at(*config.warmup_steps + step), read_loss);
    }
    s.backend->synchronize();
    double ms = timer.milliseconds();
    window.add_step(ms, images_per_step);
    if (read_loss) {
      losses.push_back(loss);
      double eta = ms * static_cast<double>(*config.steps - step - 1) / 1e3;
      std::printf("step %lld/%lld  loss %.4f  %.1f ms  %.1f img/s  ETA %s\n",
                  static_cast<long long>(step + 1), static_cast<long long>(*config.steps), loss, ms,
                  static_cast<double>(images_per_step) * 1e3 / ms, format_duration(eta).c_str());
      std::fflush(stdout);
    }
  }
  window.set_wall_seconds(window_timer.seconds());
  Distribution d = window.step_distribution();

  nlohmann::json j = result_skeleton(config, s);
  j["steps"] = *config.steps;
  j["warmup_steps"] = *config.warmup_steps;
  j["final_loss"] = loss;
  j["images_per_second"] = window.images_per_second();
  j["step_ms"] = to_json(d);
  j["window_seconds"] = window.wall_seconds();
  j["seconds_to_first_timed_step"] = seconds_to_first_timed_step;
  j["cuda_graph"] = graph != nullptr;
  j["flops_per_image"] =
      3.0 * 2.0 * static_cast<double>(trainer.net().forward_macs()) / static_cast<double>(*config.batch_size);
  if (config.per_layer) {
    // After the window, so it cannot disturb the measurement.
    std::vector<LayerTime> times = profile_layers(trainer.net(), 3);
    std::printf("\nper-layer times (mean of 3 iterations, each layer synchronised):\n%s\n",
                format_layer_profile(times).c_str());
    j["per_layer"] = to_json(times);
  }
  std::printf(
      "%s %s batch %lld on %s: %.2f img/s | step median %.1f ms, p5 %.1f, p95 %.1f, mean %.1f +- %.1f ms\n",
      config.model.c_str(), precision_name(config.precision), static_cast<long long>(*config.batch_size),
      device_name(config.device).c_str(), window.images_per_second(), d.median, d.p5, d.p95, d.mean, d.ci95);
  return j;
}

}  // namespace dlbench
