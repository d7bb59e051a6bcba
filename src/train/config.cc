#include "train/config.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <thread>
#include <utility>

#include "core/file_paths.h"
#include "core/machine_limits.h"
#include "core/status.h"
#include "data/image_source.h"
#include "data/shard.h"
#include "models/gpt.h"
#include "models/resnet.h"

namespace dlbench {

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::fp32:
      return "fp32";
    case Precision::tf32:
      return "tf32";
    case Precision::fp16:
      return "fp16";
    case Precision::bf16:
      return "bf16";
    case Precision::fp8:
      return "fp8";
  }
  return "?";
}

const char* lr_schedule_name(LrSchedule schedule) {
  switch (schedule) {
    case LrSchedule::constant:
      return "constant";
    case LrSchedule::step:
      return "step";
    case LrSchedule::cosine:
      return "cosine";
  }
  return "?";
}

DType compute_dtype(Precision precision) {
  switch (precision) {
    case Precision::fp16:
      return DType::f16;
    case Precision::bf16:
    case Precision::fp8:  // the activations; the dense layers' GEMM operands are FP8
      return DType::bf16;
    default:
      return DType::f32;
  }
}

const char* allreduce_precision_name(AllreducePrecision precision) {
  return precision == AllreducePrecision::compute ? "compute" : "fp32";
}

const char* lr_scaling_name(LrScaling scaling) { return scaling == LrScaling::linear ? "linear" : "none"; }

const char* optimizer_name(OptimizerKind kind) { return kind == OptimizerKind::adamw ? "adamw" : "sgd"; }

OptimizerKind parse_optimizer(const std::string& text) {
  if (text == "sgd") return OptimizerKind::sgd;
  if (text == "adamw") return OptimizerKind::adamw;
  throw_user_error("--optimizer {}: unknown; choose sgd or adamw", text);
}

Precision parse_precision(const std::string& text) {
  if (text == "fp32") return Precision::fp32;
  if (text == "tf32") return Precision::tf32;
  if (text == "fp16") return Precision::fp16;
  if (text == "bf16") return Precision::bf16;
  if (text == "fp8") return Precision::fp8;
  throw_user_error("--precision {}: unknown; choose fp32, tf32, fp16, bf16 or fp8", text);
}

LrSchedule parse_lr_schedule(const std::string& text) {
  if (text == "constant") return LrSchedule::constant;
  if (text == "step") return LrSchedule::step;
  if (text == "cosine") return LrSchedule::cosine;
  throw_user_error("--lr-schedule {}: unknown; choose constant, step or cosine", text);
}

// NHWC by default. oneDNN's nhwc kernels beat its NCHW path on ResNet shapes
// (src/backend/onednn/onednn_conv.cc); on the GPU NHWC is the tensor cores' layout (TF32, FP16, BF16), and
// FP32's too since its 1x1 convolutions run on cuBLAS's GEMM there (cuda_conv.cc): ResNet-50 b256 on an
// H200 1,437 img/s in NHWC against 1,029 in NCHW, where cuDNN's own FP32 NHWC kernels had given 535
// (bench/results/convolution-algorithms).
Layout parse_layout(const std::string& text) {
  if (text.empty() || text == "nhwc") return Layout::nhwc;
  if (text == "nchw") return Layout::nchw;
  throw_user_error("--layout {}: choose nchw or nhwc", text);
}

DeviceRequest parse_device(const std::string& text) {
  if (text == "auto") return DeviceRequest::automatic;
  if (text == "cpu") return DeviceRequest::cpu;
  if (text.rfind("cuda", 0) == 0) return DeviceRequest::cuda;
  throw_user_error("--device {}: unknown; choose auto, cpu or cuda", text);
}

AllreducePrecision parse_allreduce_precision(const std::string& text) {
  if (text == "fp32") return AllreducePrecision::fp32;
  if (text == "compute") return AllreducePrecision::compute;
  throw_user_error("--allreduce-precision {}: choose fp32 or compute", text);
}

LrScaling parse_lr_scaling(const std::string& text) {
  if (text == "none") return LrScaling::none;
  if (text == "linear") return LrScaling::linear;
  throw_user_error("--lr-scaling {}: choose none or linear", text);
}

