// `dlbench report RESULTS... -o DIR`: the study's tables and figures from result files.
//
// Input: JSON Lines or JSON files (each read once, however often given) holding result objects of `dlbench
// bench`/`train` (--json), lines of `dlbench sweep`/`compare` (the result under "result"; failed points and
// peers not installed here
// ("status": "unavailable") listed as such), lines of bench/gpu_*.sh (the dlbench and peer results under
// "dlbench_result" and "peer_result"), and the peers' own result objects (with "framework"; a PyTorch run
// with "compiled": true is its own framework, "pytorch (compiled)"). Each becomes one point: framework,
// model, precision, GPUs, batch per GPU, its rate (img/s; a token model's, whose images_per_second counts
// sequences, tok/s: its tokens_per_second), the per-step statistics and, where the result has them, each
// timed step's time, the loss per step (train runs), peak memory, energy per image (per token) and MFU. A
// line that is not JSON, lacks a needed field (a token model's tokens_per_second too) or holds an
// impossible value (a batch of -1, a negative time, 1e308 img/s) is named (file, line, field, value) on
// stderr and skipped; the rest is reported. A CPU run, and a training run, is a framework of its own in the
// tables ("dlbench (CPU)", "dlbench train"): never one cell with a GPU's benchmark. Every table keeps batch
// sizes apart, and a speedup divides by the one-GPU point of the same framework, model, precision and
// batch. Every throughput, speedup and ratio is of the points' rates: a model's sections and figures state
// its unit; the per-point tables, which mix models, state it in the column's heading where every point has
// the same, else in each cell.
//
// The report: the system table; throughput per framework x precision x GPU count; speedup over one GPU and
// scaling efficiency; what FP16 and BF16 gain over FP32; the per-point statistics (median step, mean +- 95%
// CI, p5/p95, jitter, MFU where a point states it), with points whose jitter exceeds 5% flagged; peak memory
// and energy per image (per token); the training runs' losses; the points that failed or did not run; and
// conclusions stated from the numbers.
// The tables are computed once (report_document) and rendered twice:
//   DIR/report.md     Markdown, linking the PNG figures;
//   DIR/report.html   one self-contained page (inline CSS and SVG figures, no script, no external URL);
//   DIR/figures/      NAME.dat and NAME.gp of each figure (report_figures.h), drawn by gnuplot into
//                     NAME.svg and NAME.png: throughput bars per precision, speedup against the ideal
//                     line, the spread of the step times, the loss curves.
// Without gnuplot the two reports are written without figures, and stderr says so once.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dlbench {

// What a point's rate counts: images (the image models), or tokens (the token models, is_gpt_model; their
// results' images_per_second counts sequences, whose length differs from run to run).
enum class RateUnit : uint8_t { images, tokens };
// The unit of a model's points: tokens for a GPT model, else images.
RateUnit rate_unit_of(const std::string& model);
// How the report names a unit: in a column ("img/s", "tok/s"), in a sentence ("images/s", "tokens/s"), and
// one of what it counts, short ("img", "token": "J/img") and spelled out ("image", "token": "energy per
// image", the points.jsonl key "energy_joules_per_image").
struct RateUnitNames {
  const char *column, *spelled, *one_short, *one;
};
const RateUnitNames& rate_unit_names(RateUnit unit);

struct ReportPoint {
  std::string framework = "dlbench", model, precision, launcher, source;  // source: "file:line"
  int gpus = 1;
  int64_t batch_size = 0;  // per GPU
  // Token models: tokens per sequence where the result states it (0 if not). A point at another length
  // than the model's context is another workload: its model is named "gpt2 (seq 256)", so that no table
  // or ratio sets it beside the model at its full context.
  int64_t seq_len = 0;
  // The point's throughput, all GPUs together, in its unit (rate_unit_of its model): images/s, or a token
  // model's tokens/s. Every table, figure, speedup and ratio of the report is of this figure.
  RateUnit unit = RateUnit::images;
  double rate = 0;
  double images_per_second = 0;  // as the result states it: sequences/s for a token model
  std::optional<double> step_median_ms, step_mean_ms, step_ci95_ms, step_p5_ms, step_p95_ms, jitter;
  // Energy per image, or per token for a token model (per `unit`).
  std::optional<double> peak_memory_bytes, energy_joules_per_item;
  std::optional<double> mfu;  // token models: model FLOP utilisation, 0 to 1, where the result states it
  // gpu_clocks: the slowest rank's median SM clock over the window, and the share of samples the power cap
  // held the clocks back (ranks' mean).
  std::optional<double> sm_clock_median_mhz, power_capped_fraction;
  // dlbench: seconds from the process's start to its first timed step (network, algorithm search, warm-up).
  std::optional<double> seconds_to_first_timed_step;
  std::vector<double> step_times_ms;    // each timed step, where the result lists them
  std::vector<double> losses;           // the loss of each step (train runs)
  std::optional<double> test_accuracy;  // train runs: the last evaluation's share of test images right
  bool on_cpu = false;                  // "device": "cpu"; its ranks are processes, not GPUs
  std::string command;                  // dlbench: "bench" or "train" (config.command), "" if not stated
  bool compiled = false;                // a peer run through its compiler (torch.compile)
  std::string algorithm_digest;         // dlbench: the fingerprint of the kernels it chose ("" if not stated)
  // dlbench points of a sweep run with extra bench flags (sweep --bench-args), space-separated: the same
  // point run another way ("--bucket-mb 0 --allreduce-precision compute"); "" for the defaults.
  std::string bench_args;
  nlohmann::json system;  // null when the result has none
};

