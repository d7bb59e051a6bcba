#include "app/run_setup.h"

#include <fmt/format.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "backend/backend_factory.h"
#include "bench/clock_sampler.h"
#include "bench/gemm_ceiling.h"
#include "bench/gpu_info.h"
#include "bench/gpu_peaks.h"
#include "bench/layer_profile.h"
#include "bench/measure.h"
#include "bench/system_info.h"
#include "core/file_io.h"
#include "core/log.h"
#include "core/machine_limits.h"
#include "core/signals.h"
#include "core/status.h"
#include "core/timeline.h"
#include "core/timer.h"
#include "data/batch_prefetcher.h"
#include "data/epoch_sampler.h"
#include "data/idx.h"
#include "data/image_dataset.h"
#include "data/image_limits.h"
#include "data/shard.h"
#include "data/synthetic.h"
#include "data/synthetic_tokens.h"
#include "data/token_dataset.h"
#include "git_commit.h"  // generated at build time: DLBENCH_GIT_COMMIT
#include "models/gpt.h"
#include "models/resnet.h"
#include "parallel/config_check.h"
#include "parallel/launch.h"
#include "parallel/placement.h"
#include "train/checkpoint.h"
#include "train/lr_schedule.h"
#include "train/memory_fit.h"
#include "train/mlperf_log.h"
#include "train/trainer.h"