// The recorded step, in every precision: at 2 GPUs (ResNet-50 b256 fp16 on 2x H200, three interleaved
// runs each) it took 34.8-34.9 ms against 35.5-38.9 op by op, and on one GPU 34.2-34.3 against 34.3-34.4
// (bench/results/cuda-graph-and-workspace/). An earlier finding that FP16/BF16 ran 5% slower
// recorded came from single-shot algorithm searches, whose choice moved a step by 2 ms between
// processes (see cuda_conv.cc's pick).
std::string AlgorithmCacheChoice::text() const {
  switch (where) {
    case Where::user_cache_folder:
      return {};
    case Where::none:
      return "none";
    case Where::file:
      return file;
  }
  return {};
}

AlgorithmCacheChoice parse_algorithm_cache(const std::string& text) {
  if (text.empty()) return {};
  if (text == "none") return {AlgorithmCacheChoice::Where::none, {}};
  return {AlgorithmCacheChoice::Where::file, text};
}

bool parse_cuda_graph(const std::string& text) {
  if (text == "auto" || text == "true" || text == "1") return true;
  if (text == "false" || text == "0") return false;
  throw_user_error("--cuda-graph {}: choose auto, true or false", text);
}

StepRange parse_trace_steps(const std::string& text) {
  char colon = 0;
  long long first = 0, last = 0;
  const int n = std::sscanf(text.c_str(), "%lld%c%lld", &first, &colon, &last);
  DLB_REQUIRE(n == 3 && colon == ':' && first >= 1 && last >= first,
              "--trace-steps {}: give A:B, the first and last step to trace (1-based, A <= B)", text);
  return {first, last};
}

void parse_loss_scale(const std::string& text, OptimizerConfig& o) {
  if (text.empty()) {
    o.loss_scaling = LossScaling::by_precision;
  } else if (text == "dynamic") {
    o.loss_scaling = LossScaling::dynamic;
  } else {
    char* end = nullptr;
    o.loss_scaling = LossScaling::fixed;
    o.loss_scale = std::strtod(text.c_str(), &end);
    DLB_REQUIRE(end && *end == '\0' && o.loss_scale > 0 && std::isfinite(o.loss_scale),
                "--loss-scale {}: give dynamic or a positive number", text);
  }
}

void parse_batch_size(const std::string& text, RunConfig& c) {
  if (text.empty()) return;
  if (text == "max") {
    c.batch_size_max = true;
    return;
  }
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  DLB_REQUIRE(used == text.size() && used > 0, "--batch-size {}: give a number of images per device or max",
              text);
  c.batch_size = value;
}

