#include "train/run.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "backend/algorithm_store.h"
#include "backend/backend_factory.h"
#include "bench/clock_sampler.h"
#include "bench/gpu_info.h"
#include "bench/layer_profile.h"
#include "bench/measure.h"
#include "bench/system_info.h"
#include "core/file_io.h"
#include "core/status.h"
#include "core/timeline.h"
#include "core/timer.h"
#include "data/batch_prefetcher.h"
#include "data/epoch_sampler.h"
#include "data/idx.h"
#include "data/image_dataset.h"
#include "data/shard.h"
#include "data/synthetic.h"
#include "dist/config_check.h"
#include "dist/launch.h"
#include "models/resnet.h"
#include "train/checkpoint.h"
#include "train/lr_schedule.h"
#include "train/memory_fit.h"
#include "train/mlperf_log.h"
#include "train/trainer.h"

namespace dlbench {

namespace {

// When the process started (static initialisation), for the time to the first timed step.
const WallTimer process_clock;

// Only rank 0 speaks: each rank's thread (or process) sets this once it knows its rank.
thread_local bool rank_speaks = true;

__attribute__((format(printf, 1, 2))) void say(const char* format, ...) {
  if (!rank_speaks) return;
  va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
}

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
  std::unique_ptr<dist::Communicator> comm;  // destroyed before the backend it uses, after the trainer
  std::unique_ptr<Dataset> train_data;
  std::unique_ptr<Dataset> test_data;
  Model model;
  std::unique_ptr<Trainer> trainer;
  MemoryFit memory_fit;
  RunConfig config;  // as given, with --batch-size max resolved
};

// --batch-size max: the largest batch whose plan fits this rank's device, agreed on by all ranks (the
// smallest of theirs), rounded down to a multiple of 8 (the tensor cores' granule for FP16/BF16 GEMMs).
int64_t resolve_largest_batch(const RunConfig& config, Backend& backend, const ModelOptions& options,
                              dist::Communicator& comm) {
  RunConfig anchor = config;
  anchor.batch_size = 32;  // only the search's starting point
  const MemoryFit fit = largest_batch_that_fits(anchor, backend, options);
  DLB_REQUIRE(fit.device.has_value(),
              "--batch-size max needs a device that states its free memory (a GPU); give a number");
  const double mine = static_cast<double>(fit.largest_batch.value_or(0));
  auto batch = static_cast<int64_t>(-comm.max(-mine));
  if (batch >= 8) batch -= batch % 8;
  DLB_REQUIRE(batch >= 1, "--batch-size max: not even a batch of 1 fits on {} ({:.1f} GiB free)",
              fit.device->description, static_cast<double>(fit.device->free_bytes) / (1 << 30));
  return batch;
}

RunSetup set_up(const RunConfig& given, dist::Launch& launch, int slot) {
  RunSetup s;
  s.config = given;
  RunConfig& config = s.config;
  Device device = config.device;
  if (device.kind == DeviceKind::cuda) device.index = launch.gpu(slot);
  if (!config.algorithm_cache.empty()) use_algorithm_store(config.algorithm_cache);
  // --comm-priority low: training's stream above the gradient sums' (they take SMs only when it leaves some).
  s.backend = make_backend(config.backend_name, device, config.threads, config.precision == Precision::tf32,
                           static_cast<size_t>(config.conv_workspace_mb * (1 << 20)),
                           /*priority_stream=*/config.comm_priority == "low");
  s.comm = launch.join(slot, *s.backend);
  rank_speaks = s.comm->rank() == 0;
  const int ranks = s.comm->size();
  // Ranks started with different flags would train different things: stop them all, naming the flag.
  dist::check_same_config(*s.comm, config_to_json(config), {"device", "threads", "data_threads"});
  // Fail on bad output paths before any work.
  if (!config.json_path.empty()) check_writable(config.json_path, "--json");
  if (!config.checkpoint_path.empty()) check_writable(config.checkpoint_path, "--checkpoint");
  if (!config.trace_path.empty()) check_writable(config.trace_path, "--trace");
  if (!config.mlperf_log_path.empty()) check_writable(config.mlperf_log_path, "--mlperf-log");

  ModelOptions options;
  options.label_smoothing = static_cast<float>(config.label_smoothing);
  if (config.data == "synthetic") {
    ImageShape in = default_input_shape(config.model);
    options.input = in;
    options.num_classes = default_num_classes(config.model);
  } else if (config.data_kind == "images") {
    auto train_source = std::shared_ptr<const EncodedImageSource>(
        is_shard_set(config.train_images) ? open_shard_set(config.train_images)
                                          : open_image_folder(config.train_images));
    ImageDatasetOptions image_options = default_image_options(*train_source);
    if (config.image_size > 0) image_options.image_size = config.image_size;
    image_options.threads = config.data_threads;
    image_options.seed = config.seed + 3 + static_cast<uint64_t>(s.comm->rank());
    image_options.strict = config.strict;
    if (config.kind == RunKind::train && !config.val_images.empty()) {
      auto val_source = std::shared_ptr<const EncodedImageSource>(is_shard_set(config.val_images)
                                                                      ? open_shard_set(config.val_images)
                                                                      : open_image_folder(config.val_images));
      DLB_REQUIRE(val_source->class_names() == train_source->class_names(),
                  "{} and {} name different classes ({} and {}); the labels would not agree",
                  train_source->description(), val_source->description(), train_source->class_names().size(),
                  val_source->class_names().size());
      ImageDatasetOptions val_options = image_options;
      val_options.train = false;
      s.test_data = std::make_unique<ImageDataset>(val_source, val_options);
    }
    s.train_data = std::make_unique<ImageDataset>(train_source, image_options);
    SampleShape shape = s.train_data->sample_shape();
    options.input = {shape.channels, shape.height, shape.width};
    options.num_classes = s.train_data->num_classes();
  } else {
    s.train_data = std::make_unique<IdxDataset>(load_fashion_mnist(config.data_dir, Split::train));
    if (config.kind == RunKind::train) {
      s.test_data = std::make_unique<IdxDataset>(load_fashion_mnist(config.data_dir, Split::test));
    }
    SampleShape shape = s.train_data->sample_shape();
    options.input = {shape.channels, shape.height, shape.width};
    options.num_classes = s.train_data->num_classes();
  }

  if (config.batch_size_max) {
    config.batch_size = resolve_largest_batch(config, *s.backend, options, *s.comm);
    say("--batch-size max: %lld images per device\n", static_cast<long long>(*config.batch_size));
  }
  if (config.data == "synthetic") {
    const ImageShape in = options.input;
    // Generated once, as the classic benchmarks do: one step's worth of distinct samples.
    s.train_data = std::make_unique<SyntheticDataset>(*config.batch_size * config.accumulate_steps * ranks,
                                                      SampleShape{in.channels, in.height, in.width},
                                                      static_cast<int>(options.num_classes), config.seed + 2);
  }
  // Before the model takes any memory or searches an algorithm: a batch that does not fit stops here.
  s.memory_fit = largest_batch_that_fits(config, *s.backend, options);
  require_fit(s.memory_fit);
  NetworkOptions net_options;
  net_options.batch = *config.batch_size;
  net_options.layout = config.layout;
  net_options.dtype = compute_dtype(config.precision);
  s.model = build_model(config.model, *s.backend, net_options, options);
  s.trainer = std::make_unique<Trainer>(*s.backend, s.model, config, s.comm.get());
  if (auto store = algorithm_store()) {
    // Every rank has planned (searched) by the barrier; one process writes the file.
    s.comm->barrier();
    if (s.comm->rank() == 0) store->save();
  }
  return s;
}

void print_header(const char* command, const RunConfig& config, RunSetup& s, const std::string& length) {
  Network& net = s.trainer->net();
  const Tensor& images = s.model.images->value;
  say("dlbench %s | %s, %s parameters, %.2f GMAC per image forward\n", command, config.model.c_str(),
      with_thousands(net.parameter_count()).c_str(),
      static_cast<double>(net.forward_macs()) / static_cast<double>(*config.batch_size) / 1e9);
  const double planned = static_cast<double>(net.memory().total_bytes());
  say("  device %s (%s backend, %d threads) | precision %s | layout %s | memory %.1f %s planned%s\n",
      device_name(config.device).c_str(), s.backend->name().c_str(), config.threads,
      precision_name(config.precision), layout_name(config.layout),
      planned >= (1 << 30) ? planned / (1 << 30) : planned / (1 << 20), planned >= (1 << 30) ? "GiB" : "MiB",
      s.memory_fit.largest_batch
          ? fmt::format(" (largest batch that fits: {})", *s.memory_fit.largest_batch).c_str()
          : "");
  {
    const MemoryPlan& plan = net.memory();
    auto gib = [](size_t bytes) { return static_cast<double>(bytes) / (1 << 30); };
    const size_t other =
        plan.total_bytes() - plan.activation_bytes() - plan.workspace_bytes() - plan.held_bytes();
    say("  memory plan: activations and their gradients %.2f GiB | workspace %.2f GiB | weights, gradients "
        "and "
        "optimizer state %.2f GiB%s\n",
        gib(plan.activation_bytes()), gib(plan.workspace_bytes()), gib(other),
        plan.held_bytes() ? fmt::format(" | batch-norm reserves {:.2f} GiB", gib(plan.held_bytes())).c_str()
                          : "");
  }
  say("  data %s: %lld samples of %lldx%lldx%lld%s | batch %lld per device%s | %s\n", config.data.c_str(),
      static_cast<long long>(s.train_data->size()), static_cast<long long>(images.c()),
      static_cast<long long>(images.h()), static_cast<long long>(images.w()),
      s.test_data ? fmt::format(", {} test", s.test_data->size()).c_str() : "",
      static_cast<long long>(*config.batch_size),
      config.accumulate_steps > 1 ? fmt::format(" x {} micro-batches", config.accumulate_steps).c_str() : "",
      length.c_str());
  say("  sgd lr %g (%s", config.lr, lr_schedule_name(config.lr_schedule));
  if (config.lr_warmup_epochs > 0) say(", warm-up %g epochs", config.lr_warmup_epochs);
  say(") momentum %g%s weight decay %g%s | seed %llu\n", config.momentum, config.nesterov ? " nesterov" : "",
      config.weight_decay, config.decay_norm_and_bias ? "" : " (not on BN/bias)",
      static_cast<unsigned long long>(config.seed));
  if (s.comm->size() == 1 && s.comm->name() != "local") {
    say("  one rank (%s): no gradients to exchange, it runs as a single device does\n",
        s.comm->name().c_str());
  } else if (s.comm->size() > 1) {
    say("  data parallel: %d ranks (%s), gradient buckets of %g MiB summed in %s while backward runs%s\n",
        s.comm->size(), s.comm->name().c_str(), config.bucket_mb,
        config.allreduce_precision == "fp32" ? "fp32" : precision_name(config.precision),
        config.lr_scaling == "linear" ? ", lr scaled linearly" : "");
  }
  std::fflush(stdout);
}

// The learning rate the schedule starts from: --lr, times the ranks with --lr-scaling linear.
RunConfig with_scaled_lr(const RunConfig& config, int ranks) {
  RunConfig scaled = config;
  if (config.lr_scaling == "linear") scaled.lr = config.lr * ranks;
  return scaled;
}

// Runs `rank_body` on every rank this process holds (one, or one thread per GPU with --gpus N) and returns
// rank 0's result; null in an MPI process of another rank.
nlohmann::json run_ranks(const RunConfig& config,
                         const std::function<nlohmann::json(dist::Launch&, int slot)>& rank_body) {
  dist::LaunchOptions options;
  options.launcher = config.launcher;
  options.device = config.device.kind;
  options.gpus = config.gpus;
  options.timeout_seconds = config.timeout_seconds;
  options.nccl.max_ctas = config.nccl_max_ctas;
  options.nccl.high_priority = config.comm_priority == "high";
  options.nccl.symmetric = config.nccl_symmetric;
  auto launch = dist::make_launch(options);
  nlohmann::json result;
  std::mutex result_mutex;
  dist::run_local_ranks(*launch, [&](int slot) {
    nlohmann::json j = rank_body(*launch, slot);
    std::lock_guard<std::mutex> lock(result_mutex);
    if (!j.is_null()) result = std::move(j);
  });
  return result;
}

nlohmann::json result_skeleton(const RunConfig& config, RunSetup& s) {
  nlohmann::json j;
  j["model"] = config.model;
  j["parameters"] = s.trainer->net().parameter_count();
  // "cuda:NVIDIA H200" on a GPU (what results are compared by), "cpu" on the CPU.
  j["device"] = s.memory_fit.device ? "cuda:" + s.memory_fit.device->name : device_name(config.device);
  j["device_index"] = device_name(config.device);
  j["backend"] = s.backend->name();
  j["precision"] = precision_name(config.precision);
  j["batch_size"] = *config.batch_size;
  j["global_batch_size"] = *config.batch_size * config.accumulate_steps * s.comm->size();
  j["ranks"] = s.comm->size();
  j["launcher"] = s.comm->name() != "local" ? s.comm->name() : "single";
  j["threads"] = config.threads;
  j["peak_memory_bytes"] = s.trainer->net().memory().total_bytes();
  j["algorithm_digest"] = algorithm_digest(s.trainer->net());
  j["largest_batch"] = s.memory_fit.largest_batch ? nlohmann::json(*s.memory_fit.largest_batch) : nullptr;
  j["loss_scale"] = s.trainer->loss_scale();
  j["skipped_steps"] = s.trainer->skipped_steps();
  j["date"] = iso_date_utc();
  j["config"] = config_to_json(config);
  j["system"] = system_info();
  return j;
}

void save_checkpoint_to(const RunConfig& config, RunSetup& s, int64_t step, int64_t epoch) {
  if (s.comm->rank() == 0) save_checkpoint(config.checkpoint_path, s.trainer->make_checkpoint(step, epoch));
}

// --trace: the timeline of steps trace_first..trace_last of this rank; write() gathers every rank's.
class StepTracer {
 public:
  StepTracer(const RunConfig& config, RunSetup& s) : config_(config), s_(s) {}
  ~StepTracer() {
    if (timeline_) Timeline::set_current(nullptr);
  }
  void before(int64_t step_number) {
    if (config_.trace_path.empty() || step_number != config_.trace_first) return;
    timeline_ = std::make_unique<Timeline>(*s_.backend, s_.comm->rank());
    Timeline::set_current(timeline_.get());
  }
  void after(int64_t step_number) {
    if (!timeline_ || step_number != config_.trace_last) return;
    events_ = timeline_->events();
    Timeline::set_current(nullptr);
    timeline_.reset();
  }
  // Collective: every rank calls it once, at the end of the run.
  void write() {
    if (config_.trace_path.empty()) return;
    std::vector<std::string> all = s_.comm->all_gather(events_.dump());
    if (s_.comm->rank() != 0) return;
    nlohmann::json merged = nlohmann::json::array();
    for (const std::string& text : all)
      for (auto& event : nlohmann::json::parse(text)) merged.push_back(std::move(event));
    DLB_REQUIRE(!merged.empty(), "--trace-steps {}: the run has no such steps", config_.trace_steps);
    nlohmann::json trace = {{"traceEvents", merged}, {"displayTimeUnit", "ms"}};
    write_file_atomically(config_.trace_path, trace.dump() + "\n");
    say("trace of steps %lld-%lld (%zu events) written to %s\n", static_cast<long long>(config_.trace_first),
        static_cast<long long>(config_.trace_last), merged.size(), config_.trace_path.c_str());
  }

