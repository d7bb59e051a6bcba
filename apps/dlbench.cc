// dlbench: the command line. Parses flags into a RunConfig, resolves it, runs, writes results.
// Only this file decides exit codes: 0 success, 1 bad input (one clear line), 2 bad flags (one line: the
// parser's), 3 internal error, 130/143 stopped by SIGINT/SIGTERM (core/signals.h); a communicator's
// watchdog ends a stalled run itself, with 4 (parallel/watchdog.h).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "app/comm_bench.h"
#include "app/data_commands.h"
#include "app/run.h"
#include "app/tokenize_command.h"
#include "backend/backend_factory.h"
#include "bench/report.h"
#include "bench/sweep.h"
#include "bench/system_info.h"
#include "bench/trace_summary.h"
#include "core/file_io.h"
#include "core/signals.h"
#include "core/status.h"
#include "git_commit.h"  // generated: DLBENCH_GIT_COMMIT
#include "models/resnet.h"
#include "parallel/mpi_runtime.h"
#include "train/config.h"

namespace {

using dlbench::RunConfig;

// The flags of `train` and `bench` that name a choice, as given; parse_run_flags turns them into the
// RunConfig's types once the command line is read, so that a bad value is one line and exit code 1.
struct RunFlagTexts {
  std::string batch_size, precision = "fp32", loss_scale, layout, decode = "auto", device = "auto",
                          allreduce_precision = "fp32", lr_scaling = "none", cuda_graph = "auto", lr_schedule,
                          launcher = "auto", trace_steps = "3:4", optimizer;
};

// A `train` or `bench` command: its configuration, and its choices' texts until they are parsed.
struct RunCommand {
  RunConfig config;
  RunFlagTexts flags;
};

void parse_run_flags(const RunFlagTexts& t, RunConfig& c) {
  dlbench::parse_batch_size(t.batch_size, c);
  c.model.precision = dlbench::parse_precision(t.precision);
  dlbench::parse_loss_scale(t.loss_scale, c.optimizer);
  c.model.layout = dlbench::parse_layout(t.layout);
  c.data.decode_request = dlbench::parse_decode_mode(t.decode, "--decode");
  c.device_request = dlbench::parse_device(t.device);
  c.parallel.allreduce_precision = dlbench::parse_allreduce_precision(t.allreduce_precision);
  c.parallel.lr_scaling = dlbench::parse_lr_scaling(t.lr_scaling);
  c.cuda_graph = dlbench::parse_cuda_graph(t.cuda_graph);
  c.optimizer.lr_schedule = dlbench::parse_lr_schedule(t.lr_schedule);
  if (!t.optimizer.empty()) c.optimizer.kind_request = dlbench::parse_optimizer(t.optimizer);
  c.parallel.launcher = dlbench::parallel::parse_launcher(t.launcher);
  // Read only with --trace, as before the steps were parsed at the command line.
  if (!c.output.trace_path.empty()) c.output.trace_steps = dlbench::parse_trace_steps(t.trace_steps);
}

// A count of 1 or more for a field whose 0 means "not given" (the model's or the data's own size): a 0
// typed at the command line is refused rather than read as the default.
CLI::Validator whole_number_from_one(const std::string& flag) {
  return CLI::Validator(
      [flag](std::string& text) {
        const bool digits =
            !text.empty() && text.size() <= 9 && text.find_first_not_of("0123456789") == std::string::npos;
        return digits && std::stoi(text) > 0 ? std::string()
                                             : flag + " " + text + ": give a whole number, 1 or more";
      },
      "N");
}

// An option whose text is one of `choices`, stored as its value in `field` (the field's value before
// parsing is the default); another text is the parser's one-line error naming the choices.
template <typename E>
void add_choice(CLI::App& cmd, const std::string& flag, E& field,
                std::vector<std::pair<std::string, E>> choices, const std::string& help) {
  std::string names, current;
  for (size_t i = 0; i < choices.size(); ++i) {
    names += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i].first;
    if (choices[i].second == field) current = choices[i].first;
  }
  cmd.add_option_function<std::string>(
         flag,
         [&field, choices](const std::string& text) {
           for (const auto& [name, value] : choices)
             if (text == name) field = value;
         },
         help)
      ->check(CLI::Validator(
          [flag, choices, names](std::string& text) {
            for (const auto& choice : choices)
              if (text == choice.first) return std::string();
            return flag + " " + text + ": choose " + names;
          },
          "CHOICE"))
      ->default_str(current);
}