namespace {

// The model, the device it runs on, its backend and threads.
void resolve_device(RunConfig& c, bool cuda_available) {
  DLB_REQUIRE(is_model_name(c.model.name), "--model {}: unknown model; choose one of: {}", c.model.name,
              fmt::join(model_names(), ", "));

  // Device and backend.
  switch (c.device_request) {
    case DeviceRequest::automatic:
      c.device = cuda_available ? Device{DeviceKind::cuda, 0} : Device{DeviceKind::cpu, 0};
      break;
    case DeviceRequest::cpu:
      c.device = {DeviceKind::cpu, 0};
      break;
    case DeviceRequest::cuda:
      DLB_REQUIRE(cuda_available,
                  "--device cuda: this dlbench has no usable CUDA GPU backend (built without CUDA, or no GPU "
                  "found); use --device cpu");
      c.device = {DeviceKind::cuda, 0};
      break;
  }
  const bool on_cpu = c.device.kind == DeviceKind::cpu;
  if (c.backend_name.empty()) c.backend_name = on_cpu ? "onednn" : "cuda";
  if (on_cpu) {
    DLB_REQUIRE(c.backend_name == "onednn" || c.backend_name == "reference",
                "--backend {}: unknown CPU backend; choose onednn or reference", c.backend_name);
  }
  c.threads = resolve_threads(c.threads, usable_cores(), "--threads");
}

// The precision the device can run, and the loss scaling that goes with it.
void resolve_numerics(RunConfig& c) {
  const bool on_cpu = c.device.kind == DeviceKind::cpu;
  DLB_REQUIRE(!on_cpu || c.model.precision == Precision::fp32,
              "--precision {}: the CPU backend trains in fp32 only; use --precision fp32 or --device cuda",
              precision_name(c.model.precision));
  // Only FP16's narrow exponent needs the loss scaled; BF16 has FP32's range.
  if (c.optimizer.loss_scaling == LossScaling::by_precision) {
    c.optimizer.loss_scaling =
        c.model.precision == Precision::fp16 ? LossScaling::dynamic : LossScaling::fixed;
    c.optimizer.loss_scale = 1.0;
  }
  if (c.optimizer.loss_scaling == LossScaling::dynamic) c.optimizer.loss_scale = 65536.0;
  DLB_REQUIRE(c.optimizer.loss_scale_growth_interval > 0, "--loss-scale-growth-interval {}: must be positive",
              c.optimizer.loss_scale_growth_interval);
}

// Batch, length of the run. Flags that were given are checked; flags that were not get defaults.
// A GPT model's sequence length and default batch (in sequences): the mini model trains 16 sequences on
// the CPU; the GPT-2 sizes 4 on the CPU (a benchmark, not training) and 16 on a GPU.
void resolve_sequences(RunConfig& c) {
  const bool on_cpu = c.device.kind == DeviceKind::cpu;
  const GptSpec spec = gpt_spec(c.model.name);
  DLB_REQUIRE(c.model.seq_len >= 0 && c.model.seq_len <= spec.context,
              "--seq-len {}: {} takes 1 to {} tokens per sequence", c.model.seq_len, c.model.name,
              spec.context);
  if (c.model.seq_len == 0) c.model.seq_len = spec.context;
  DLB_REQUIRE(c.model.image_size == 0, "--image-size: {} reads tokens, not images; give --seq-len",
              c.model.name);
  const bool mini = c.model.name == "gpt-mini";
  if (!c.batch_size) c.batch_size = mini ? (on_cpu ? 16 : 64) : (on_cpu ? 4 : 16);
}

void resolve_length(RunConfig& c) {
  const bool on_cpu = c.device.kind == DeviceKind::cpu;
  const bool imagenet_model = c.model.name != "resnet20";
  const bool gpt = is_gpt_model(c.model.name);
  DLB_REQUIRE(!c.batch_size_max || !on_cpu,
              "--batch-size max needs a GPU (the CPU backend states no memory limit to fit); give a number");
  if (gpt) {
    resolve_sequences(c);
  } else {
    DLB_REQUIRE(c.model.seq_len == 0, "--seq-len: {} reads images; only GPT models take sequences",
                c.model.name);
    // A ResNet's blocks hold batch norms, whose forward in training moves the running statistics: a
    // second forward would move them twice.
    DLB_REQUIRE(!c.model.recompute, "--recompute: only the GPT models recompute their blocks; {} does not",
                c.model.name);
    DLB_REQUIRE(c.model.precision != Precision::fp8,
                "--precision fp8: FP8 runs a transformer's dense layers, which {} has none of; choose a GPT "
                "model or another precision",
                c.model.name);
  }
  DLB_REQUIRE(c.model.fp8_amax_history >= 1 && c.model.fp8_amax_history <= 1024,
              "--fp8-amax-history {}: must be 1 to 1024 steps", c.model.fp8_amax_history);
  DLB_REQUIRE(c.model.fp8_margin >= 0 && c.model.fp8_margin <= 16, "--fp8-margin {}: must be 0 to 16",
              c.model.fp8_margin);
  if (!c.batch_size) c.batch_size = on_cpu ? (imagenet_model ? 16 : 128) : (imagenet_model ? 256 : 512);
  DLB_REQUIRE(*c.batch_size > 0, "--batch-size {}: must be a positive number of {} per device", *c.batch_size,
              gpt ? "sequences" : "images");
  DLB_REQUIRE(c.accumulate_steps >= 1, "--accumulate-steps {}: must be 1 or more", c.accumulate_steps);
  DLB_REQUIRE(!c.epochs || *c.epochs > 0, "--epochs {}: must be positive", c.epochs.value_or(0));
  DLB_REQUIRE(!c.steps || *c.steps > 0, "--steps {}: must be positive", c.steps.value_or(0));
  DLB_REQUIRE(!c.warmup_steps || *c.warmup_steps >= 0, "--warmup-steps {}: must be 0 or more",
              c.warmup_steps.value_or(0));
  if (c.kind == RunKind::bench) {
    DLB_REQUIRE(!c.epochs, "--epochs: dlbench bench runs a number of --steps; use dlbench train for epochs");
    DLB_REQUIRE(c.output.resume_path.empty() && c.output.checkpoint_path.empty(),
                "--checkpoint/--resume: dlbench bench does not save state; use dlbench train");
    if (!c.steps) c.steps = on_cpu ? (imagenet_model ? 10 : 20) : 100;
    if (!c.warmup_steps) c.warmup_steps = on_cpu ? 2 : 20;
    c.epochs = 0;
  } else {
    DLB_REQUIRE(!(c.epochs && c.steps), "--epochs and --steps conflict: give one of them");
    if (!c.epochs && !c.steps) c.epochs = 1;
    if (!c.epochs) c.epochs = 0;
    if (!c.steps) c.steps = 0;
    // The first step plans oneDNN kernels and touches fresh memory: keep it out of the timing statistics.
    if (!c.warmup_steps) c.warmup_steps = 1;
  }
}

// The optimizer and its defaults by model family: ResNets SGD (lr 0.1, weight decay 5e-5), GPT models
// AdamW as GPT-2 trains (lr 6e-4, gpt-mini 2e-3; weight decay 0.1 on matrices and embeddings; gradients
// clipped to norm 1).
void resolve_optimizer_kind(RunConfig& c) {
  OptimizerConfig& o = c.optimizer;
  const bool gpt = is_gpt_model(c.model.name);
  o.kind = o.kind_request.value_or(gpt ? OptimizerKind::adamw : OptimizerKind::sgd);
  const bool adamw = o.kind == OptimizerKind::adamw;
  if (o.lr_request) {
    o.lr = *o.lr_request;
  } else if (gpt) {
    o.lr = c.model.name == "gpt-mini" ? 2e-3 : 6e-4;
  } else if (adamw) {
    o.lr = 1e-3;
  }
  if (o.weight_decay_request) {
    o.weight_decay = *o.weight_decay_request;
  } else if (adamw) {
    o.weight_decay = 0.1;
  }
  if (!o.clip_grad_norm) o.clip_grad_norm = adamw ? 1.0 : 0.0;
  DLB_REQUIRE(std::isfinite(*o.clip_grad_norm) && *o.clip_grad_norm >= 0,
              "--clip-grad-norm {}: must be 0 (off) or more", *o.clip_grad_norm);
  DLB_REQUIRE(adamw || *o.clip_grad_norm == 0,
              "--clip-grad-norm: gradient clipping runs with --optimizer adamw");
  if (adamw) {
    DLB_REQUIRE(!o.nesterov, "--nesterov: SGD's; AdamW has no Nesterov momentum");
    // nanoGPT's groups: decay on 2-D weights (embeddings included), never on biases and layer norms.
    o.decay_norm_and_bias = false;
    for (const auto& [flag, value] :
         {std::pair<const char*, double>{"--adam-beta1", o.adam_beta1}, {"--adam-beta2", o.adam_beta2}})
      DLB_REQUIRE(std::isfinite(value) && value >= 0 && value < 1, "{} {}: must be in [0, 1)", flag, value);
    DLB_REQUIRE(std::isfinite(o.adam_eps) && o.adam_eps > 0, "--adam-eps {}: must be positive", o.adam_eps);
  }
  DLB_REQUIRE(!o.lr_warmup_steps || *o.lr_warmup_steps >= 0, "--lr-warmup-steps {}: must be 0 or more",
              o.lr_warmup_steps.value_or(0));
  DLB_REQUIRE(!o.lr_warmup_steps || o.lr_warmup_epochs == 0,
              "--lr-warmup-steps and --lr-warmup-epochs conflict: give one of them");
}

// Optimizer. Every number finite: an infinite rate trains nothing, a NaN compares false everywhere.
void resolve_optimizer(RunConfig& c) {
  resolve_optimizer_kind(c);
  for (const auto& [flag, value] : {std::pair<const char*, double>{"--lr", c.optimizer.lr},
                                    {"--momentum", c.optimizer.momentum},
                                    {"--weight-decay", c.optimizer.weight_decay},
                                    {"--label-smoothing", c.optimizer.label_smoothing},
                                    {"--lr-warmup-epochs", c.optimizer.lr_warmup_epochs},
                                    {"--lr-decay-factor", c.optimizer.lr_decay_factor},
                                    {"--bucket-mb", c.parallel.bucket_mb},
                                    {"--conv-workspace-mb", c.conv_workspace_mb},
                                    {"--timeout", c.parallel.timeout_seconds}}) {
    DLB_REQUIRE(std::isfinite(value), "{} {}: must be a finite number", flag, value);
  }
  DLB_REQUIRE(c.optimizer.lr > 0, "--lr {}: must be positive", c.optimizer.lr);
  DLB_REQUIRE(c.optimizer.momentum >= 0 && c.optimizer.momentum < 1, "--momentum {}: must be in [0, 1)",
              c.optimizer.momentum);
  DLB_REQUIRE(!c.optimizer.nesterov || c.optimizer.momentum > 0, "--nesterov needs --momentum above 0");
  DLB_REQUIRE(c.optimizer.weight_decay >= 0, "--weight-decay {}: must be 0 or more",
              c.optimizer.weight_decay);
  DLB_REQUIRE(c.optimizer.label_smoothing >= 0 && c.optimizer.label_smoothing < 1,
              "--label-smoothing {}: must be in [0, 1)", c.optimizer.label_smoothing);
  DLB_REQUIRE(c.optimizer.lr_warmup_epochs >= 0, "--lr-warmup-epochs {}: must be 0 or more",
              c.optimizer.lr_warmup_epochs);
  DLB_REQUIRE(c.optimizer.lr_decay_factor > 0 && c.optimizer.lr_decay_factor <= 1,
              "--lr-decay-factor {}: must be in (0, 1]", c.optimizer.lr_decay_factor);
  for (double epoch : c.optimizer.lr_decay_epochs)
    DLB_REQUIRE(std::isfinite(epoch) && epoch > 0,
                "--lr-decay-epochs {}: each must be a positive number of epochs",
                fmt::join(c.optimizer.lr_decay_epochs, ","));
  DLB_REQUIRE(std::is_sorted(c.optimizer.lr_decay_epochs.begin(), c.optimizer.lr_decay_epochs.end()),
              "--lr-decay-epochs {}: give them in increasing order",
              fmt::join(c.optimizer.lr_decay_epochs, ","));
  DLB_REQUIRE(c.optimizer.lr_decay_epochs.empty() || c.optimizer.lr_schedule == LrSchedule::step,
              "--lr-decay-epochs: only the step schedule drops at epochs; add --lr-schedule step");
  if (c.optimizer.lr_schedule == LrSchedule::step && c.optimizer.lr_decay_epochs.empty())
    c.optimizer.lr_decay_epochs = {30, 60, 80};
}

// Data: what --data names, the images' size, and where their JPEGs are decoded.
void resolve_data(RunConfig& c) {
  c.data.threads = resolve_threads(c.data.threads, usable_cores() - 1, "--data-threads");
  DLB_REQUIRE(c.data.gpu_decode_threads >= 1 && c.data.gpu_decode_threads <= 8,
              "--gpu-decode-threads {}: choose 1 to 8", c.data.gpu_decode_threads);
  DLB_REQUIRE(c.model.image_size >= 0, "--image-size {}: must be positive", c.model.image_size);
  if (c.data.source == "synthetic") {
    c.data.kind = DataKind::synthetic;
  } else if (is_gpt_model(c.model.name)) {
    // Token files: a directory (train.bin / val.bin, or llm.c's shards) or one file (data/token_dataset.h).
    DLB_REQUIRE(std::filesystem::exists(c.data.source),
                "--data {}: no such file or directory; give synthetic, a token file or a directory of them "
                "(dlbench tokenize)",
                c.data.source);
    c.data.kind = DataKind::tokens;
  } else if (is_shard_set(c.data.source) || is_image_folder(c.data.source) ||
             is_shard_set(c.data.source + "/train") || is_image_folder(c.data.source + "/train")) {
    // An image set, or ROOT/train (+ ROOT/val) as ImageNet is laid out.
    c.data.kind = DataKind::images;
    const bool split = !is_shard_set(c.data.source) && !is_image_folder(c.data.source);
    c.data.train_images = split ? c.data.source + "/train" : c.data.source;
    if (!c.data.val_data.empty()) {
      DLB_REQUIRE(is_shard_set(c.data.val_data) || is_image_folder(c.data.val_data),
                  "--val-data {}: neither an image folder (CLASS/FILE.jpg) nor a shard set", c.data.val_data);
      c.data.val_images = c.data.val_data;
    } else if (split && (is_shard_set(c.data.source + "/val") || is_image_folder(c.data.source + "/val"))) {
      c.data.val_images = c.data.source + "/val";
    }
  } else {
    c.data.kind = DataKind::idx;
    std::string dir = c.data.source == "fashion-mnist" ? "/usr/share/datasets/fashion-mnist" : c.data.source;
    DLB_REQUIRE(
        std::filesystem::is_directory(dir),
        "--data {}: no such directory{}; pass synthetic, fashion-mnist, a directory of IDX files, an "
        "image folder (CLASS/FILE.jpg) or a shard set (dlbench pack)",
        c.data.source,
        c.data.source == "fashion-mnist" ? " (install the Debian package dataset-fashion-mnist)" : "");
    c.data.idx_dir = dir;
  }

  // --image-size: synthetic images are made at it, real ones cropped to it; IDX images keep their own.
  if (c.model.image_size > 0) {
    DLB_REQUIRE(
        c.data.kind != DataKind::idx,
        "--image-size {}: IDX images are trained at their own size (28x28 for Fashion-MNIST); leave it "
        "out",
        c.model.image_size);
    const int smallest = smallest_input_size(c.model.name);
    DLB_REQUIRE(c.model.image_size >= smallest,
                "--image-size {}: {} reduces its input {}-fold; give at least {}", c.model.image_size,
                c.model.name, smallest, smallest);
  }

  // Decoding. Synthetic and IDX data hold no JPEGs: auto and cpu mean nothing there, gpu cannot be had.
  if (c.data.kind == DataKind::images) {
    c.data.decode = resolve_decode(c.data.decode_request, c.device.kind, &c.data.decode_note);
  } else {
    DLB_REQUIRE(c.data.decode_request != DecodeMode::gpu,
                "--decode gpu: --data {} holds no JPEGs to decode; give an image folder or shard set",
                c.data.source);
    c.data.decode = DecodeMode::cpu;
  }
}

// The files the run reads and writes, resolved to the files they really name: no output may be an
// input (--json over the checkpoint being resumed destroyed it), another output, or lie inside the data.
// --checkpoint may name the --resume file: the run continues it.
void check_files(const RunConfig& c) {
  const bool continues_resume =
      !c.output.resume_path.empty() && !c.output.checkpoint_path.empty() &&
      resolved_path(c.output.resume_path) == resolved_path(c.output.checkpoint_path);
  std::vector<PathUse> uses = {
      {"--json", c.output.json_path, PathRole::writes_file},
      {"--trace", c.output.trace_path, PathRole::writes_file},
      {"--checkpoint", c.output.checkpoint_path, PathRole::writes_file},
      {"--mlperf-log", c.output.mlperf_log_path, PathRole::writes_file},
      {"--algorithm-cache", c.algorithm_cache.file, PathRole::writes_file},
      {"--resume", continues_resume ? std::string() : c.output.resume_path, PathRole::reads_file}};
  if (c.data.kind == DataKind::images) {
    uses.push_back({"--data", c.data.source, PathRole::reads_tree});
    uses.push_back({"--val-data", c.data.val_data, PathRole::reads_tree});
  } else if (c.data.kind == DataKind::idx) {
    uses.push_back({"--data", c.data.idx_dir, PathRole::reads_tree});
  } else if (c.data.kind == DataKind::tokens) {
    uses.push_back({"--data", c.data.source, PathRole::reads_tree});
  }
  check_path_uses(uses);
}

// Data parallelism.
void check_distribution(const RunConfig& c) {
  const bool on_cpu = c.device.kind == DeviceKind::cpu;
  DLB_REQUIRE(c.parallel.gpus >= 1, "--gpus {}: must be 1 or more", c.parallel.gpus);
  DLB_REQUIRE(c.parallel.gpus == 1 || !on_cpu,
              "--gpus {}: the CPU runs one rank per process; start several with mpirun", c.parallel.gpus);
  DLB_REQUIRE(c.parallel.bucket_mb >= 0, "--bucket-mb {}: must be 0 (one bucket) or more",
              c.parallel.bucket_mb);
  DLB_REQUIRE(!c.parallel.nccl_symmetric || !on_cpu,
              "--nccl-symmetric: NCCL windows are GPU memory; use --device cuda");
  DLB_REQUIRE(c.conv_workspace_mb >= 0, "--conv-workspace-mb {}: must be 0 or more", c.conv_workspace_mb);
  DLB_REQUIRE(c.parallel.timeout_seconds > 0, "--timeout {}: must be positive", c.parallel.timeout_seconds);
}

// Progress lines, evaluation and checkpoints. A train run without --log-every logs by time
// (log_seconds); a bench run by steps.
void resolve_logging(RunConfig& c) {
  const bool on_cpu = c.device.kind == DeviceKind::cpu;
  if (!c.output.log_every && c.kind == RunKind::bench) c.output.log_every = on_cpu ? 1 : 100;
  DLB_REQUIRE(!c.output.log_every || *c.output.log_every > 0, "--log-every {}: must be positive",
              c.output.log_every.value_or(0));
  DLB_REQUIRE(std::isfinite(c.output.log_seconds) && c.output.log_seconds > 0,
              "--log-seconds {}: must be positive", c.output.log_seconds);
  DLB_REQUIRE(!c.data.eval_images || *c.data.eval_images > 0, "--eval-images {}: must be positive",
              c.data.eval_images.value_or(0));
  DLB_REQUIRE(!c.data.eval_images || c.kind == RunKind::train, "--eval-images: only dlbench train evaluates");
  DLB_REQUIRE(!c.output.resume_anyway || !c.output.resume_path.empty(),
              "--resume-anyway needs --resume FILE");
  DLB_REQUIRE(c.output.save_every >= 0, "--save-every {}: must be 0 or more", c.output.save_every);
  DLB_REQUIRE(c.output.save_every == 0 || !c.output.checkpoint_path.empty(),
              "--save-every needs --checkpoint FILE");
}

}  // namespace