 private:
  const RunConfig& config_;
  RunSetup& s_;
  std::unique_ptr<Timeline> timeline_;
  nlohmann::json events_ = nlohmann::json::array();
};

// Every rank's measured throughput summed (never rank 0's times the ranks), into the result.
void add_throughput(nlohmann::json& j, RunSetup& s, const MeasuredWindow& window) {
  const double total = s.comm->sum(window.images_per_second());
  j["images_per_second"] = total;
  j["images_per_second_per_device"] = total / s.comm->size();
}

// Real images are decoded ahead of the loop (data/batch_prefetcher.h), in the network's compute dtype and
// layout where the data set writes it, into page-locked buffers. `indices(n)` is the n-th micro-batch the
// loop will feed.
std::unique_ptr<BatchPrefetcher> make_prefetcher(RunSetup& s, int64_t count,
                                                 BatchPrefetcher::BatchIndices indices) {
  if (!dynamic_cast<const ImageDataset*>(s.train_data.get())) return nullptr;
  const Tensor& images = s.trainer->model().images->value;
  const DType dtype = s.train_data->writes_dtype(images.dtype()) ? images.dtype() : DType::f32;
  Backend& backend = *s.backend;
  return std::make_unique<BatchPrefetcher>(
      *s.train_data, images.dims(), dtype, images.layout(), count, std::move(indices), 3,
      [&backend](size_t bytes) { return backend.allocate_host(bytes); },
      [&backend](void* p) { backend.deallocate_host(p); });
}

// The input pipeline's part of a result: how long the loop waited for data, the rate the device would
// reach without those waits, and the bad images skipped.
void add_data_pipeline(nlohmann::json& j, RunSetup& s, const BatchPrefetcher* prefetcher, double wait_seconds,
                       const MeasuredWindow& window) {
  const auto* images = dynamic_cast<const ImageDataset*>(s.train_data.get());
  if (!prefetcher || !images) return;
  const double steps = static_cast<double>(std::max<size_t>(1, window.step_ms().size()));
  j["data_wait_ms_per_step"] = 1e3 * s.comm->sum(wait_seconds) / s.comm->size() / steps;
  const double compute_seconds = window.wall_seconds() - wait_seconds;
  j["compute_images_per_second"] =
      s.comm->sum(compute_seconds > 0 ? static_cast<double>(window.images()) / compute_seconds : 0.0);
  const ImageDatasetStats stats = images->stats();
  j["data_threads"] = images->options().threads;
  j["bad_images_skipped"] = s.comm->sum(static_cast<double>(stats.bad_files));
  say("  input pipeline: waited %.2f ms per step for data | %.1f img/s without the waits | %lld bad images "
      "skipped\n",
      j["data_wait_ms_per_step"].get<double>(), j["compute_images_per_second"].get<double>(),
      static_cast<long long>(j["bad_images_skipped"].get<double>()));
}

// The energy every rank's GPU used over the window (NVML's counters), where every rank's driver has it:
// energy_joules, energy_joules_per_image and average_power_watts (all ranks together), else null.
void add_energy(nlohmann::json& j, RunSetup& s, std::optional<double> before, std::optional<double> after,
                double images_per_rank, double window_seconds) {
  const bool measured = before && after && *after >= *before;
  // Collectives, so every rank calls them whatever it measured.
  const bool everywhere = s.comm->max(measured ? 0.0 : 1.0) == 0.0;
  const double joules = s.comm->sum(measured ? *after - *before : 0.0);
  const double images = images_per_rank * s.comm->size();
  if (!everywhere || joules <= 0) {
    j["energy_joules"] = j["energy_joules_per_image"] = j["average_power_watts"] = nullptr;
    return;
  }
  j["energy_joules"] = joules;
  j["energy_joules_per_image"] = joules / images;
  j["average_power_watts"] = joules / window_seconds;
  say("energy: %.1f J in the window, %.3f J per image, %.0f W on average (%d GPU%s)\n", joules,
      joules / images, joules / window_seconds, s.comm->size(), s.comm->size() > 1 ? "s" : "");
}

// The GPUs' clocks over the window (ClockSampler), where every rank's driver reads them: "gpu_clocks" with
// the lowest of the ranks' median SM clocks (the slowest GPU sets a data-parallel step's pace), rank 0's
// median, and the mean over the ranks of the fractions of samples held back by the power cap, by heat and by
// hardware slowdown; else null.
void add_clocks(nlohmann::json& j, RunSetup& s, const std::optional<ClockSummary>& mine,
                std::chrono::milliseconds period) {
  // Collectives, so every rank calls them whatever it measured.
  const bool everywhere = s.comm->max(mine ? 0.0 : 1.0) == 0.0;
  const ClockSummary c = mine.value_or(ClockSummary{});
  const double slowest = -s.comm->max(-c.sm_clock_median_mhz);
  const double ranks = s.comm->size();
  const double capped = s.comm->sum(c.power_capped) / ranks;
  const double thermal = s.comm->sum(c.thermal) / ranks;
  const double hardware = s.comm->sum(c.hardware_slowdown) / ranks;
  if (!everywhere) {
    j["gpu_clocks"] = nullptr;
    return;
  }
  j["gpu_clocks"] = {{"sm_clock_median_mhz", slowest},
                     {"sm_clock_median_mhz_rank0", c.sm_clock_median_mhz},
                     {"sm_clock_min_mhz_rank0", c.sm_clock_min_mhz},
                     {"sm_clock_max_mhz_rank0", c.sm_clock_max_mhz},
                     {"power_mean_watts_rank0", c.power_mean_watts},
                     {"power_capped_fraction", capped},
                     {"thermal_slowdown_fraction", thermal},
                     {"hardware_slowdown_fraction", hardware},
                     {"samples_rank0", c.samples},
                     {"period_ms", period.count()}};
  const std::string other_reasons = thermal > 0 || hardware > 0
                                        ? fmt::format(", by heat in {:.0f}%, by hardware slowdown in {:.0f}%",
                                                      100 * thermal, 100 * hardware)
                                        : std::string();
  say("GPU clocks in the window: SM median %.0f MHz%s, held back by the power cap in %.0f%% of samples%s\n",
      slowest, s.comm->size() > 1 ? " (slowest GPU)" : "", 100 * capped, other_reasons.c_str());
}

nlohmann::json train_rank(const RunConfig& given, dist::Launch& launch, int slot) {
  // Only rank 0 logs (every rank could not open the same file in threads mode); the rank is known after
  // set-up, so init_start is stamped with the time before it.
  const auto init_start_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
  RunSetup s = set_up(given, launch, slot);
  const int rank = s.comm->rank(), ranks = s.comm->size();
  MlperfLog mllog(rank == 0 ? given.mlperf_log_path : std::string());
  const RunConfig config = with_scaled_lr(s.config, ranks);
  Trainer& trainer = *s.trainer;
  const int64_t images_per_step = trainer.images_per_step();
  // Every rank draws the same global order of the epoch; a step of the whole run takes ranks x
  // micro-batches consecutive batches of it, and rank r's micro-batch k is batch r * K + k of those. One
  // rank accumulating R x K micro-batches therefore sees exactly the samples of R ranks.
  EpochSampler sampler(s.train_data->size(), config.seed + 1, /*shuffle=*/true);
  const int64_t steps_per_epoch = sampler.batches_per_epoch(images_per_step * ranks);
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

  const int64_t micro_batches = config.accumulate_steps;
  std::unique_ptr<BatchPrefetcher> prefetcher = make_prefetcher(
      s, (total_steps - first_step) * micro_batches,
      // The same walk as the loop's feed below, on the prefetch thread with its own copy of the order.
      [&, order = std::vector<int64_t>(), order_epoch = int64_t{-1}](int64_t n) mutable {
        const int64_t step = first_step + n / micro_batches, micro = n % micro_batches;
        if (step / steps_per_epoch != order_epoch) {
          order_epoch = step / steps_per_epoch;
          order = sampler.epoch_order(order_epoch);
        }
        const int64_t b = ((step % steps_per_epoch) * ranks + rank) * micro_batches + micro;
        auto batch = EpochSampler::batch(order, b, *config.batch_size);
        std::vector<int64_t> indices(batch.begin(), batch.end());
        indices.resize(static_cast<size_t>(*config.batch_size), indices[0]);  // as load_batch pads
        return indices;
      });
  double window_wait_seconds = 0;
  if (mllog.enabled()) {
    mllog.start("init_start", nullptr, {{"time_at_process_start_ms", init_start_ms}});
    mllog.point("submission_benchmark", config.model);
    mllog.point("submission_platform",
                s.memory_fit.device ? s.memory_fit.device->name : device_name(config.device));
    mllog.point("global_batch_size", images_per_step * ranks);
    mllog.point("gradient_accumulation_steps", config.accumulate_steps);
    mllog.point("train_samples", s.train_data->size());
    if (s.test_data) mllog.point("eval_samples", s.test_data->size());
    mllog.point("opt_name", config.nesterov ? "sgd_nesterov" : "sgd");
    mllog.point("opt_base_learning_rate", config.lr);
    mllog.point("opt_momentum", config.momentum);
    mllog.point("opt_weight_decay", config.weight_decay);
    mllog.point("opt_learning_rate_warmup_epochs", config.lr_warmup_epochs);
    mllog.point("opt_learning_rate_schedule", lr_schedule_name(config.lr_schedule));
    mllog.point("precision", precision_name(config.precision));
    mllog.point("seed", config.seed);
    mllog.end("init_stop");
    mllog.start("run_start");
  }

  std::vector<int64_t> order;
  int64_t order_epoch = -1;
  std::vector<double> losses;
  std::vector<nlohmann::json> evaluations;
  MeasuredWindow window;
  double train_seconds = 0;
  double last_accuracy = NAN;
  WallTimer since_log;
  int64_t images_since_log = 0;

  StepTracer tracer(config, s);
  // Rank 0 evaluates (its batch-norm statistics); the others go on to the end of the run.
  auto evaluate = [&](int64_t epoch, int64_t step) {
    if (!s.test_data || rank != 0) return;
    WallTimer timer;
    mllog.start("eval_start", nullptr, {{"epoch_num", epoch + 1}});
    last_accuracy = trainer.evaluate(*s.test_data);
    mllog.point("eval_accuracy", last_accuracy, {{"epoch_num", epoch + 1}});
    mllog.end("eval_stop", nullptr, {{"epoch_num", epoch + 1}});
    evaluations.push_back({{"epoch", epoch}, {"step", step}, {"test_accuracy", last_accuracy}});
    say("epoch %lld  test accuracy %.2f%% (%lld images, %.1f s)\n", static_cast<long long>(epoch + 1),
        100.0 * last_accuracy, static_cast<long long>(s.test_data->size()), timer.seconds());
    std::fflush(stdout);
  };

  for (int64_t step = first_step; step < total_steps; ++step) {
    s.comm->set_step(step + 1);
    const int64_t epoch = step / steps_per_epoch;
    const int64_t batch_in_epoch = step % steps_per_epoch;
    if (batch_in_epoch == 0 || step == first_step)
      mllog.start("epoch_start", nullptr, {{"epoch_num", epoch + 1}});
    if (epoch != order_epoch) {
      order = sampler.epoch_order(epoch);
      order_epoch = epoch;
    }
    // Micro-batch k of this step is batch (batch_in_epoch * K + k) of the epoch's order.
    auto feed = [&](int64_t micro) {
      if (config.data == "synthetic" && config.accumulate_steps == 1 && step > first_step) return;
      if (prefetcher) {
        const BatchPrefetcher::Batch& batch = prefetcher->next();
        trainer.load_batch(batch.images, batch.labels);
        return;
      }
      int64_t b = (batch_in_epoch * ranks + rank) * config.accumulate_steps + micro;
      trainer.load_batch(*s.train_data, EpochSampler::batch(order, b, *config.batch_size));
    };
    // After one ordinary step (libraries initialise lazily), the step is recorded and replayed where the
    // backend can (CUDA graphs); the data, the rate and the loss scale still change every step.
    if (step == first_step + 1 && config.cuda_graph) trainer.record_step();
    tracer.before(step + 1);
    WallTimer step_timer;
    const double waited_before = prefetcher ? prefetcher->waited_seconds() : 0;
    float loss = trainer.step(feed, schedule.at(step), /*read_loss=*/true);
    tracer.after(step + 1);
    double step_ms = step_timer.milliseconds();
    train_seconds += step_ms / 1e3;
    if (step >= first_step + *config.warmup_steps) {
      window.add_step(step_ms, images_per_step);
      if (prefetcher) window_wait_seconds += prefetcher->waited_seconds() - waited_before;
    }
    losses.push_back(loss);
    images_since_log += images_per_step;
    DLB_REQUIRE(std::isfinite(loss), "training diverged: loss is {} at step {}; lower --lr", loss, step + 1);

    if ((step + 1) % *config.log_every == 0 || step + 1 == total_steps) {
      double rate = static_cast<double>(images_since_log) / since_log.seconds();
      double eta = static_cast<double>(total_steps - step - 1) * images_per_step / rate;
      say("step %lld/%lld  epoch %lld  loss %.4f  lr %.4g  %.1f img/s  ETA %s\n",
          static_cast<long long>(step + 1), static_cast<long long>(total_steps),
          static_cast<long long>(epoch + 1), loss, schedule.at(step), rate, format_duration(eta).c_str());
      std::fflush(stdout);
      since_log.restart();
      images_since_log = 0;
    }
    const bool epoch_done = batch_in_epoch + 1 == steps_per_epoch;
    if (epoch_done || step + 1 == total_steps) mllog.end("epoch_stop", nullptr, {{"epoch_num", epoch + 1}});
    if (epoch_done) evaluate(epoch, step + 1);
    if (!config.checkpoint_path.empty() &&
        (epoch_done || (config.save_every > 0 && (step + 1) % config.save_every == 0) ||
         step + 1 == total_steps)) {
      save_checkpoint_to(config, s, step + 1, (step + 1) / steps_per_epoch);
    }
  }
  tracer.write();
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
  j["cuda_graph"] = trainer.step_recorded();
  j["epochs"] = static_cast<double>(total_steps) / static_cast<double>(steps_per_epoch);
  j["final_loss"] = losses.empty() ? NAN : losses.back();
  j["losses"] = losses;
  add_throughput(j, s, window);
  add_data_pipeline(j, s, prefetcher.get(), window_wait_seconds, window);
  mllog.run_succeeded();
  j["step_ms"] = to_json(d);
  j["train_seconds"] = train_seconds;
  if (s.test_data) {
    j["test_accuracy"] = last_accuracy;
    j["evaluations"] = evaluations;
  }
  say("done: %lld steps, final loss %.4f, %.1f img/s (median step %.1f ms, p5 %.1f, p95 %.1f)",
      static_cast<long long>(total_steps - first_step), losses.empty() ? NAN : losses.back(),
      j["images_per_second"].get<double>(), d.median, d.p5, d.p95);
  if (s.test_data) say(", test accuracy %.2f%%", 100.0 * last_accuracy);
  say("\n");
  return s.comm->rank() == 0 ? j : nlohmann::json();
}

nlohmann::json bench_rank(const RunConfig& given, dist::Launch& launch, int slot) {
  RunSetup s = set_up(given, launch, slot);
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
  auto load = [&](int64_t micro) {
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
    loss = trainer.step(feed, schedule.at(step), /*read_loss=*/true);
    tracer.after(step + 1);
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
  const double seconds_to_first_timed_step = process_clock.seconds();
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
  j["step_ms"] = to_json(d);
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
  say("%s %s batch %lld on %s: %.2f img/s | step median %.1f ms, p5 %.1f, p95 %.1f, mean %.1f +- %.1f ms\n",
      config.model.c_str(), precision_name(config.precision), static_cast<long long>(*config.batch_size),
      device_name(config.device).c_str(), window.images_per_second(), d.median, d.p5, d.p95, d.mean, d.ci95);
  if (s.comm->size() > 1)
    say("%d ranks: %.2f img/s in total, %.2f per device\n", s.comm->size(),
        j["images_per_second"].get<double>(), j["images_per_second_per_device"].get<double>());
  return s.comm->rank() == 0 ? j : nlohmann::json();
}

}  // namespace

nlohmann::json run_train(const RunConfig& given) {
  return run_ranks(given, [&](dist::Launch& launch, int slot) { return train_rank(given, launch, slot); });
}

nlohmann::json run_bench(const RunConfig& given) {
  return run_ranks(given, [&](dist::Launch& launch, int slot) { return bench_rank(given, launch, slot); });
}

}  // namespace dlbench