// What the CUDA backend runs where it has a choice (backend/cuda_options.h): the kernel paths kept
// selectable for A/B measurements, each default the one that measured faster (docs/PERFORMANCE.md).
void add_cuda_flags(CLI::App& cmd, dlbench::CudaOptions& o) {
  using dlbench::KernelChoice;
  const std::vector<std::pair<std::string, KernelChoice>> choice{
      {"auto", KernelChoice::automatic}, {"off", KernelChoice::off}, {"force", KernelChoice::force}};
  const std::vector<std::pair<std::string, bool>> on_off{{"on", true}, {"off", false}};
  add_choice(cmd, "--conv-graph", o.conv_graph, choice,
             "GPU: auto | off | force: convolutions on cuDNN's graph-API engines where one times faster than "
             "the legacy algorithm (force: wherever there is one)");
  add_choice(cmd, "--conv-gemm", o.conv_gemm, choice,
             "GPU: auto | off | force: NHWC 1x1 convolutions on cuBLAS's GEMM where it times faster");
  add_choice(
      cmd, "--conv-space-to-depth", o.conv_space_to_depth, choice,
      "GPU: auto | off | force: stride-2 convolutions on few channels (the stem) as stride-1 ones over "
      "2x2 input blocks where that times faster");
  add_choice(cmd, "--conv-statistics", o.conv_statistics, choice,
             "GPU: auto | off | force: batch norms' statistics summed by the convolutions before them where "
             "that costs less than their own pass (FP16 runs then no longer repeat bit for bit)");
  add_choice(cmd, "--bn-fold-shortcut", o.fold_shortcut_batchnorm, on_off,
             "GPU: on | off: projection shortcuts' batch norms folded into their blocks' closing ones");
  add_choice(cmd, "--stem-pool-fusion", o.stem_pool_fusion, on_off,
             "GPU: on | off: the stem's batch norm + ReLU and max pool as one op");
  add_choice(
      cmd, "--dense-epilogues", o.dense_epilogues, on_off,
      "GPU: on | off: transformers' biases, GELU, its gradient and residual adds in the GEMMs' epilogues");
  add_choice(
      cmd, "--fp8-fast-accumulation", o.fp8_fast_accumulation,
      {{"off", dlbench::Fp8FastAccumulation::off},
       {"forward", dlbench::Fp8FastAccumulation::forward},
       {"all", dlbench::Fp8FastAccumulation::all}},
      "GPU, --precision fp8: off | forward | all: the FP8 GEMMs that take cuBLASLt's fast accumulation "
      "(partial sums not promoted to FP32 at intervals: faster, less exact)");
  add_choice(cmd, "--comm-priority", o.training_stream,
             {{"normal", dlbench::TrainingStreamPriority::normal},
              {"low", dlbench::TrainingStreamPriority::greatest}},
             "GPU ranks: normal | low: the gradient sums' stream alike training's, or below it (training's "
             "stream at the device's greatest priority)");
}

// The model, the batch and the run's length.
void add_model_flags(CLI::App& cmd, RunConfig& c, RunFlagTexts& t) {
  cmd.add_option("--model", c.model.name,
                 "resnet18 | resnet34 | resnet50 | resnet101 | resnet152 | resnet20 | gpt2 | gpt2-medium | "
                 "gpt2-large | gpt2-xl | gpt-mini")
      ->capture_default_str();
  cmd.add_option("--batch-size", t.batch_size,
                 "images (GPT models: sequences) per device per step (the global batch is this x devices x "
                 "--accumulate-steps), or max: the largest that fits every GPU; default: 16 (resnet20: 128) "
                 "on the CPU, 256 (512) on a GPU; GPT models 4 (gpt-mini 16) on the CPU, 16 (64) on a GPU");
  cmd.add_option("--seq-len", c.model.seq_len,
                 "GPT models: tokens per sequence (default: the model's context)")
      ->check(whole_number_from_one("--seq-len"));
  cmd.add_flag("--recompute", c.model.recompute,
               "GPT models: keep only each block's input from the forward pass and make the block's other "
               "activations again just before its backward (less memory, about a third more forward work)");
  cmd.add_option("--fp8-amax-history", c.model.fp8_amax_history,
                 "--precision fp8: steps of each operand's largest |value| its scale is made from")
      ->capture_default_str();
  cmd.add_option("--fp8-margin", c.model.fp8_margin,
                 "--precision fp8: powers of two of headroom below the FP8 format's largest value")
      ->capture_default_str();
  cmd.add_option("--steps", c.steps, "train: total optimizer steps; bench: timed steps");
  cmd.add_option("--warmup-steps", c.warmup_steps, "steps run before the timed window and left out of it");
  cmd.add_option("--accumulate-steps", c.accumulate_steps, "micro-batches whose gradients make one step")
      ->capture_default_str();
}

