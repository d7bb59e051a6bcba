// The result of a `dlbench bench` or `dlbench train` run (--json FILE), as one typed object: what the run
// fills in and writes, and what `dlbench report` (and whoever else reads result files) reads back. The
// field names are the JSON's; docs/PERFORMANCE.md says what each figure means.
//
// A field the run always writes but had nothing to measure for is null in the file (std::optional empty
// here): images_per_second without a timed step, the energy without NVML, communication_ms on one rank.
// A field only some runs write (train's evaluations, image data's decode counts) is left out of the file
// when empty. A result of an older or newer dlbench keeps the fields this version does not know in
// `unknown`, and the ones it lacks in `absent`, so that a result read and written again is the same text.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bench/layer_profile.h"
#include "bench/measure.h"
#include "core/status.h"

namespace dlbench {

// A result file whose field has the wrong type or an impossible value: the field ("step_ms.median") and
// what is wrong with it ("is \"fast\": not a number").
class ResultFieldError : public UserError {
 public:
  ResultFieldError(std::string field, std::string why)
      : UserError(fmt::format("\"{}\" {}", field, why)), field_(std::move(field)), why_(std::move(why)) {}
  const std::string& field() const { return field_; }
  const std::string& why() const { return why_; }

 private:
  std::string field_, why_;
};

// NVML's counters over the window, every rank's GPU together.
struct EnergyResult {
  double joules = 0, joules_per_image = 0, average_power_watts = 0;
};

// The GPUs' clocks over the window (bench/clock_sampler.h): the slowest rank's median SM clock, rank 0's
// own figures, and the ranks' mean shares of samples held back by each reason.
struct GpuClocksResult {
  double sm_clock_median_mhz = 0, sm_clock_median_mhz_rank0 = 0, sm_clock_min_mhz_rank0 = 0,
         sm_clock_max_mhz_rank0 = 0, power_mean_watts_rank0 = 0;
  double power_capped_fraction = 0, thermal_slowdown_fraction = 0, hardware_slowdown_fraction = 0;
  int64_t samples_rank0 = 0, period_ms = 0;
};

// The input pipeline of a train run on real images: the waits for data, the rate without them, the bad
// images skipped, and where the GPU pipeline decoded (counts of every rank).
struct DataPipelineResult {
  double data_wait_ms_per_step = 0, compute_images_per_second = 0;
  int64_t data_threads = 0;
  double bad_images_skipped = 0, images_decoded_on_gpu_engines = 0, images_decoded_on_gpu_cuda = 0;
};

// One evaluation of a train run (epochs count from 1).
struct EvaluationResult {
  int64_t epoch = 0, step = 0;
  double test_accuracy = 0;  // NaN (null) where it was not measured
  int64_t test_images = 0;
};

// What `dlbench bench` adds: the protocol's window.
struct BenchFigures {
  int64_t warmup_steps = 0;
  std::vector<double> step_times_ms;  // each timed step, on the device's clock
  double window_seconds = 0;
  std::optional<EnergyResult> energy;     // energy_joules, energy_joules_per_image, average_power_watts
  std::optional<GpuClocksResult> clocks;  // gpu_clocks
  double seconds_to_first_timed_step = 0;
  double flops_per_image = 0;
  std::optional<std::vector<LayerTime>> per_layer;  // --per-layer
};

// A train run's evaluations: the last one's share of test images right (NaN, null, where it was stopped)
// and image count, and each one.
struct TestFigures {
  double test_accuracy = 0;
  int64_t test_images = 0;
  std::vector<EvaluationResult> evaluations;
};

// What `dlbench train` adds: the losses, the data feed and the evaluations.
struct TrainFigures {
  int64_t first_step = 0;      // a resumed run's first step
  double epochs = 0;           // the run's length in epochs (a fraction for a run of --steps)
  std::vector<double> losses;  // each step's; NaN (null) for a step whose loss was not finite
  std::optional<DataPipelineResult> data_pipeline;
  std::optional<double> cpu_seconds_per_1000_images;
  double train_seconds = 0;
  std::optional<TestFigures> test;  // where the run evaluates
};

struct RunResult {
  // What ran, and where (every run).
  std::string model;
  int64_t parameters = 0;
  std::string device;        // "cuda:NVIDIA H200" on a GPU (what results are compared by), "cpu"
  std::string device_index;  // "cuda:0", "cpu"
  std::string backend, precision;
  int64_t batch_size = 0, global_batch_size = 0;  // per device; x devices x micro-batches
  int64_t ranks = 1;
  std::string launcher;  // "single", "nccl-threads", "mpi-nccl", "mpi"
  int64_t threads = 0;
  std::string decode;                           // "cpu", "gpu", or "none" (synthetic and IDX data)
  std::optional<double> images_decoded_on_cpu;  // image data: every rank's images decoded by libjpeg-turbo
  std::optional<double> communication_ms;       // bench with several ranks: one exchange of all gradients
  int64_t peak_memory_bytes = 0;
  std::string algorithm_digest;
  nlohmann::json algorithm_search;       // GPU runs: the algorithm cache and the close choices (tuning/)
  std::optional<int64_t> largest_batch;  // where the device states its free memory
  double loss_scale = 1;
  int64_t skipped_steps = 0;
  std::string date;
  nlohmann::json config = nlohmann::json::object();  // the resolved configuration (config_to_json)
  nlohmann::json system = nlohmann::json::object();  // bench/system_info.h

  // The run's length and outcome.
  int64_t steps = 0;
  double final_loss = 0;  // NaN (null) where no step ran
  bool cuda_graph = false;

  // Throughput (null without a timed step), and why a figure is not a steady measurement.
  std::optional<double> images_per_second, images_per_second_per_device;
  // Token models (written only for them): images_per_second counts sequences, and these tokens; a train
  // run with a validation split its last validation loss (mean nats per token over the split).
  std::optional<double> tokens_per_second, tokens_per_second_per_device, val_loss;
  // Token models: the model's FLOPs per token (Model::flops_per_token), and model FLOP utilisation: the
  // model FLOPs one device runs per second over its stated dense peak for the precision (mfu_peak_tflops;
  // both absent for a GPU the table of bench/gpu_peaks.h does not know, and on the CPU).
  std::optional<double> model_flops_per_token, mfu, mfu_peak_tflops;
  // Token models on a GPU: the rate of the backend's own GEMM on a square 8192 product in the model's
  // dtype (bench/gemm_ceiling.h), and the model FLOPs one device runs per second over it.
  std::optional<double> gemm_ceiling_tflops, mfu_of_gemm_ceiling;
  std::optional<Distribution> step_ms;
  std::optional<std::string> measurement_note;

  // Exactly one of the two (a file of another dlbench may hold neither's fields: both empty).
  std::optional<BenchFigures> bench;
  std::optional<TrainFigures> train;

  // A result read from a file of another version: the fields this version does not write, as read, and
  // the ones it writes that the file lacks (left out again when written).
  nlohmann::json unknown = nlohmann::json::object();
  std::set<std::string> absent;
};

nlohmann::json to_json(const RunResult& result);
// Throws ResultFieldError for a field of the wrong type (a missing field is left at its default, as
// results of older versions lack fields added since).
RunResult run_result_from_json(const nlohmann::json& j);
// Whether `j` is a dlbench run's result (it records its configuration), not a peer's or a summary line.
bool is_run_result(const nlohmann::json& j);

}  // namespace dlbench
