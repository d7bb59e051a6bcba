// The parts `dlbench train` and `dlbench bench` share (train/run.h is their entry): the run's set-up in the
// order the work happens, its header lines, and the parts of its result. Internal to src/train.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "backend/tuning/algorithm_cache.h"
#include "bench/clock_sampler.h"
#include "bench/measure.h"
#include "bench/result.h"
#include "core/file_io.h"
#include "core/status.h"
#include "core/timeline.h"
#include "data/batch_prefetcher.h"
#include "data/dataset.h"
#include "data/gpu_image_pipeline.h"
#include "data/token_source.h"
#include "models/resnet.h"
#include "parallel/communicator.h"
#include "parallel/launch.h"
#include "parallel/placement.h"
#include "train/config.h"
#include "train/memory_fit.h"
#include "train/trainer.h"

namespace dlbench::run_detail {

// Seconds since the process started, for the time to the first timed step.
double seconds_since_process_start();

// printf to stdout on rank 0 only (each rank's thread or process knows its rank after set_up).
__attribute__((format(printf, 1, 2))) void say(const char* format, ...);

// 95 -> "1m35s"
std::string format_duration(double seconds);

// What a model's throughput counts in the lines a run prints: images, or a token model's tokens.
struct RateUnit {
  const char* name;   // "img/s", "tokens/s"
  double per_sample;  // 1, or a token model's sequence length
};
RateUnit rate_unit(const Model& model);

// Everything a run needs, set up in the order the work happens.
struct RunSetup {
  std::shared_ptr<tuning::AlgorithmCache> algorithms;  // the launch's, shared by its ranks
  std::unique_ptr<Backend> backend;
  std::unique_ptr<parallel::Communicator> comm;  // destroyed before the backend it uses, after the trainer
  std::unique_ptr<Dataset> train_data;           // image models
  std::unique_ptr<Dataset> test_data;
  std::unique_ptr<TokenSource> train_tokens;  // token models: the training tokens, and the val split
  std::unique_ptr<TokenSource> val_tokens;
  Model model;
  std::unique_ptr<Trainer> trainer;
  MemoryFit memory_fit;
  RunConfig config;                         // as given, with --batch-size max resolved
  std::vector<parallel::RankPlace> places;  // every rank's host, local rank and GPU (system.hosts)
};

// A data set's identity, for checkpoints and the ranks' agreement: a run resumed on other data, or ranks
// reading different copies, would not train the same run. Its size, sample shape and classes, and for data
// sets held in memory (IDX) the checksum of its labels.
std::string data_digest(const Dataset& data);

// The backend, the ranks, the data, the model and the trainer of rank `slot` of `launch`; every check of
// the flags that needs them (files, memory, ranks' agreement) before any work.
RunSetup set_up(const RunConfig& given, parallel::Launch& launch, int slot,
                std::shared_ptr<tuning::AlgorithmCache> algorithms);

// The launch's algorithm cache: held in memory on the CPU and with --algorithm-cache none, else the file
// --algorithm-cache names, by default $XDG_CACHE_HOME/dlbench/algorithms.json (else ~/.cache/dlbench/).
// A default folder that cannot be made is named in one warning line and the cache held in memory.
std::shared_ptr<tuning::AlgorithmCache> open_algorithm_cache(const RunConfig& config);

// The run's header lines: model, device, memory plan, data, optimizer, ranks.
void print_header(const char* command, const RunConfig& config, RunSetup& s, const std::string& length);

// The learning rate the schedule starts from: --lr, times the ranks with --lr-scaling linear.
RunConfig with_scaled_lr(const RunConfig& config, int ranks);

// The result's common part: model, device, batch, ranks, memory, config, system.
RunResult result_skeleton(const RunConfig& config, RunSetup& s);

// A token model's data, for checkpoints and the ranks' agreement: its tokens' count and vocabulary.
std::string token_digest(const TokenSource& tokens);
// What the run trains on, for the ranks' agreement and checkpoints: data_digest or token_digest.
std::string training_data_digest(const RunSetup& s);

// --trace: the timeline of steps trace_first..trace_last of this rank; write() gathers every rank's.
class StepTracer {
 public:
  StepTracer(const RunConfig& config, RunSetup& s) : config_(config), s_(s) {}
  ~StepTracer() {
    if (timeline_) Timeline::set_current(nullptr);
  }
  void before(int64_t step_number) {
    if (config_.output.trace_path.empty() || step_number != config_.output.trace_steps.first) return;
    timeline_ = std::make_unique<Timeline>(*s_.backend, s_.comm->rank());
    Timeline::set_current(timeline_.get());
  }
  void after(int64_t step_number) {
    if (!timeline_ || step_number != config_.output.trace_steps.last) return;
    events_ = timeline_->events();
    Timeline::set_current(nullptr);
    timeline_.reset();
  }
  // Collective: every rank calls it once, at the end of the run.
  void write() {
    if (config_.output.trace_path.empty()) return;
    std::vector<std::string> all = s_.comm->all_gather(events_.dump());
    if (s_.comm->rank() != 0) return;
    nlohmann::json merged = nlohmann::json::array();
    for (const std::string& text : all)
      for (auto& event : nlohmann::json::parse(text)) merged.push_back(std::move(event));
    const StepRange& steps = config_.output.trace_steps;
    DLB_REQUIRE(!merged.empty(), "--trace-steps {}:{}: the run has no such steps", steps.first, steps.last);
    nlohmann::json trace = {{"traceEvents", merged}, {"displayTimeUnit", "ms"}};
    write_file_atomically(config_.output.trace_path, trace.dump() + "\n");
    say("trace of steps %lld-%lld (%zu events) written to %s\n",
        static_cast<long long>(config_.output.trace_steps.first),
        static_cast<long long>(config_.output.trace_steps.last), merged.size(),
        config_.output.trace_path.c_str());
  }