// The optimizer and its schedule, the numbers the network computes in and the loss's scaling.
void add_optimizer_flags(CLI::App& cmd, RunConfig& c, RunFlagTexts& t) {
  cmd.add_option("--optimizer", t.optimizer, "sgd | adamw (default: adamw for GPT models, sgd for ResNets)");
  cmd.add_option("--lr", c.optimizer.lr_request,
                 "peak learning rate (default 0.1 for SGD; AdamW 6e-4, gpt-mini 2e-3)");
  cmd.add_option("--momentum", c.optimizer.momentum, "SGD momentum")->capture_default_str();
  cmd.add_flag("--nesterov", c.optimizer.nesterov, "Nesterov momentum");
  cmd.add_option("--weight-decay", c.optimizer.weight_decay_request,
                 "weight decay (default 5e-5, SGD's L2; AdamW 0.1, decoupled, on matrices and embeddings)");
  cmd.add_option("--adam-beta1", c.optimizer.adam_beta1, "AdamW's beta1")->capture_default_str();
  cmd.add_option("--adam-beta2", c.optimizer.adam_beta2, "AdamW's beta2")->capture_default_str();
  cmd.add_option("--adam-eps", c.optimizer.adam_eps, "AdamW's epsilon")->capture_default_str();
  cmd.add_option("--clip-grad-norm", c.optimizer.clip_grad_norm,
                 "AdamW: clip the gradients to this global norm, 0 = off (default 1)");
  cmd.add_option("--lr-warmup-steps", c.optimizer.lr_warmup_steps,
                 "linear learning-rate warm-up, in steps (GPT models' default: 5% of the run, at most 700)");
  cmd.add_flag("--no-decay-bn-bias{false}", c.optimizer.decay_norm_and_bias,
               "no weight decay on batch-norm and bias");
  cmd.add_option("--label-smoothing", c.optimizer.label_smoothing, "label smoothing of the loss")
      ->capture_default_str();
  cmd.add_option("--lr-schedule", t.lr_schedule, "constant | step | cosine")->capture_default_str();
  cmd.add_option("--lr-warmup-epochs", c.optimizer.lr_warmup_epochs,
                 "linear learning-rate warm-up, in epochs")
      ->capture_default_str();
  cmd.add_option("--lr-decay-epochs", c.optimizer.lr_decay_epochs,
                 "step schedule: epochs at which the rate drops")
      ->delimiter(',');
  cmd.add_option("--lr-decay-factor", c.optimizer.lr_decay_factor, "step schedule: factor of each drop")
      ->capture_default_str();
  cmd.add_option("--precision", t.precision,
                 "fp32 | tf32 | fp16 | bf16 | fp8 (GPT models: bf16 with the dense layers' GEMMs in FP8, "
                 "delayed scaling; the CPU trains in fp32)")
      ->capture_default_str();
  cmd.add_option("--loss-scale", t.loss_scale,
                 "dynamic | a fixed factor (default: dynamic for fp16, else 1)");
  cmd.add_option("--loss-scale-growth-interval", c.optimizer.loss_scale_growth_interval,
                 "dynamic loss scaling: good steps before the scale doubles")
      ->capture_default_str();
  cmd.add_option("--layout", t.layout, "nchw | nhwc (default nhwc)");
}

// The data and how its images are decoded.
void add_data_flags(CLI::App& cmd, RunConfig& c, RunFlagTexts& t) {
  cmd.add_option("--data", c.data.source,
                 "synthetic | fashion-mnist | a directory of IDX files | an image folder (CLASS/FILE.jpg) or "
                 "shard set (dlbench pack), or ROOT with train/ and val/ ones")
      ->capture_default_str();
  cmd.add_option("--val-data", c.data.val_data, "the evaluation images, when not ROOT/val");
  cmd.add_option("--gpu-decode-threads", c.data.gpu_decode_threads,
                 "--decode gpu: threads that decode and augment batches in turn (1-8)")
      ->capture_default_str();
  cmd.add_option("--data-threads", c.data.threads, "image decoding threads (0 = all cores but one)")
      ->capture_default_str();
  cmd.add_option("--image-size", c.model.image_size,
                 "side of the training crop (default 224; small grayscale images: their own size)")
      ->check(whole_number_from_one("--image-size"));
  cmd.add_flag("--strict", c.data.strict, "stop at the first bad image, naming it, instead of skipping it");
  cmd.add_option("--decode", t.decode,
                 "auto | cpu | gpu: where JPEGs are decoded (auto: on the GPU where the run is on one and "
                 "nvJPEG opens, else on the CPU; gpu: nvJPEG or exit 1)")
      ->capture_default_str();
}

// The device, its backend and threads, and the seed.
void add_device_flags(CLI::App& cmd, RunConfig& c, RunFlagTexts& t) {
  cmd.add_option("--device", t.device, "auto | cpu | cuda")->capture_default_str();
  cmd.add_option("--backend", c.backend_name, "CPU backend: onednn (default) | reference");
  cmd.add_option("--threads", c.threads, "CPU threads (0 = all cores)")->capture_default_str();
  cmd.add_option("--seed", c.seed, "seed of weights, data order and synthetic data (0 or more)")
      ->check(CLI::Validator(
          [](std::string& text) {
            return !text.empty() && text.size() <= 19 &&
                           text.find_first_not_of("0123456789") == std::string::npos
                       ? std::string()
                       : "--seed " + text + ": give a whole number, 0 or more";
          },
          "SEED"))
      ->capture_default_str();
}

// Progress lines and the result file.
void add_output_flags(CLI::App& cmd, RunConfig& c) {
  cmd.add_option("--log-every", c.output.log_every,
                 "steps between progress lines (default: train, a line every 5 s; bench, every step on the "
                 "CPU and every 100 on a GPU)");
  cmd.add_option("--json", c.output.json_path, "write the result as one JSON object to FILE");
}

