// RunConfig: everything a `dlbench train` or `dlbench bench` run is told, resolved and checked before any
// work starts, so a bad flag costs nothing. Flag names follow tf_cnn_benchmarks and NVIDIA's examples.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "core/tensor.h"
#include "data/decode_mode.h"
#include "parallel/launcher.h"

namespace dlbench {

enum class RunKind : uint8_t { train, bench };
// fp8: BF16 activations and weights with the transformer's dense layers' GEMMs in FP8 (delayed scaling,
// Fp8DenseScaling in backend/backend.h).
enum class Precision : uint8_t { fp32, tf32, fp16, bf16, fp8 };
enum class LrSchedule : uint8_t { constant, step, cosine };
// --device: auto takes a GPU where this dlbench has a usable one, else the CPU.
enum class DeviceRequest : uint8_t { automatic, cpu, cuda };
// --loss-scale: unset, FP16 scales dynamically and every other precision by a fixed 1.
enum class LossScaling : uint8_t { by_precision, dynamic, fixed };
// --allreduce-precision: gradients summed in FP32, or in the compute dtype (FP16/BF16).
enum class AllreducePrecision : uint8_t { fp32, compute };
// --lr-scaling: linear multiplies --lr by the number of ranks.
enum class LrScaling : uint8_t { none, linear };
// What --data names, resolved: synthetic images, IDX files (Fashion-MNIST), or JPEG images; for a token
// model (GPT) synthetic tokens or token files.
enum class DataKind : uint8_t { synthetic, idx, images, tokens };
// --optimizer: unset takes the model family's (AdamW for GPT models, SGD for ResNets).
enum class OptimizerKind : uint8_t { sgd, adamw };

const char* precision_name(Precision precision);
// The dtype activations and conv/linear weights are computed in (the master weights stay FP32).
DType compute_dtype(Precision precision);
const char* lr_schedule_name(LrSchedule schedule);
const char* allreduce_precision_name(AllreducePrecision precision);
const char* lr_scaling_name(LrScaling scaling);
const char* optimizer_name(OptimizerKind kind);

// --trace-steps A:B: the steps a --trace records, 1-based (warm-up steps count).
struct StepRange {
  int64_t first = 3, last = 4;
};

// The flags' texts as the user gives them, parsed once (at the CLI); a bad value throws UserError naming
// the flag and the values to choose from.
Precision parse_precision(const std::string& text);
LrSchedule parse_lr_schedule(const std::string& text);
Layout parse_layout(const std::string& text);
DeviceRequest parse_device(const std::string& text);
AllreducePrecision parse_allreduce_precision(const std::string& text);
LrScaling parse_lr_scaling(const std::string& text);
bool parse_cuda_graph(const std::string& text);          // auto | true | false (auto: true)
StepRange parse_trace_steps(const std::string& text);    // A:B, 1 <= A <= B
OptimizerKind parse_optimizer(const std::string& text);  // sgd | adamw

// Where a GPU run keeps its algorithm choices between processes (--algorithm-cache): the user's cache
// folder (no flag), nowhere ("none": every run searches afresh), or a file named.
struct AlgorithmCacheChoice {
  enum class Where : uint8_t { user_cache_folder, none, file };
  Where where = Where::user_cache_folder;
  std::string file;  // Where::file
  // As the flag states it: "" (the user's cache folder), "none" or the file.
  std::string text() const;
};
AlgorithmCacheChoice parse_algorithm_cache(const std::string& text);  // "none", "" or a FILE

// The network and the numbers it computes in.
struct ModelConfig {
  std::string name = "resnet50";
  Precision precision = Precision::fp32;
  Layout layout = Layout::nhwc;
  int image_size = 0;      // output size of the image transform (0 = 224, or the images' own size)
  int64_t seq_len = 0;     // GPT models: tokens per sequence (resolved: 0 = the model's context)
  bool recompute = false;  // GPT models: each block's activations made again in backward (--recompute)
  // --precision fp8: the steps of amax history each scale is made from, and the powers of two of headroom
  // left below the format's largest value.
  int fp8_amax_history = 16;
  int fp8_margin = 0;
};

// The optimizer, its learning-rate schedule, the loss and its scaling.
struct OptimizerConfig {
  // --optimizer, --lr and --weight-decay as given (unset: the model family's defaults, which
  // resolve_config writes into kind, lr and weight_decay; a ResNet keeps SGD, 0.1 and 5e-5).
  std::optional<OptimizerKind> kind_request;
  std::optional<double> lr_request, weight_decay_request;
  OptimizerKind kind = OptimizerKind::sgd;  // resolved
  double lr = 0.1;
  double momentum = 0.9;  // SGD
  bool nesterov = false;  // SGD
  double weight_decay = 5e-5;
  bool decay_norm_and_bias = true;  // weight decay on BN and bias too (PyTorch's default; AdamW: never)
  // AdamW (PyTorch's torch.optim.AdamW, GPT-2's settings): decoupled weight decay on the matrices and
  // embeddings only, never on biases and layer norms (nanoGPT's groups).
  double adam_beta1 = 0.9, adam_beta2 = 0.95, adam_eps = 1e-8;
  // Gradient clipping by the global norm (AdamW; 0: none). Unset: 1 for AdamW (nanoGPT's), none for SGD.
  std::optional<double> clip_grad_norm;
  // Warm-up in optimizer steps (overrides lr_warmup_epochs). Unset for a GPT model: 5% of the run's
  // steps, at most 700 (llm.c's GPT-2 recipe).
  std::optional<int64_t> lr_warmup_steps;
  double label_smoothing = 0.0;
  LrSchedule lr_schedule = LrSchedule::cosine;
  double lr_warmup_epochs = 0.0;
  std::vector<double> lr_decay_epochs;  // step schedule: multiply by lr_decay_factor at each
  double lr_decay_factor = 0.1;
  // Loss scaling (fp16): dynamic (start at 2^16, halve on overflow and skip the step, double after
  // loss_scale_growth_interval good steps) or a fixed factor. Other precisions: 1.
  LossScaling loss_scaling = LossScaling::by_precision;  // resolved: dynamic or fixed
  double loss_scale = 1.0;                               // fixed: the factor; dynamic: the starting scale
  int64_t loss_scale_growth_interval = 2000;
};

// What the run trains and evaluates on, and how its images are read.
struct DataConfig {
  std::string source = "synthetic";  // --data: synthetic | fashion-mnist | a directory of IDX files | images
  std::string idx_dir;               // resolved: the directory of IDX files (fashion-mnist's too)
  // Real images (an image folder or shards; data/image_dataset.h).
  DataKind kind = DataKind::synthetic;   // resolved
  std::string train_images, val_images;  // resolved: the training and evaluation image sets ("" = none)
  std::string val_data;                  // --val-data: the evaluation images, when not PATH/val
  int threads = 0;                       // decoding threads (0 = all cores but one)
  int gpu_decode_threads = 2;            // --decode gpu: threads that decode and augment batches in turn
  bool strict = false;                   // stop at the first bad image instead of skipping it
  // --decode: where JPEGs are decoded (data/decode_mode.h). `decode` is the mode used for image data
  // (resolved: cpu or gpu; synthetic and IDX data decode nothing), `decode_note` the line that says why
  // auto chose the CPU on a GPU device ("" for none; printed once, by rank 0).
  DecodeMode decode_request = DecodeMode::automatic;
  DecodeMode decode = DecodeMode::cpu;
  std::string decode_note;
  std::optional<int64_t> eval_images;  // train: evaluate on the first N test images (default: all)
};

// Data parallelism (src/parallel): ranks are GPUs of this process (--gpus, threads) or mpirun's processes.
// (Tensor or pipeline parallelism's degrees land here.)
struct ParallelConfig {
  int gpus = 1;  // threads: GPUs driven from this process
  parallel::Launcher launcher = parallel::Launcher::automatic;
  double bucket_mb = 25;  // gradient bucket (fusion buffer) size in MiB; 0 = one bucket
  AllreducePrecision allreduce_precision = AllreducePrecision::fp32;
  bool nccl_symmetric = false;  // gradient buffers in NCCL symmetric windows (NcclTuning::symmetric)
  LrScaling lr_scaling = LrScaling::none;
  double timeout_seconds = 300;  // a collective unfinished after this stops every rank
  std::string claimed_version;   // tests only (--test-claim-version): the dlbench this rank reports
};

// What the run writes, and the checkpoint it reads back.
struct OutputConfig {
  // Progress lines: every log_every steps when given; else a train run logs by time (a line when
  // log_seconds have passed, and at the end), a bench run every step on the CPU and 100 on a GPU.
  // Evaluation reports by time always.
  std::optional<int64_t> log_every;
  double log_seconds = 5;
  bool per_layer = false;  // bench: time every layer's forward and backward
  std::string json_path;
  std::string trace_path;  // --trace: a Chrome trace of the steps trace_steps names
  StepRange trace_steps;
  std::string mlperf_log_path;  // train: MLPerf-style :::MLLOG lines to FILE
  std::string checkpoint_path;
  int64_t save_every = 0;  // steps between checkpoints; 0 = at the end (and each epoch) only
  std::string resume_path;
  // --resume-anyway: continue a checkpoint written with other settings (batch, seed, precision, data,
  // optimizer), which then no longer repeats the run that was stopped. The layout must still match.
  bool resume_anyway = false;
};

// A run: its kind, batch and length, the device it runs on, and the parts above.
struct RunConfig {
  RunKind kind = RunKind::bench;
  // Unset (nullopt) fields take the device's default in resolve_config.
  std::optional<int64_t> batch_size;  // per device
  // --batch-size max: the largest batch whose memory plan fits every rank's device, found before the
  // model is built (the original study's method). batch_size then holds only an anchor for the search.
  bool batch_size_max = false;
  std::optional<int64_t> epochs;        // train: passes over the training set (exclusive with steps)
  std::optional<int64_t> steps;         // train: total optimizer steps; bench: timed steps
  std::optional<int64_t> warmup_steps;  // steps run before the timed window
  int64_t accumulate_steps = 1;         // micro-batches per optimizer step
  uint64_t seed = 42;