void resolve_config(RunConfig& c, bool cuda_available) {
  resolve_device(c, cuda_available);
  resolve_numerics(c);
  resolve_length(c);
  resolve_optimizer(c);
  resolve_data(c);
  check_files(c);
  check_distribution(c);
  // What the CUDA backend takes from the run's choices (backend/cuda_options.h).
  c.cuda.allow_tf32 = c.model.precision == Precision::tf32;
  c.cuda.fp8_gemms = c.model.precision == Precision::fp8;
  c.cuda.conv_workspace_limit = static_cast<size_t>(c.conv_workspace_mb * (1 << 20));
  resolve_logging(c);
}

nlohmann::json resume_settings(const RunConfig& c) {
  nlohmann::json settings = {{"--batch-size", c.batch_size.value_or(0)},
                             {"--accumulate-steps", c.accumulate_steps},
                             {"--seed", c.seed},
                             {"--precision", precision_name(c.model.precision)},
                             {"--layout", layout_name(c.model.layout)},
                             {"--image-size", c.model.image_size},
                             {"--lr", c.optimizer.lr},
                             {"--momentum", c.optimizer.momentum},
                             {"--nesterov", c.optimizer.nesterov},
                             {"--weight-decay", c.optimizer.weight_decay},
                             {"--no-decay-bn-bias", !c.optimizer.decay_norm_and_bias},
                             {"--label-smoothing", c.optimizer.label_smoothing},
                             {"--lr-schedule", lr_schedule_name(c.optimizer.lr_schedule)},
                             {"--lr-warmup-epochs", c.optimizer.lr_warmup_epochs},
                             {"--lr-decay-epochs", c.optimizer.lr_decay_epochs},
                             {"--lr-decay-factor", c.optimizer.lr_decay_factor},
                             {"--lr-scaling", lr_scaling_name(c.parallel.lr_scaling)}};
  // Only the settings of a GPT run's own flags, so that a ResNet checkpoint's settings stay as they were.
  if (is_gpt_model(c.model.name)) {
    settings["--seq-len"] = c.model.seq_len;
    settings["--optimizer"] = optimizer_name(c.optimizer.kind);
    settings["--adam-beta1"] = c.optimizer.adam_beta1;
    settings["--adam-beta2"] = c.optimizer.adam_beta2;
    settings["--adam-eps"] = c.optimizer.adam_eps;
    settings["--clip-grad-norm"] = c.optimizer.clip_grad_norm.value_or(0);
    settings["--lr-warmup-steps"] = c.optimizer.lr_warmup_steps.value_or(-1);
  }
  return settings;
}