// Data parallelism: the ranks, their gradient sums and the learning rate's scaling.
void add_parallel_flags(CLI::App& cmd, RunConfig& c, RunFlagTexts& t) {
  cmd.add_option("--gpus", c.parallel.gpus,
                 "GPUs driven from this process, one thread each (data parallel, NCCL)")
      ->capture_default_str();
  cmd.add_option("--launcher", t.launcher,
                 "auto | threads (--gpus N in one process) | mpi (one process per rank, under mpirun)")
      ->capture_default_str();
  cmd.add_option("--bucket-mb", c.parallel.bucket_mb,
                 "gradient bucket size: each is summed as soon as backward has it")
      ->capture_default_str();
  cmd.add_option("--allreduce-precision", t.allreduce_precision,
                 "fp32 | compute: sum mixed-precision gradients in FP32 or in FP16/BF16")
      ->capture_default_str();
  cmd.add_flag(
      "--nccl-symmetric", c.parallel.nccl_symmetric,
      "GPU ranks: gradients in NCCL symmetric windows (their sums run NCCL's symmetric-memory kernels)");
  cmd.add_option("--lr-scaling", t.lr_scaling, "none | linear: multiply --lr by the number of ranks")
      ->capture_default_str();
  cmd.add_option("--timeout", c.parallel.timeout_seconds,
                 "seconds a collective may take before every rank stops")
      ->capture_default_str();
  // Tests only, left out of --help: this rank reports another dlbench version to the others.
  cmd.add_option("--test-claim-version", c.parallel.claimed_version)->group("");
}

// --trace and the steps it records.
void add_trace_flags(CLI::App& cmd, RunConfig& c, RunFlagTexts& t) {
  cmd.add_option("--trace", c.output.trace_path,
                 "write a Chrome trace (chrome://tracing) of --trace-steps: every rank's compute, "
                 "communication and data rows");
  cmd.add_option("--trace-steps", t.trace_steps,
                 "A:B, the steps to trace (1-based; traced steps run op by op)")
      ->capture_default_str();
}

// What the GPU runs: the step as a graph, the convolutions' algorithms and kernel paths.
void add_gpu_flags(CLI::App& cmd, RunConfig& c, RunFlagTexts& t) {
  cmd.add_option("--cuda-graph", t.cuda_graph,
                 "auto | true | false: record the whole step once and replay it as one CUDA graph (auto: "
                 "true; it measured faster at 2 GPUs and no slower on one)")
      ->capture_default_str();
  cmd.add_option_function<std::string>(
      "--algorithm-cache",
      [&c](const std::string& text) { c.algorithm_cache = dlbench::parse_algorithm_cache(text); },
      "GPU: FILE of convolution algorithm choices: read before searching, new choices added; runs given the "
      "same file run the same kernels; none: search afresh (default: the user's cache folder)");
  cmd.add_option("--conv-workspace-mb", c.conv_workspace_mb,
                 "GPU: the most workspace one convolution may take; the fastest algorithm within it wins")
      ->capture_default_str();
  add_cuda_flags(cmd, c.cuda);
}

// Flags shared by `train` and `bench`, in the order --help lists them.
void add_run_flags(CLI::App& cmd, RunCommand& command) {
  RunConfig& c = command.config;
  RunFlagTexts& t = command.flags;
  add_model_flags(cmd, c, t);
  add_optimizer_flags(cmd, c, t);
  add_data_flags(cmd, c, t);
  add_device_flags(cmd, c, t);
  add_output_flags(cmd, c);
  add_parallel_flags(cmd, c, t);
  add_trace_flags(cmd, c, t);
  add_gpu_flags(cmd, c, t);
}

// Runs a command; returns the exit code: 0, 1 for a UserError (one line on stderr), 3 for an internal
// error, 128 + the signal for a command stopped by SIGINT (130) or SIGTERM (143) at a safe point.
int guarded(const std::function<void()>& body) {
  try {
    body();
    return 0;
  } catch (const dlbench::Stopped& e) {
    std::fflush(stdout);
    if (*e.what() != '\0') std::fprintf(stderr, "dlbench: %s\n", e.what());
    return dlbench::stopped_exit_code(e.signal());
  } catch (const dlbench::UserError& e) {
    // An error every rank stops with is said by rank 0 alone: the others' is empty.
    if (*e.what() != '\0') std::fprintf(stderr, "dlbench: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dlbench: internal error: %s\n", e.what());
    return 3;
  }
}

// Runs `train` or `bench`; returns the exit code.
int run_command(RunCommand& command) {
  return guarded([&] {
    RunConfig& config = command.config;
    parse_run_flags(command.flags, config);
    dlbench::resolve_config(config, dlbench::cuda_backend_available());
    const std::optional<dlbench::RunResult> result =
        config.kind == dlbench::RunKind::train ? dlbench::run_train(config) : dlbench::run_bench(config);
    if (!config.output.json_path.empty() && result) {  // rank 0 writes
      dlbench::write_file_atomically(config.output.json_path, dlbench::to_json(*result).dump(2) + "\n");
      std::printf("result written to %s\n", config.output.json_path.c_str());
    }
  });
}