namespace dlbench::run_detail {

namespace {

// When the process started (static initialisation), for the time to the first timed step.
const WallTimer process_clock;

// Only rank 0 speaks: each rank's thread (or process) sets this once it knows its rank.
thread_local bool rank_speaks = true;

// 25557032 -> "25,557,032"
std::string with_thousands(int64_t value) {
  std::string digits = std::to_string(value), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && digits[i - 1] != '-' && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// --batch-size max: the largest batch whose plan fits this rank's device, agreed on by all ranks (the
// smallest of theirs), rounded down to a multiple of 8 (the tensor cores' granule for FP16/BF16 GEMMs).
int64_t resolve_largest_batch(const RunConfig& config, Backend& backend, const ModelOptions& options,
                              parallel::Communicator& comm) {
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

// The flags that size what the run holds in host memory, for the line that refuses a run past half of it.
std::string size_flags(const RunConfig& config) {
  return fmt::format(
      "--batch-size {}{}{}", *config.batch_size,
      config.accumulate_steps > 1 ? fmt::format(" --accumulate-steps {}", config.accumulate_steps)
                                  : std::string(),
      config.model.image_size > 0 ? fmt::format(" --image-size {}", config.model.image_size) : std::string());
}

}  // namespace

std::string data_digest(const Dataset& data) {
  const SampleShape shape = data.sample_shape();
  std::string digest = fmt::format("{} samples of {}x{}x{}, {} classes", data.size(), shape.channels,
                                   shape.height, shape.width, data.num_classes());
  if (const auto* in_memory = dynamic_cast<const InMemoryDataset*>(&data)) {
    uLong crc = crc32(0, nullptr, 0);
    for (int64_t i = 0; i < in_memory->size(); ++i) {
      const int32_t label = in_memory->label(i);
      crc = crc32(crc, reinterpret_cast<const Bytef*>(&label), sizeof(label));
    }
    digest += fmt::format(", labels crc32 {:08x}", crc);
  }
  return digest;
}

std::string token_digest(const TokenSource& tokens) {
  return fmt::format("{} tokens, vocabulary {}", tokens.size(), tokens.vocab_size());
}

std::string training_data_digest(const RunSetup& s) {
  return s.train_tokens ? token_digest(*s.train_tokens) : data_digest(*s.train_data);
}

double seconds_since_process_start() { return process_clock.seconds(); }

__attribute__((format(printf, 1, 2))) void say(const char* format, ...) {
  if (!rank_speaks) return;
  va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

std::shared_ptr<tuning::AlgorithmCache> open_algorithm_cache(const RunConfig& config) {
  using Where = AlgorithmCacheChoice::Where;
  const AlgorithmCacheChoice& choice = config.algorithm_cache;
  if (choice.where == Where::none) return std::make_shared<tuning::AlgorithmCache>();
  // A file named is checked on any device, before any work; only a GPU run reads and writes it.
  if (choice.where == Where::file)
    check_writable(choice.file, "--algorithm-cache", OutputKind::algorithm_cache);
  if (config.device.kind != DeviceKind::cuda) return std::make_shared<tuning::AlgorithmCache>();
  if (choice.where == Where::file) return std::make_shared<tuning::AlgorithmCache>(choice.file);
  // The XDG base directories: a relative $XDG_CACHE_HOME is to be ignored.
  std::filesystem::path folder;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && xdg[0] == '/') {
    folder = std::filesystem::path(xdg) / "dlbench";
  } else if (const char* home = std::getenv("HOME"); home && home[0] != '\0') {
    folder = std::filesystem::path(home) / ".cache" / "dlbench";
  } else {
    return std::make_shared<tuning::AlgorithmCache>();
  }
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  if (error) {
    log_warning("algorithm cache: cannot make {} ({}): searching afresh, nothing kept", folder.string(),
                error.message());
    return std::make_shared<tuning::AlgorithmCache>();
  }
  return std::make_shared<tuning::AlgorithmCache>((folder / "algorithms.json").string());
}

namespace {

// Rank `slot`'s backend and communicator, and the checks that every rank runs the same dlbench with the
// same flags. Returns every rank's host name, for the messages that name a rank.
std::vector<std::string> join_ranks(RunSetup& s, parallel::Launch& launch, int slot) {
  const RunConfig& config = s.config;
  Device device = config.device;
  if (device.kind == DeviceKind::cuda) device.index = launch.gpu(slot);
  s.backend = make_backend(config.backend_name, device, config.threads, config.cuda, s.algorithms);
  s.comm = launch.join(slot, *s.backend);
  rank_speaks = s.comm->rank() == 0;
  // Where the launcher put every rank: the result's system.hosts, and the host each message names.
  s.places = parallel::gather_places(*s.comm, parallel::place_of(launch, slot, *s.backend));
  std::vector<std::string> hosts = parallel::host_names(s.places);
  // Ranks of another build, or started with different flags, would train different things: stop them all,
  // naming the rank, its host and what differs.
  parallel::check_same_version(*s.comm,
                               config.parallel.claimed_version.empty()
                                   ? fmt::format("{} (commit {})", DLBENCH_VERSION, DLBENCH_GIT_COMMIT)
                                   : config.parallel.claimed_version,
                               hosts);
  parallel::check_same_config(*s.comm, config_to_json(config), {"device", "threads", "data_threads"}, hosts);
  return hosts;
}

// Bad output paths fail before any work.
void check_outputs_writable(const OutputConfig& output) {
  if (!output.json_path.empty()) check_writable(output.json_path, "--json", OutputKind::json_object);
  if (!output.checkpoint_path.empty())
    check_writable(output.checkpoint_path, "--checkpoint", OutputKind::checkpoint);
  if (!output.trace_path.empty()) check_writable(output.trace_path, "--trace", OutputKind::trace);
  if (!output.mlperf_log_path.empty())
    check_writable(output.mlperf_log_path, "--mlperf-log", OutputKind::mlperf_log);
}

std::shared_ptr<const EncodedImageSource> open_image_source(const std::string& path) {
  return std::shared_ptr<const EncodedImageSource>(is_shard_set(path) ? open_shard_set(path)
                                                                      : open_image_folder(path));
}

// An image folder or shard set, and a train run's evaluation images beside it.
void open_image_data(RunSetup& s) {
  const RunConfig& config = s.config;
  auto train_source = open_image_source(config.data.train_images);
  ImageDatasetOptions image_options = default_image_options(*train_source);
  if (config.model.image_size > 0) image_options.image_size = config.model.image_size;
  // The batches decoded ahead of the step (BatchPrefetcher's 3, and the one being loaded) in host memory.
  check_image_size(image_options.image_size, image_options.channels,
                   *config.batch_size * config.accumulate_steps, compute_dtype(config.model.precision), 4,
                   "--image-size");
  image_options.threads = config.data.threads;
  image_options.seed = config.seed + 3 + static_cast<uint64_t>(s.comm->rank());
  image_options.strict = config.data.strict;
  if (config.kind == RunKind::train && !config.data.val_images.empty()) {
    auto val_source = open_image_source(config.data.val_images);
    DLB_REQUIRE(val_source->class_names() == train_source->class_names(),
                "{} and {} name different classes ({} and {}); the labels would not agree",
                train_source->description(), val_source->description(), train_source->class_names().size(),
                val_source->class_names().size());
    ImageDatasetOptions val_options = image_options;
    val_options.train = false;
    s.test_data = std::make_unique<ImageDataset>(val_source, val_options);
  }
  s.train_data = std::make_unique<ImageDataset>(train_source, image_options);
}

// The data sets read from files (synthetic images are made once the batch is known: make_synthetic_data),
// and the model's input and classes, which the data decides.
// A token model's files: a directory (data/token_dataset.h: train and val splits) or one file (all of it
// for training, no validation).
void open_token_files(RunSetup& s) {
  const RunConfig& config = s.config;
  const int64_t vocab = gpt_spec(config.model.name).vocab;
  if (std::filesystem::is_directory(config.data.source)) {
    TokenData data = dlbench::open_token_data(config.data.source, vocab);
    s.train_tokens = std::make_unique<TokenDataset>(std::move(data.train));
    if (data.val && config.kind == RunKind::train)
      s.val_tokens = std::make_unique<TokenDataset>(std::move(*data.val));
  } else {
    // Named by its path, so that a problem with its windows names the file.
    s.train_tokens =
        std::make_unique<TokenDataset>(TokenDataset::open(config.data.source, {config.data.source}, vocab));
  }
}

ModelOptions open_data(RunSetup& s) {
  const RunConfig& config = s.config;
  ModelOptions options;
  options.label_smoothing = static_cast<float>(config.optimizer.label_smoothing);
  if (is_gpt_model(config.model.name)) {
    options.seq_len = config.model.seq_len;
    if (config.data.kind == DataKind::tokens) open_token_files(s);
    return options;
  }
  if (config.data.kind == DataKind::synthetic) {
    ImageShape in = default_input_shape(config.model.name);
    if (config.model.image_size > 0) in.height = in.width = config.model.image_size;
    options.input = in;
    options.num_classes = default_num_classes(config.model.name);
    return options;
  }
  if (config.data.kind == DataKind::images) {
    open_image_data(s);
  } else {
    s.train_data = std::make_unique<IdxDataset>(load_fashion_mnist(config.data.idx_dir, Split::train));
    if (config.kind == RunKind::train) {
      s.test_data = std::make_unique<IdxDataset>(load_fashion_mnist(config.data.idx_dir, Split::test));
    }
  }
  const SampleShape shape = s.train_data->sample_shape();
  options.input = {shape.channels, shape.height, shape.width};
  options.num_classes = s.train_data->num_classes();
  return options;
}

// --batch-size max resolved, and the batch checked against the device's and the host's memory before the
// model takes any memory or searches an algorithm: a batch that does not fit stops here.
void fit_batch(RunSetup& s, const ModelOptions& options) {
  RunConfig& config = s.config;
  if (config.batch_size_max) {
    config.batch_size = resolve_largest_batch(config, *s.backend, options, *s.comm);
    say("--batch-size max: %lld images per device\n", static_cast<long long>(*config.batch_size));
  }
  s.memory_fit = largest_batch_that_fits(config, *s.backend, options);
  require_fit(s.memory_fit);
  if (!s.memory_fit.device) {
    // The CPU states no free memory to fit a batch to; half of the machine is the most a run may plan.
    require_host_memory(planned_run_bytes(config, *s.backend, options, *config.batch_size),
                        size_flags(config), "the run's memory plan");
  }
}

// Synthetic images, generated once as the classic benchmarks do: one step's worth of distinct samples.
void make_synthetic_data(RunSetup& s, const ModelOptions& options) {
  const RunConfig& config = s.config;
  if (is_gpt_model(config.model.name)) {
    // One step's worth of windows of random tokens (and the one token the last window's target needs).
    const int64_t windows = *config.batch_size * config.accumulate_steps * s.comm->size();
    s.train_tokens = std::make_unique<SyntheticTokens>(windows * options.seq_len + 1,
                                                       gpt_spec(config.model.name).vocab, config.seed + 2);
    return;
  }
  const ImageShape in = options.input;
  const int64_t samples = *config.batch_size * config.accumulate_steps * s.comm->size();
  require_host_memory(static_cast<uint64_t>(samples) *
                          static_cast<uint64_t>(in.channels * in.height * in.width) * sizeof(float),
                      size_flags(config), "the synthetic images");
  s.train_data = std::make_unique<SyntheticDataset>(samples, SampleShape{in.channels, in.height, in.width},
                                                    static_cast<int>(options.num_classes), config.seed + 2);
}

}  // namespace

RunSetup set_up(const RunConfig& given, parallel::Launch& launch, int slot,
                std::shared_ptr<tuning::AlgorithmCache> algorithms) {
  RunSetup s;
  s.config = given;
  s.algorithms = std::move(algorithms);
  const std::vector<std::string> hosts = join_ranks(s, launch, slot);
  check_outputs_writable(s.config.output);
  const ModelOptions options = open_data(s);
  // Each host reads its own copy of the data: ranks whose copies differ stop here. (Synthetic data is made
  // from the seed, which the config check compared.)
  if (s.train_data || s.train_tokens) parallel::check_same_data(*s.comm, training_data_digest(s), hosts);
  fit_batch(s, options);
  if (s.config.data.kind == DataKind::synthetic) make_synthetic_data(s, options);

  const RunConfig& config = s.config;
  NetworkOptions net_options;
  net_options.batch = *config.batch_size;
  net_options.layout = config.model.layout;
  net_options.dtype = compute_dtype(config.model.precision);
  net_options.recompute = config.model.recompute;
  if (config.model.precision == Precision::fp8)
    net_options.fp8 = Fp8Recipe{config.model.fp8_amax_history, config.model.fp8_margin};
  s.model = build_model(config.model.name, *s.backend, net_options, options);
  s.trainer = std::make_unique<Trainer>(*s.backend, s.model, config, s.comm.get());
  // Every rank of this process has planned (searched) by the barrier; each process merges its choices
  // into the file (the ranks of one process share the cache: the first saves, the others find nothing new).
  s.comm->barrier();
  s.algorithms->save();
  return s;
}

void print_header(const char* command, const RunConfig& config, RunSetup& s, const std::string& length) {
  Network& net = s.trainer->net();
  const bool tokens = s.model.family == ModelFamily::gpt;
  say("dlbench %s | %s, %s parameters, %.2f GMAC per %s forward\n", command, config.model.name.c_str(),
      with_thousands(s.model.trained_parameters()).c_str(),
      static_cast<double>(net.forward_macs()) / static_cast<double>(*config.batch_size) / 1e9,
      tokens ? "sequence" : "image");
  const double planned = static_cast<double>(net.memory().total_bytes());
  // An image model's layout; a token model's has none, and says whether its blocks are recomputed.
  const std::string shape = tokens ? (config.model.recompute ? " | recompute on" : "")
                                   : fmt::format(" | layout {}", layout_name(config.model.layout));
  say("  device %s (%s backend, %d threads) | precision %s%s | memory %.1f %s planned%s\n",
      device_name(config.device).c_str(), s.backend->name().c_str(), config.threads,
      precision_name(config.model.precision), shape.c_str(),
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
  const std::string micro_batches =
      config.accumulate_steps > 1 ? fmt::format(" x {} micro-batches", config.accumulate_steps) : "";
  if (tokens) {
    say("  data %s: %s tokens%s | batch %lld sequences of %lld tokens per device%s | %s\n",
        config.data.source.c_str(), with_thousands(s.train_tokens->size()).c_str(),
        s.val_tokens ? fmt::format(", {} validation", with_thousands(s.val_tokens->size())).c_str() : "",
        static_cast<long long>(*config.batch_size), static_cast<long long>(s.model.seq_len),
        micro_batches.c_str(), length.c_str());
  } else {
    const Tensor& images = s.model.images->value;
    say("  data %s: %lld samples of %lldx%lldx%lld%s | batch %lld per device%s | %s\n",
        config.data.source.c_str(), static_cast<long long>(s.train_data->size()),
        static_cast<long long>(images.c()), static_cast<long long>(images.h()),
        static_cast<long long>(images.w()),
        s.test_data ? fmt::format(", {} test", s.test_data->size()).c_str() : "",
        static_cast<long long>(*config.batch_size), micro_batches.c_str(), length.c_str());
  }
  if (!config.data.decode_note.empty()) say("  %s\n", config.data.decode_note.c_str());
  if (config.device.kind == DeviceKind::cuda) {
    // The CUDA options choose convolution and batch-norm kernels for an image model, the dense layers'
    // epilogues for a token model.
    if (tokens && config.model.precision == Precision::fp8)
      say("  cuda: dense-epilogues %s | fp8-fast-accumulation %s\n", on_off(config.cuda.dense_epilogues),
          fp8_fast_accumulation_name(config.cuda.fp8_fast_accumulation));
    else if (tokens)
      say("  cuda: dense-epilogues %s\n", on_off(config.cuda.dense_epilogues));
    else
      say("  cuda: %s\n", describe_cuda_options(config.cuda).c_str());
    const std::string& note = s.algorithms->load_note();
    say("  algorithm cache: %s\n", s.algorithms->path().empty()
                                       ? "none (held in memory: every shape searched)"
                                   : !note.empty() ? note.c_str()
                                                   : (s.algorithms->path() + " (new)").c_str());
  }
  const OptimizerConfig& o = config.optimizer;
  say("  %s lr %g (%s", optimizer_name(o.kind), o.lr, lr_schedule_name(o.lr_schedule));
  if (o.lr_warmup_epochs > 0) say(", warm-up %g epochs", o.lr_warmup_epochs);
  if (o.lr_warmup_steps) say(", warm-up %lld steps", static_cast<long long>(*o.lr_warmup_steps));
  if (o.kind == OptimizerKind::adamw) {
    say(") betas %g, %g eps %g weight decay %g (not on biases and layer norms) clip %g | seed %llu\n",
        o.adam_beta1, o.adam_beta2, o.adam_eps, o.weight_decay, o.clip_grad_norm.value_or(0),
        static_cast<unsigned long long>(config.seed));
  } else {
    say(") momentum %g%s weight decay %g%s | seed %llu\n", o.momentum, o.nesterov ? " nesterov" : "",
        o.weight_decay, o.decay_norm_and_bias ? "" : " (not on BN/bias)",
        static_cast<unsigned long long>(config.seed));
  }
  if (s.comm->size() == 1 && s.comm->name() != "local") {
    say("  one rank (%s): no gradients to exchange, it runs as a single device does\n",
        s.comm->name().c_str());
  } else if (s.comm->size() > 1) {
    say("  data parallel: %d ranks (%s), gradient buckets of %g MiB summed in %s while backward runs%s\n",
        s.comm->size(), s.comm->name().c_str(), config.parallel.bucket_mb,
        config.parallel.allreduce_precision == AllreducePrecision::fp32
            ? "fp32"
            : precision_name(config.model.precision),
        config.parallel.lr_scaling == LrScaling::linear ? ", lr scaled linearly" : "");
    say("  ranks on %s\n", parallel::hosts_summary(s.places).c_str());
  }
  std::fflush(stdout);
}

// The learning rate the schedule starts from: --lr, times the ranks with --lr-scaling linear.
RunConfig with_scaled_lr(const RunConfig& config, int ranks) {
  RunConfig scaled = config;
  if (config.parallel.lr_scaling == LrScaling::linear) scaled.optimizer.lr = config.optimizer.lr * ranks;
  return scaled;
}

namespace {

// Where the run's JPEGs were decoded: `decode`, the mode used ("none" for synthetic and IDX data), and
// for image data images_decoded_on_cpu, every rank's training and evaluation images (all of them until
// the GPU pipeline exists; then the ones it sent back to libjpeg-turbo). A collective: every rank calls it.
void add_decoding(RunResult& result, const RunConfig& config, RunSetup& s) {
  const bool images = config.data.kind == DataKind::images;
  result.decode = images ? decode_mode_name(config.data.decode) : "none";
  if (!images) return;
  double decoded = 0;
  for (const Dataset* data : {s.train_data.get(), s.test_data.get()})
    if (const auto* image_data = dynamic_cast<const ImageDataset*>(data))
      decoded += static_cast<double>(image_data->stats().decoded);
  result.images_decoded_on_cpu = s.comm->sum(decoded);
}

}  // namespace

RunResult result_skeleton(const RunConfig& config, RunSetup& s) {
  RunResult r;
  r.model = config.model.name;
  r.parameters = s.model.trained_parameters();  // without a padded vocabulary's rows
  // "cuda:NVIDIA H200" on a GPU (what results are compared by), "cpu" on the CPU.
  r.device = s.memory_fit.device ? "cuda:" + s.memory_fit.device->name : device_name(config.device);
  r.device_index = device_name(config.device);
  r.backend = s.backend->name();
  r.precision = precision_name(config.model.precision);
  r.batch_size = *config.batch_size;
  r.global_batch_size = *config.batch_size * config.accumulate_steps * s.comm->size();
  r.ranks = s.comm->size();
  r.launcher = s.comm->name() != "local" ? s.comm->name() : "single";
  r.threads = config.threads;
  add_decoding(r, config, s);
  r.peak_memory_bytes = static_cast<int64_t>(s.trainer->net().memory().total_bytes());
  r.algorithm_digest = algorithm_digest(s.trainer->net());
  // Where the algorithms came from, and the choices whose two fastest candidates were close (tuning/pick.h).
  r.algorithm_search = {{"cache", s.algorithms->path().empty() ? "none" : s.algorithms->path()},
                        {"choices_read", s.algorithms->read_from_file()},
                        {"close_calls", s.algorithms->close_calls()}};
  r.largest_batch = s.memory_fit.largest_batch;
  r.loss_scale = s.trainer->loss_scale();
  r.skipped_steps = s.trainer->skipped_steps();
  r.date = iso_date_utc();
  r.config = config_to_json(config);
  r.system = system_info();
  r.system["hosts"] = parallel::hosts_json(s.places);
  return r;
}

// Every rank's measured throughput summed (never rank 0's times the ranks), into the result, with the
// step times' distribution. A window without a timed step measured nothing: its figures are null, and a
// line says why, rather than a rate of 0 that reads as a measurement.
void add_throughput(RunResult& result, RunSetup& s, const MeasuredWindow& window) {
  const double total = s.comm->sum(window.images_per_second());
  const Distribution d = window.step_distribution();
  if (window.step_ms().empty()) {
    result.images_per_second = result.images_per_second_per_device = std::nullopt;
    result.step_ms = std::nullopt;
    result.measurement_note = "no timed steps: every step was a warm-up step";
    say("no throughput measured: every step was a warm-up step (--warmup-steps %lld); run more steps\n",
        static_cast<long long>(*s.config.warmup_steps));
    return;
  }
  result.images_per_second = total;
  result.images_per_second_per_device = total / s.comm->size();
  result.step_ms = d;
  // A machine busy with other work makes steps wait at random: say so where the figure is read.
  if (const std::optional<std::string> note = busy_machine_note(d)) {
    result.measurement_note = *note;
    say("warning: the step times varied by %.0f%% (stddev / mean, median %.1f ms, p95 %.1f ms): the machine "
        "may be busy with other work; the figure is not a steady measurement\n",
        100 * d.jitter, d.median, d.p95);
  }
}

RateUnit rate_unit(const Model& model) {
  if (model.family == ModelFamily::gpt) return {"tokens/s", static_cast<double>(model.seq_len)};
  return {"img/s", 1.0};
}

void add_token_throughput(RunResult& result, const RunSetup& s) {
  if (s.model.family != ModelFamily::gpt || !result.images_per_second) return;
  const auto tokens = static_cast<double>(s.model.seq_len);
  result.tokens_per_second = *result.images_per_second * tokens;
  result.tokens_per_second_per_device = result.images_per_second_per_device.value_or(0) * tokens;
  result.model_flops_per_token = s.model.flops_per_token;
  const double tflops = *result.tokens_per_second_per_device * s.model.flops_per_token / 1e12;
  std::string utilisation;
  if (s.memory_fit.device) {  // a GPU, by name
    const std::string& gpu = s.memory_fit.device->name;
    if (const std::optional<StatedPeak> peak = stated_dense_peak(gpu, s.config.model.precision)) {
      result.mfu = tflops / peak->tflops;
      result.mfu_peak_tflops = peak->tflops;
      utilisation = fmt::format(", MFU {:.1f}% of {:.0f} ({})", 100 * *result.mfu, peak->tflops, peak->what);
    }
    // After the timed window, so that its memory and its time are not the step's.
    const DType dtype = s.trainer->net().memory().compute_dtype();
    std::string why_not;
    if (const std::optional<GemmCeiling> ceiling =
            measure_gemm_ceiling(*s.backend, dtype, kGemmCeilingSize, kGemmCeilingCalls, &why_not)) {
      result.gemm_ceiling_tflops = ceiling->tflops;
      result.mfu_of_gemm_ceiling = tflops / ceiling->tflops;
      utilisation += fmt::format(", {:.1f}% of the measured {} GEMM ceiling ({:.0f} TFLOP/s)",
                                 100 * *result.mfu_of_gemm_ceiling, ceiling->dtype, ceiling->tflops);
    } else {
      say("note: the GEMM ceiling was not measured: %s\n", why_not.c_str());
    }
  }
  say("  %.0f tokens/s (%.2f sequences/s of %lld tokens)%s | %.2f GFLOP per token: %.1f TFLOP/s per "
      "device%s\n",
      *result.tokens_per_second, *result.images_per_second, static_cast<long long>(s.model.seq_len),
      s.comm->size() > 1 ? fmt::format(", {:.0f} per device", *result.tokens_per_second_per_device).c_str()
                         : "",
      s.model.flops_per_token / 1e9, tflops, utilisation.c_str());
}

// Real images are decoded ahead of the loop (data/batch_prefetcher.h), in the network's compute dtype and
// layout where the data set writes it, into page-locked buffers. `indices(n)` is the n-th micro-batch the
// loop will feed.
std::unique_ptr<BatchPrefetcher> make_prefetcher(RunSetup& s, int64_t count,
                                                 BatchPrefetcher::BatchIndices indices) {
  if (!dynamic_cast<const ImageDataset*>(s.train_data.get()) || s.config.data.decode == DecodeMode::gpu)
    return nullptr;
  const Tensor& images = s.trainer->model().images->value;
  const DType dtype = s.train_data->writes_dtype(images.dtype()) ? images.dtype() : DType::f32;
  Backend& backend = *s.backend;
  return std::make_unique<BatchPrefetcher>(
      *s.train_data, images.dims(), dtype, images.layout(), count, std::move(indices), 3,
      [&backend](size_t bytes) { return backend.allocate_host(bytes); },
      [&backend](void* p) { backend.deallocate_host(p); });
}

std::unique_ptr<GpuImagePipeline> make_gpu_pipeline(RunSetup& s, const Dataset& data, int64_t count,
                                                    BatchPrefetcher::BatchIndices indices) {
  const auto* images = dynamic_cast<const ImageDataset*>(&data);
  if (!images || s.config.data.decode != DecodeMode::gpu) return nullptr;
  const Tensor& input = s.trainer->model().images->value;
  GpuPipelineOptions options;
  options.image_dims = input.dims();
  options.dtype = input.dtype();
  options.layout = input.layout();
  options.count = count;
  options.indices = std::move(indices);
  options.device = s.backend->device().index;
  options.decode_threads = s.config.data.gpu_decode_threads;
  options.depth = options.decode_threads + 2;
  return make_gpu_image_pipeline(*images, std::move(options));
}

// The input pipeline's part of a result: how long the loop waited for data, the rate the device would
// reach without those waits, and the bad images skipped.
void add_data_pipeline(RunResult& result, RunSetup& s, const DataFeed& feed, double wait_seconds,
                       const MeasuredWindow& window) {
  DLB_CHECK(result.train.has_value(), "add_data_pipeline: a train run's result");
  const auto* images = dynamic_cast<const ImageDataset*>(s.train_data.get());
  if ((!feed.prefetcher && !feed.gpu) || !images) return;
  DataPipelineResult d;
  const double steps = static_cast<double>(std::max<size_t>(1, window.step_ms().size()));
  d.data_wait_ms_per_step = 1e3 * s.comm->sum(wait_seconds) / s.comm->size() / steps;
  const double compute_seconds = window.wall_seconds() - wait_seconds;
  d.compute_images_per_second =
      s.comm->sum(compute_seconds > 0 ? static_cast<double>(window.images()) / compute_seconds : 0.0);
  const ImageDatasetStats stats = images->stats();
  d.data_threads = images->options().threads;
  d.bad_images_skipped = s.comm->sum(static_cast<double>(stats.bad_files));
  // The GPU pipeline's own counts: where its images were decoded (add_decoding counted the data sets'
  // CPU decodes; the GPU pipeline's fallbacks add to them).
  const GpuPipelineStats g = feed.gpu ? feed.gpu->stats() : GpuPipelineStats{};
  const GpuPipelineStats& e = feed.finished_gpu;
  const double on_cpu = s.comm->sum(static_cast<double>(g.decoded_on_cpu + e.decoded_on_cpu));
  if (result.images_decoded_on_cpu) *result.images_decoded_on_cpu += on_cpu;
  d.images_decoded_on_gpu_engines =
      s.comm->sum(static_cast<double>(g.decoded_on_hardware + e.decoded_on_hardware));
  d.images_decoded_on_gpu_cuda =
      s.comm->sum(static_cast<double>(g.decoded_on_gpu_cuda + e.decoded_on_gpu_cuda));
  result.train->data_pipeline = d;
  say("  input pipeline: waited %.2f ms per step for data | %.1f img/s without the waits | %lld bad images "
      "skipped\n",
      d.data_wait_ms_per_step, d.compute_images_per_second, static_cast<long long>(d.bad_images_skipped));
  if (feed.gpu) {
    say("  decoded on the GPU: %lld on the JPEG engines, %lld by nvJPEG's CUDA backend; %lld on the CPU\n",
        static_cast<long long>(d.images_decoded_on_gpu_engines),
        static_cast<long long>(d.images_decoded_on_gpu_cuda), static_cast<long long>(on_cpu));
    const int64_t batches =
        (g.decoded_on_hardware + g.decoded_on_gpu_cuda + g.decoded_on_cpu) / *s.config.batch_size;
    say("  GPU pipeline of rank 0, %lld batches: %s\n", static_cast<long long>(batches),
        pipeline_profile(GpuPipelineStats{}, g, batches).c_str());
  }
}

// The energy every rank's GPU used over the window (NVML's counters), where every rank's driver has it:
// all ranks together, else nothing.
std::optional<EnergyResult> window_energy(RunSetup& s, std::optional<double> before,
                                          std::optional<double> after, double images_per_rank,
                                          double window_seconds) {
  const bool measured = before && after && *after >= *before;
  // Collectives, so every rank calls them whatever it measured.
  const bool everywhere = s.comm->max(measured ? 0.0 : 1.0) == 0.0;
  const double joules = s.comm->sum(measured ? *after - *before : 0.0);
  const double images = images_per_rank * s.comm->size();
  if (!everywhere || joules <= 0) return std::nullopt;
  if (s.model.family == ModelFamily::gpt)  // a "sample" is a sequence: say it per token
    say("energy: %.1f J in the window, %.3f mJ per token, %.0f W on average (%d GPU%s)\n", joules,
        1e3 * joules / (images * static_cast<double>(s.model.seq_len)), joules / window_seconds,
        s.comm->size(), s.comm->size() > 1 ? "s" : "");
  else
    say("energy: %.1f J in the window, %.3f J per image, %.0f W on average (%d GPU%s)\n", joules,
        joules / images, joules / window_seconds, s.comm->size(), s.comm->size() > 1 ? "s" : "");
  return EnergyResult{joules, joules / images, joules / window_seconds};
}

// The GPUs' clocks over the window (ClockSampler), where every rank's driver reads them: the lowest of the
// ranks' median SM clocks (the slowest GPU sets a data-parallel step's pace), rank 0's median, and the mean
// over the ranks of the fractions of samples held back by the power cap, by heat and by hardware slowdown;
// else nothing.
std::optional<GpuClocksResult> window_clocks(RunSetup& s, const std::optional<ClockSummary>& mine,
                                             std::chrono::milliseconds period) {
  // Collectives, so every rank calls them whatever it measured.
  const bool everywhere = s.comm->max(mine ? 0.0 : 1.0) == 0.0;
  const ClockSummary c = mine.value_or(ClockSummary{});
  const double slowest = -s.comm->max(-c.sm_clock_median_mhz);
  const double ranks = s.comm->size();
  const double capped = s.comm->sum(c.power_capped) / ranks;
  const double thermal = s.comm->sum(c.thermal) / ranks;
  const double hardware = s.comm->sum(c.hardware_slowdown) / ranks;
  if (!everywhere) return std::nullopt;
  GpuClocksResult clocks;
  clocks.sm_clock_median_mhz = slowest;
  clocks.sm_clock_median_mhz_rank0 = c.sm_clock_median_mhz;
  clocks.sm_clock_min_mhz_rank0 = c.sm_clock_min_mhz;
  clocks.sm_clock_max_mhz_rank0 = c.sm_clock_max_mhz;
  clocks.power_mean_watts_rank0 = c.power_mean_watts;
  clocks.power_capped_fraction = capped;
  clocks.thermal_slowdown_fraction = thermal;
  clocks.hardware_slowdown_fraction = hardware;
  clocks.samples_rank0 = c.samples;
  clocks.period_ms = period.count();
  const std::string other_reasons = thermal > 0 || hardware > 0
                                        ? fmt::format(", by heat in {:.0f}%, by hardware slowdown in {:.0f}%",
                                                      100 * thermal, 100 * hardware)
                                        : std::string();
  say("GPU clocks in the window: SM median %.0f MHz%s, held back by the power cap in %.0f%% of samples%s\n",
      slowest, s.comm->size() > 1 ? " (slowest GPU)" : "", 100 * capped, other_reasons.c_str());
  return clocks;
}

}  // namespace dlbench::run_detail