 private:
  const RunConfig& config_;
  RunSetup& s_;
  std::unique_ptr<Timeline> timeline_;
  nlohmann::json events_ = nlohmann::json::array();
};

// Every rank's measured throughput summed (never rank 0's times the ranks), into the result, with the
// step times' distribution; null figures and a line saying why for a window without a timed step, and a
// warning for one whose steps varied as on a busy machine.
void add_throughput(RunResult& result, RunSetup& s, const MeasuredWindow& window);
// A token model's throughput in tokens (tokens_per_second: sequences/s x T), after add_throughput.
void add_token_throughput(RunResult& result, const RunSetup& s);

// Real images are decoded ahead of the loop (data/batch_prefetcher.h), in the network's compute dtype and
// layout where the data set writes it, into page-locked buffers. `indices(n)` is the n-th micro-batch the
// loop will feed. nullptr for data sets that need no decoding.
// nullptr too where the run decodes on the GPU (make_gpu_pipeline).
std::unique_ptr<BatchPrefetcher> make_prefetcher(RunSetup& s, int64_t count,
                                                 BatchPrefetcher::BatchIndices indices);

// `data`'s images decoded on the GPU into the network's input (data/gpu_image_pipeline.h), where the run
// decodes there (--decode gpu, or auto on a GPU with nvJPEG); nullptr otherwise. `indices(n)` as above.
std::unique_ptr<GpuImagePipeline> make_gpu_pipeline(RunSetup& s, const Dataset& data, int64_t count,
                                                    BatchPrefetcher::BatchIndices indices);

// What fed the loop: one of the two pipelines (or neither, for data decoded once in memory), and the
// counts of GPU pipelines that are gone (evaluation's).
struct DataFeed {
  const BatchPrefetcher* prefetcher = nullptr;
  const GpuImagePipeline* gpu = nullptr;
  GpuPipelineStats finished_gpu;  // evaluation's pipelines, summed
};

// The input pipeline's part of a train run's result (`train` must be set): how long the loop waited for
// data, the rate the device would reach without those waits, the bad images skipped, and where the GPU
// pipeline decoded (added to images_decoded_on_cpu). Nothing for data fed without a pipeline. A collective.
void add_data_pipeline(RunResult& result, RunSetup& s, const DataFeed& feed, double wait_seconds,
                       const MeasuredWindow& window);

// The energy every rank's GPU used over the window (NVML's counters), where every rank's driver has it.
// A collective.
std::optional<EnergyResult> window_energy(RunSetup& s, std::optional<double> before,
                                          std::optional<double> after, double images_per_rank,
                                          double window_seconds);

// The GPUs' clocks over the window (ClockSampler), where every rank's driver reads them. A collective.
std::optional<GpuClocksResult> window_clocks(RunSetup& s, const std::optional<ClockSummary>& mine,
                                             std::chrono::milliseconds period);

// The two loops (train_loop.cc, run.cc): rank 0's result, nothing on the other ranks.
std::optional<RunResult> train_rank(const RunConfig& given, parallel::Launch& launch, int slot,
                                    std::shared_ptr<tuning::AlgorithmCache> algorithms);

}  // namespace dlbench::run_detail