// Levenshtein distance, for "did you mean".
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// A flag the parser refused: one line, "dlbench: error: ...", and exit code 2 (bad flags). A first word
// that is no command is named, with the nearest command.
int report_parse_error(const CLI::App& app, int argc, char** argv, const CLI::ParseError& e) {
  std::vector<std::string> commands;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    commands.push_back(sub->get_name());
  std::string message = e.what();
  if (argc > 1 && argv[1][0] != '-' &&
      std::find(commands.begin(), commands.end(), argv[1]) == commands.end()) {
    const std::string given = argv[1];
    const auto nearest = std::min_element(
        commands.begin(), commands.end(),
        [&](const auto& a, const auto& b) { return edit_distance(given, a) < edit_distance(given, b); });
    message = fmt::format(
        "unknown command '{}'{}; the commands are {}", given,
        edit_distance(given, *nearest) <= 2 ? fmt::format(" (did you mean '{}'?)", *nearest) : std::string(),
        fmt::join(commands, ", "));
  } else if (argc <= 1) {
    message = fmt::format("no command given; the commands are {} (dlbench --help says what each does)",
                          fmt::join(commands, ", "));
  }
  // CLI11 puts the flag before a validator's message, which names it already: "--x: --x v: ..." -> "--x v:
  // ...".
  if (const size_t colon = message.find(": "); message.rfind("--", 0) == 0 && colon != std::string::npos &&
                                               message.compare(colon + 2, colon, message, 0, colon) == 0 &&
                                               message[2 * colon + 2] == ' ')
    message.erase(0, colon + 2);
  for (char& c : message)
    if (c == '\n') c = ' ';
  std::fprintf(stderr, "dlbench: error: %s\n", message.c_str());
  return 2;
}

// What the command line asks for, filled in by the parser.
struct Commands {
  RunCommand train, bench;
  dlbench::parallel::CommBenchOptions comm_bench;
  std::string info_json;
  dlbench::SweepOptions sweep, compare;
  std::vector<std::string> compare_frameworks = dlbench::peer_frameworks();
  dlbench::StudyOptions study;
  std::vector<std::string> report_inputs;
  std::string report_dir = "report";
  std::string trace_path, trace_against;
  dlbench::PackOptions pack;
  dlbench::DataBenchOptions data_bench;
  dlbench::ExportOptions export_images;
  dlbench::TokenizeOptions tokenize;
};

void add_train_command(CLI::App& app, RunCommand& command) {
  RunConfig& train_config = command.config;
  train_config.kind = dlbench::RunKind::train;
  command.flags.lr_schedule = "cosine";
  CLI::App* train =
      app.add_subcommand("train", "train a model: epochs over a data set, evaluation, checkpoints");
  add_run_flags(*train, command);
  train->add_option("--epochs", train_config.epochs,
                    "passes over the training set (default 1; exclusive with --steps)");
  train->add_option("--checkpoint", train_config.output.checkpoint_path,
                    "save weights and optimizer state to FILE");
  train->add_option("--save-every", train_config.output.save_every, "also save every N steps");
  train->add_option("--resume", train_config.output.resume_path,
                    "continue from a checkpoint FILE (its batch, seed, precision, layout, data and optimizer "
                    "settings must match)");
  train->add_flag("--resume-anyway", train_config.output.resume_anyway,
                  "continue a checkpoint written with other settings (the layout must still match)");
  train
      ->add_option("--log-seconds", train_config.output.log_seconds,
                   "without --log-every: seconds between progress lines, of training and of evaluation")
      ->capture_default_str();
  train->add_option("--eval-images", train_config.data.eval_images,
                    "evaluate on the first N test images (default: all of them)");
  train->add_option("--mlperf-log", train_config.output.mlperf_log_path,
                    "write the run's events as MLPerf Training :::MLLOG lines to FILE");
}

void add_bench_command(CLI::App& app, RunCommand& command) {
  RunConfig& bench_config = command.config;
  bench_config.kind = dlbench::RunKind::bench;
  command.flags.lr_schedule = "constant";
  CLI::App* bench = app.add_subcommand(
      "bench", "measure training throughput: synthetic data by default, or --data images or shards");
  add_run_flags(*bench, command);
  bench->add_flag("--per-layer", bench_config.output.per_layer,
                  "after the timed window, time each layer's forward and backward");
}

void add_comm_bench_command(CLI::App& app, dlbench::parallel::CommBenchOptions& o) {
  CLI::App* comm_bench = app.add_subcommand(
      "comm-bench",
      "all-reduce time and bandwidth over the ranks (--gpus N, or under mpirun), every sum checked");
  comm_bench->add_option("--min-bytes", o.min_bytes, "smallest message")->capture_default_str();
  comm_bench->add_option("--max-bytes", o.max_bytes, "largest message (sizes double from --min-bytes)")
      ->capture_default_str();
  comm_bench->add_option("--iters", o.iters, "timed iterations per size (the median is reported)")
      ->capture_default_str();
  comm_bench->add_option("--warmup", o.warmup, "untimed iterations per size")->capture_default_str();
  add_choice(*comm_bench, "--dtype", o.dtype,
             {{"f32", dlbench::DType::f32}, {"f16", dlbench::DType::f16}, {"bf16", dlbench::DType::bf16}},
             "f32 | f16 | bf16 (f16 and bf16 on a GPU)");
  add_choice(*comm_bench, "--device", o.device,
             {{"cpu", dlbench::DeviceKind::cpu}, {"cuda", dlbench::DeviceKind::cuda}}, "cpu | cuda");
  comm_bench->add_option("--gpus", o.gpus, "GPUs of this process, one thread each (not under mpirun)")
      ->capture_default_str();
  add_choice(*comm_bench, "--launcher", o.launcher,
             {{"auto", dlbench::parallel::Launcher::automatic},
              {"threads", dlbench::parallel::Launcher::threads},
              {"mpi", dlbench::parallel::Launcher::mpi}},
             "auto | threads | mpi");
  comm_bench
      ->add_option("--timeout", o.timeout_seconds, "seconds a collective may take before every rank stops")
      ->capture_default_str();
  comm_bench->add_flag("--nccl-symmetric", o.nccl_symmetric,
                       "the buffer in an NCCL symmetric window (NCCL's symmetric-memory kernels)");
  comm_bench->add_option("--json", o.json_path, "write the result as one JSON object to FILE (rank 0)");
}