struct ReportInput {
  std::vector<ReportPoint> points;
  // "resnet50 fp16 2 GPU(s) batch 256 (threads): <error>" for sweep lines that failed, and
  // "pytorch resnet50 ...: not available: <error>" for the points of a peer not installed.
  // A failed point that succeeded when run again (the same sweep point "ok" in any input) is not listed;
  // it is counted here.
  std::vector<std::string> failed;
  int failed_then_ok = 0;
  int skipped_lines = 0;
};

// Reads every file; malformed lines are named on stderr and counted. UserError for an unreadable file.
ReportInput read_report_input(const std::vector<std::string>& paths);

// What every table and figure is laid out by: frameworks and models (sorted), precisions in the study's
// order (fp32, tf32, fp16, bf16, then any other), GPU counts (ascending).
struct ReportAxes {
  std::vector<std::string> frameworks, models, precisions;
  std::vector<int> gpu_counts;
  std::vector<int64_t> batch_sizes;          // ascending
  bool on_cpu = false, on_cpu_only = false;  // some points, every point ran on the CPU
};
ReportAxes report_axes(const ReportInput& input);
// The points in the statistics table's order: model, framework, precision, GPUs, then input order.
std::vector<const ReportPoint*> report_points_sorted(const ReportInput& input);
// "pytorch fp16 2 GPUs" (with the model in front when `with_model`): how tables and figures name a point.
std::string report_point_label(const ReportPoint& p, bool with_model);
// How a column names a count of workers: "2 GPUs"; "2 ranks" / "1 process" where every point ran on the
// CPU; "2 GPUs or ranks" where both did.
std::string report_workers_text(int count, const ReportAxes& axes);
// The anchor of a section: "throughput-resnet50"; figures name the section they illustrate by it.
std::string report_section_id(const std::string& kind, const std::string& model = "");

// The report as data, so that the Markdown and the HTML show the same tables.
struct ReportCell {
  std::string text;
  bool strong = false;  // a flag the reader must not miss (bold)
  ReportCell(std::string t, bool s = false) : text(std::move(t)), strong(s) {}
  ReportCell(const char* t) : text(t) {}
};
struct ReportTable {
  std::vector<std::string> columns;
  std::vector<bool> numeric;  // right-aligned columns
  std::vector<std::vector<ReportCell>> rows;
};
struct ReportFigureRef {
  std::string name;   // figures/NAME.svg and figures/NAME.png
  std::string title;  // the caption
};
struct ReportSection {
  std::string id, title;
  std::vector<std::string> paragraphs;  // before the rest
  std::string preformatted;             // shown as is, in a monospaced block
  std::optional<ReportTable> table;
  std::vector<std::string> items;    // a bulleted list
  std::vector<std::string> closing;  // paragraphs after the list
  std::vector<ReportFigureRef> figures;
};
struct ReportDocument {
  std::string title;
  std::vector<ReportSection> sections;
};

// Every table of the report (no figures yet; run_report adds those drawn). Deterministic.
ReportDocument report_document(const ReportInput& input);
// The Markdown of a document; figures are linked as figures/NAME.png.
std::string report_markdown(const ReportDocument& document);
// report_markdown(report_document(input)): what a golden file pins.
std::string report_markdown(const ReportInput& input);

// One JSON line per point: framework, model, precision, ranks, launcher, batch_size, images_per_second
// (and a token model's tokens_per_second and mfu), speedup and scaling_efficiency (against the framework's
// best one-GPU point), peak memory, energy per image (energy_joules_per_token for a token model), and
// "peers": each other framework's best at the same model, precision and GPU count (its images_per_second,
// and tokens_per_second) with this point's ratio to it. Speedups and ratios are of the points' rates.
// Written as DIR/points.jsonl beside the report.
std::string report_points_jsonl(const ReportInput& input);

// Reads RESULTS and writes DIR/report.md, DIR/report.html, DIR/points.jsonl and DIR/figures/, each file
// atomically, naming what it wrote on stdout. UserError when no point could be read, or (after writing the
// rest) when gnuplot failed on a figure.
void run_report(const std::vector<std::string>& paths, const std::string& out_dir);

}  // namespace dlbench
