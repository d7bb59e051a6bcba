// `dlbench report RESULTS... -o DIR`: the study's tables from result files, as Markdown (report.md).
//
// Input: JSON Lines or JSON files holding result objects of `dlbench bench`/`train` (--json), lines of
// `dlbench sweep` (the result under "result"; failed points listed as such), lines of bench/gpu_*.sh (the
// dlbench and peer results under "dlbench_result" and "peer_result"), and the peers' own result objects
// (with "framework"). Each becomes one point: framework, model, precision, GPUs, batch per GPU, img/s, the
// per-step statistics and peak memory. A line that is not JSON or lacks a needed field is named (file,
// line, field) on stderr and skipped; the rest is reported.
//
// The report: the system table; throughput per framework x precision x GPU count; speedup over one GPU and
// scaling efficiency; what FP16 and BF16 gain over FP32; the per-point statistics (median step, mean +- 95%
// CI, p5/p95, jitter), with points whose jitter exceeds 5% flagged; and conclusions stated from the numbers.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace dlbench {

struct ReportPoint {
  std::string framework = "dlbench", model, precision, launcher, source;  // source: "file:line"
  int gpus = 1;
  int64_t batch_size = 0;  // per GPU
  double images_per_second = 0;
  std::optional<double> step_median_ms, step_mean_ms, step_ci95_ms, step_p5_ms, step_p95_ms, jitter;
  std::optional<double> peak_memory_bytes;
  nlohmann::json system;  // null when the result has none
};

struct ReportInput {
  std::vector<ReportPoint> points;
  std::vector<std::string> failed;  // "resnet50 fp16 8 GPUs: <error>" from sweep lines
  int skipped_lines = 0;
};

// Reads every file; malformed lines are named on stderr and counted. UserError for an unreadable file.
ReportInput read_report_input(const std::vector<std::string>& paths);

// The Markdown report of `input` (deterministic: the same input gives the same text).
std::string report_markdown(const ReportInput& input);

// Reads RESULTS, writes DIR/report.md; UserError when no point could be read.
void run_report(const std::vector<std::string>& paths, const std::string& out_dir);

}  // namespace dlbench