// sweep, compare and study share the grid's flags.
void add_grid_flags(CLI::App* cmd, dlbench::SweepOptions& o, bool results_required) {
  auto* results = cmd->add_option("--results", o.results, "the JSON Lines file the points are appended to");
  if (results_required) results->required();
  cmd->add_option("--models", o.models, "models, comma-separated (default resnet50; on the CPU resnet20)")
      ->delimiter(',');
  cmd->add_option("--precisions", o.precisions, "fp32,tf32,fp16,bf16 (fp8: GPT models, dlbench only)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--gpus", o.gpus, "GPU counts, comma-separated")->delimiter(',')->capture_default_str();
  cmd->add_option("--batch-sizes", o.batch_sizes,
                  "batch sizes per GPU, comma-separated; max: the largest that fits, per precision "
                  "(default 256; on the CPU bench's: 128 for resnet20, 16 for the others)")
      ->delimiter(',');
  cmd->add_option("--device", o.device, "auto | cpu | cuda")->capture_default_str();
  cmd->add_option("--steps", o.steps,
                  "timed steps per point (default 60; on the CPU 20, or 10 for ImageNet "
                  "models)");
  cmd->add_option("--warmup-steps", o.warmup_steps, "warm-up steps per point (default 20; on the CPU 2)");
  cmd->add_flag("--retry-failed", o.retry_failed, "also run the points recorded as failed or unavailable");
  cmd->add_option("--point-timeout", o.point_timeout_seconds, "seconds before a point is stopped")
      ->capture_default_str();
  cmd->add_option("--mpirun", o.mpirun, "the MPI launcher")->capture_default_str();
  cmd->add_option("--mpirun-args", o.mpirun_args, "extra launcher arguments, comma-separated")
      ->delimiter(',');
  cmd->add_option("--python", o.python, "the peers' Python interpreter")->capture_default_str();
  cmd->add_option("--peers", o.peers_dir, "the peers/ folder (default: found beside the binary)");
}

void add_grid_commands(CLI::App& app, Commands& commands) {
  dlbench::SweepOptions& sweep_options = commands.sweep;
  dlbench::SweepOptions& compare_options = commands.compare;
  std::vector<std::string>& compare_frameworks = commands.compare_frameworks;
  dlbench::StudyOptions& study_options = commands.study;
  // sweep and study pass --decode to dlbench's points (peers decode their own way).
  constexpr const char* kGridDecodeHelp =
      "auto | cpu | gpu: dlbench's points' --decode (with --bench-args --data,DIR); part of a point's "
      "identity when not auto";
  CLI::App* sweep = app.add_subcommand(
      "sweep", "a grid of bench points, each its own process, appended to a JSON Lines file (resumable)");
  add_grid_flags(sweep, sweep_options, true);
  sweep->add_option("--decode", sweep_options.decode, kGridDecodeHelp)->capture_default_str();
  sweep->add_option("--launcher", sweep_options.launcher, "threads | mpi (mpirun -np GPUS)")
      ->capture_default_str();
  sweep
      ->add_option("--bench-args", sweep_options.bench_args,
                   "extra `dlbench bench` flags for every point, comma-separated (--bucket-mb,0); a "
                   "flag bench refuses stops the sweep at the first point, recording nothing")
      ->delimiter(',');
  sweep
      ->add_option("--algorithm-cache", sweep_options.algorithm_cache,
                   "GPU points: auto (RESULTS.algorithms.json) | none | FILE: the first point's algorithm "
                   "choices are every later one's")
      ->capture_default_str();

  compare_options.launcher = "torchrun";
  CLI::App* compare = app.add_subcommand(
      "compare", "the same grid run by the peers (PyTorch eager/compiled, DDP; JAX), into the same file");
  add_grid_flags(compare, compare_options, true);
  compare->add_option("--frameworks", compare_frameworks, "pytorch, pytorch-compiled, jax")
      ->delimiter(',')
      ->capture_default_str();
  compare->add_option("--launcher", compare_options.launcher, "for several GPUs: torchrun | mpi")
      ->capture_default_str();

  study_options.grid.precisions.clear();  // run_study: all four on a GPU, fp32 (its only one) on the CPU
  CLI::App* study = app.add_subcommand(
      "study", "the whole study: system table, dlbench's sweep, the peers' points and the report");
  add_grid_flags(study, study_options.grid, true);
  study->add_option("--decode", study_options.grid.decode, kGridDecodeHelp)->capture_default_str();
  study
      ->add_option("--frameworks", study_options.frameworks,
                   "peers (default: pytorch, pytorch-compiled, jax)")
      ->delimiter(',');
  study->add_option("-o,--output", study_options.report_dir, "directory for the report")
      ->capture_default_str();
  study
      ->add_option("--bench-args", study_options.grid.bench_args,
                   "extra `dlbench bench` flags for dlbench's points, comma-separated (--bucket-mb,0)")
      ->delimiter(',');
  study
      ->add_option("--algorithm-cache", study_options.grid.algorithm_cache,
                   "dlbench's GPU points: auto (RESULTS.algorithms.json) | none | FILE: the first point's "
                   "algorithm choices are every later one's")
      ->capture_default_str();
}