nlohmann::json config_to_json(const RunConfig& c) {
  nlohmann::json j;
  j["command"] = c.kind == RunKind::train ? "train" : "bench";
  j["model"] = c.model.name;
  j["batch_size"] = c.batch_size.value_or(0);
  if (c.batch_size_max) j["batch_size_max"] = true;
  j["epochs"] = c.epochs.value_or(0);
  j["steps"] = c.steps.value_or(0);
  j["warmup_steps"] = c.warmup_steps.value_or(0);
  j["accumulate_steps"] = c.accumulate_steps;
  j["lr"] = c.optimizer.lr;
  j["momentum"] = c.optimizer.momentum;
  j["nesterov"] = c.optimizer.nesterov;
  j["weight_decay"] = c.optimizer.weight_decay;
  j["decay_norm_and_bias"] = c.optimizer.decay_norm_and_bias;
  j["label_smoothing"] = c.optimizer.label_smoothing;
  j["lr_schedule"] = lr_schedule_name(c.optimizer.lr_schedule);
  j["lr_warmup_epochs"] = c.optimizer.lr_warmup_epochs;
  j["lr_decay_epochs"] = c.optimizer.lr_decay_epochs;
  j["lr_decay_factor"] = c.optimizer.lr_decay_factor;
  j["precision"] = precision_name(c.model.precision);
  j["loss_scale"] = c.optimizer.loss_scaling == LossScaling::dynamic ? nlohmann::json("dynamic")
                                                                     : nlohmann::json(c.optimizer.loss_scale);
  j["layout"] = layout_name(c.model.layout);
  j["device"] = device_name(c.device);
  j["backend"] = c.backend_name;
  j["threads"] = c.threads;
  j["seed"] = c.seed;
  j["data"] = c.data.source;
  j["val_data"] = c.data.val_data;
  j["data_threads"] = c.data.threads;
  j["gpu_decode_threads"] = c.data.gpu_decode_threads;
  j["image_size"] = c.model.image_size;
  j["strict"] = c.data.strict;
  j["decode"] = c.data.kind == DataKind::images ? decode_mode_name(c.data.decode) : "none";
  j["log_every"] = c.output.log_every ? nlohmann::json(*c.output.log_every) : nlohmann::json(nullptr);
  if (c.data.eval_images) j["eval_images"] = *c.data.eval_images;
  j["gpus"] = c.parallel.gpus;
  j["launcher"] = parallel::launcher_name(c.parallel.launcher);
  j["bucket_mb"] = c.parallel.bucket_mb;
  j["allreduce_precision"] = allreduce_precision_name(c.parallel.allreduce_precision);
  j["algorithm_cache"] = c.algorithm_cache.text();
  j["nccl_symmetric"] = c.parallel.nccl_symmetric;
  j["lr_scaling"] = lr_scaling_name(c.parallel.lr_scaling);
  j["timeout_seconds"] = c.parallel.timeout_seconds;
  j["cuda_graph"] = c.cuda_graph;
  j["conv_workspace_mb"] = c.conv_workspace_mb;
  j["cuda"] = cuda_options_to_json(c.cuda);
  if (is_gpt_model(c.model.name)) {
    j["seq_len"] = c.model.seq_len;
    j["recompute"] = c.model.recompute;
    if (c.model.precision == Precision::fp8) {
      j["fp8_amax_history"] = c.model.fp8_amax_history;
      j["fp8_margin"] = c.model.fp8_margin;
    }
    j["optimizer"] = optimizer_name(c.optimizer.kind);
    j["adam_betas"] = {c.optimizer.adam_beta1, c.optimizer.adam_beta2};
    j["adam_eps"] = c.optimizer.adam_eps;
    j["clip_grad_norm"] = c.optimizer.clip_grad_norm.value_or(0);
    j["lr_warmup_steps"] =
        c.optimizer.lr_warmup_steps ? nlohmann::json(*c.optimizer.lr_warmup_steps) : nlohmann::json(nullptr);
  }
  return j;
}

}  // namespace dlbench