  // Placement, and what the device runs where it has a choice.
  DeviceRequest device_request = DeviceRequest::automatic;
  Device device{};           // resolved
  std::string backend_name;  // cpu: onednn (default) or reference
  int threads = 0;           // CPU threads; 0 = all cores
  bool cuda_graph = true;    // replay the whole step as one CUDA graph where the backend can
  double conv_workspace_mb =
      kDefaultConvWorkspaceLimit >> 20;  // GPU: the most workspace one convolution direction may take
  // GPU: what the CUDA backend runs where it has a choice (the --conv-*, --bn-*, --stem-pool-fusion and
  // --comm-priority flags); resolve_config adds TF32 and the workspace limit from the flags above.
  CudaOptions cuda;
  AlgorithmCacheChoice algorithm_cache;  // GPU: where the algorithm choices are kept between processes

  ModelConfig model;
  OptimizerConfig optimizer;
  DataConfig data;
  ParallelConfig parallel;
  OutputConfig output;
};

// --loss-scale dynamic | FACTOR; "" leaves the precision's default.
void parse_loss_scale(const std::string& text, OptimizerConfig& optimizer);
// --batch-size N | max; "" leaves the device's default.
void parse_batch_size(const std::string& text, RunConfig& config);

// The settings a checkpoint records and a resumed run must repeat to continue exactly, as flag -> value
// (the flags' names as the user gives them): batch, accumulation, seed, precision, layout, data and
// the optimizer's and schedule's settings; ranks and the data set's digest are added by the run.
nlohmann::json resume_settings(const RunConfig& config);

// Fills defaults and checks every field; throws UserError naming the flag that is wrong.
void resolve_config(RunConfig& config, bool cuda_available);

// The resolved configuration, for headers and result files.
nlohmann::json config_to_json(const RunConfig& config);

}  // namespace dlbench