void add_info_command(CLI::App& app, std::string& json) {
  CLI::App* info =
      app.add_subcommand("info", "the system table: CPU, memory, GPUs and their links, software versions");
  info->add_option("--json", json, "also write it as one JSON object to FILE");
}

// report and trace-summary: results and traces in tables and figures.
void add_study_output_commands(CLI::App& app, Commands& commands) {
  CLI::App* report = app.add_subcommand(
      "report",
      "the study's report from result files: Markdown, a self-contained HTML page, gnuplot figures");
  report->add_option("RESULTS", commands.report_inputs, "result files: JSON Lines or --json objects")
      ->required();
  report->add_option("-o,--output", commands.report_dir, "directory for report.md, report.html and figures/")
      ->capture_default_str();

  CLI::App* trace_summary = app.add_subcommand(
      "trace-summary",
      "a --trace file in numbers: forward, backward, communication beside backward per step");
  trace_summary->add_option("TRACE", commands.trace_path, "a Chrome trace written by --trace")->required();
  trace_summary->add_option(
      "--against", commands.trace_against,
      "a base trace (e.g. one GPU): how much slower each layer ran, beside a collective "
      "or not");
}

void add_data_commands(CLI::App& app, Commands& commands) {
  dlbench::PackOptions& pack_options = commands.pack;
  dlbench::DataBenchOptions& data_bench_options = commands.data_bench;
  dlbench::ExportOptions& export_options = commands.export_images;
  CLI::App* pack =
      app.add_subcommand("pack", "pack an image folder (CLASS/FILE.jpg) into shards for sequential reads");
  pack->add_option("SRC", pack_options.source, "image folder, or ROOT with train/ and val/ ones")->required();
  pack->add_option("DST", pack_options.destination, "new or empty directory for the shard set")->required();
  pack->add_option("--shard-mb", pack_options.shard_mb, "size of one shard file")->capture_default_str();
  pack->add_flag("--strict", pack_options.strict, "stop at the first unreadable file instead of skipping it");

  CLI::App* data_bench =
      app.add_subcommand("data-bench", "the input pipeline alone: decode and augment, no training");
  {
    auto& o = data_bench_options;
    data_bench->add_option("--data", o.data, "an image folder or shard set (or ROOT with train/)")
        ->required();
    data_bench->add_option("--data-threads", o.threads, "decoding threads (0 = all cores but one)")
        ->capture_default_str();
    data_bench->add_option("--batch-size", o.batch_size, "images per batch")->capture_default_str();
    data_bench->add_option("--batches", o.batches, "timed batches")->capture_default_str();
    data_bench
        ->add_option("--gpu-decode-threads", o.gpu_decode_threads,
                     "--decode gpu: threads that decode and augment batches in turn (1-8)")
        ->capture_default_str();
    data_bench->add_option("--warmup-batches", o.warmup_batches, "batches before the timed ones")
        ->capture_default_str();
    data_bench->add_option("--image-size", o.image_size, "side of the crop (default 224)")
        ->check(whole_number_from_one("--image-size"));
    using dlbench::Precision;
    add_choice(*data_bench, "--precision", o.precision,
               {{"fp32", Precision::fp32},
                {"tf32", Precision::tf32},
                {"fp16", Precision::fp16},
                {"bf16", Precision::bf16}},
               "the dtype written: fp32 | tf32 | fp16 | bf16");
    add_choice(*data_bench, "--layout", o.layout,
               {{"nhwc", dlbench::Layout::nhwc}, {"nchw", dlbench::Layout::nchw}}, "nhwc | nchw");
    data_bench->add_flag("!--eval", o.train, "the evaluation transform (resize + centre crop) instead");
    data_bench->add_flag("--strict", o.strict, "stop at the first bad image");
    data_bench->add_flag("--digest", o.digest,
                         "print a CRC-32 of every batch as delivered (two runs of one seed must agree; slows "
                         "the run)");
    add_choice(*data_bench, "--decode", o.decode,
               {{"auto", dlbench::DecodeMode::automatic},
                {"cpu", dlbench::DecodeMode::cpu},
                {"gpu", dlbench::DecodeMode::gpu}},
               "auto | cpu | gpu: where JPEGs are decoded (auto: on the GPU where nvJPEG opens)");
    data_bench->add_option("--seed", o.seed, "seed of the augmentation")->capture_default_str();
    data_bench->add_option("--json", o.json_path, "write the result as one JSON object to FILE");
  }

  CLI::App* export_images = app.add_subcommand(
      "export-images", "write an IDX data set (Fashion-MNIST) as JPEG image folders DST/train and DST/val");
  export_images->add_option("DST", export_options.destination, "new or empty directory")->required();
  export_images->add_option("--data", export_options.data, "fashion-mnist or a directory of IDX files")
      ->capture_default_str();
  export_images->add_option("--quality", export_options.quality, "JPEG quality")->capture_default_str();

  dlbench::TokenizeOptions& t = commands.tokenize;
  CLI::App* tokenize = app.add_subcommand(
      "tokenize", "text files into byte-level token files DIR/train.bin and DIR/val.bin (llm.c's format)");
  tokenize->add_option("FILES", t.inputs, "text files, read in this order as one text")->required();
  tokenize->add_option("-o,--output", t.output_dir, "directory for train.bin and val.bin")->required();
  tokenize
      ->add_option("--val-fraction", t.val_fraction,
                   "the share of the text, in (0, 0.5], that is val: its end by position, over the files "
                   "in order; the rest is train")
      ->capture_default_str();
  tokenize->add_flag("--force", t.force, "replace DIR/train.bin and DIR/val.bin if they exist");
}

// Runs the command the parser found; returns the exit code.
int run_parsed(CLI::App& app, Commands& commands) {
  auto parsed = [&](const char* name) { return app.get_subcommand(name)->parsed(); };
  // The commands that stop at safe points of their own take a signal from the start: one that arrives
  // while they set up is then seen at their first safe point, not an abrupt end.
  if (parsed("sweep") || parsed("compare") || parsed("study") || parsed("pack") || parsed("export-images") ||
      parsed("train"))
    dlbench::defer_stop_to_safe_points();
  if (parsed("report"))
    return guarded([&] { dlbench::run_report(commands.report_inputs, commands.report_dir); });
  if (parsed("trace-summary"))
    return guarded([&] { dlbench::run_trace_summary(commands.trace_path, commands.trace_against); });
  if (parsed("sweep")) return guarded([&] { dlbench::run_sweep(commands.sweep); });
  if (parsed("compare"))
    return guarded([&] { dlbench::run_compare(commands.compare, commands.compare_frameworks); });
  if (parsed("study")) return guarded([&] { dlbench::run_study(commands.study); });
  if (parsed("info")) return guarded([&] { dlbench::run_info(commands.info_json); });
  if (parsed("pack")) return guarded([&] { dlbench::run_pack(commands.pack); });
  if (parsed("data-bench")) return guarded([&] { dlbench::run_data_bench(commands.data_bench); });
  if (parsed("export-images")) return guarded([&] { dlbench::run_export_images(commands.export_images); });
  if (parsed("tokenize")) return guarded([&] { dlbench::run_tokenize(commands.tokenize); });

  if (parsed("comm-bench"))
    return dlbench::parallel::finish_mpi_process(
        guarded([&] { dlbench::parallel::run_comm_bench(commands.comm_bench); }));
  return dlbench::parallel::finish_mpi_process(
      run_command(parsed("train") ? commands.train : commands.bench));
}

}  // namespace

// The CUDA driver multiplexes a process's streams onto CUDA_DEVICE_MAX_CONNECTIONS hardware queues (8
// unless set); work of streams that share a queue runs in the order it was queued. With the step as one
// CUDA graph beside the GPU input pipeline (nvJPEG queues small copies and kernels on ~28 streams of its
// own and waits for them on the host ~240 times a batch), 8 queues put those small pieces behind the
// step's kernels: ResNet-50 fp16 from JPEGs waited 5.1-5.3 ms a step for data and trained at 85.5-86.1% of
// synthetic; with 32 queues (the most there are) it waited 0.36-0.43 ms and trained at 97.9-99.1%, the
// synthetic rate itself the same (bench/results/jpeg-input-pipeline/). Read by the driver when the
// process first uses CUDA, so set here before anything does; a value in the environment is kept.
void set_cuda_driver_defaults() { setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0); }

int main(int argc, char** argv) {
  std::setlocale(LC_NUMERIC, "C");
  set_cuda_driver_defaults();
  // Until a command stops at safe points of its own, a signal ends it at once, its temporaries removed.
  dlbench::install_stop_handler();
  CLI::App app{
      "dlbench: how fast does this machine train a ResNet or a GPT-2? A training engine and benchmark."};
  app.set_version_flag("--version",
                       std::string("dlbench ") + DLBENCH_VERSION + " (" + DLBENCH_GIT_COMMIT + ")");
  app.require_subcommand(1);

  Commands commands;
  add_train_command(app, commands.train);
  add_bench_command(app, commands.bench);
  add_comm_bench_command(app, commands.comm_bench);
  add_info_command(app, commands.info_json);
  add_grid_commands(app, commands);
  add_study_output_commands(app, commands);
  add_data_commands(app, commands);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return report_parse_error(app, argc, argv, e);
  }
  return run_parsed(app, commands);
}
