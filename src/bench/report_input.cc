// Reading the report's inputs: result objects and lines of every kind dlbench and its peers write, each
// checked (a field missing or impossible is named with its file and line, and the point skipped), each
// file read once however many times (or by whatever names) it is given.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "bench/measure.h"
#include "bench/report.h"
#include "bench/result.h"
#include "core/file_paths.h"
#include "core/status.h"
#include "models/gpt.h"

namespace dlbench {

namespace {

std::optional<double> number_at(const nlohmann::json& j, const char* key) {
  if (j.is_object() && j.contains(key) && j[key].is_number()) return j[key].get<double>();
  return std::nullopt;
}

// What numbers_at does with an entry that is not a number (JSON has no NaN: a diverged loss is written
// as null): leaves it out, or keeps it as NaN so that the loss of step i stays at i.
enum class NonNumbers : uint8_t { left_out, kept_as_nan };

// The numbers of an array field.
std::vector<double> numbers_at(const nlohmann::json& j, const char* key, NonNumbers non_numbers) {
  std::vector<double> values;
  if (!j.contains(key) || !j[key].is_array()) return values;
  for (const nlohmann::json& v : j[key]) {
    if (v.is_number()) {
      values.push_back(v.get<double>());
    } else if (non_numbers == NonNumbers::kept_as_nan) {
      values.push_back(NAN);
    }
  }
  return values;
}

// A field of a sweep line as text, whether it was written as a string or a number ("auto" or 256).
std::string text_at(const nlohmann::json& j, const char* key, const std::string& absent) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return absent;
  return j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
}

// Why a result cannot be a point: the field, and what is wrong with it ("has no", "is -1: ...").
struct Rejection {
  std::string field, why;
};

// The fields a point needs, and the numbers no measurement can give (a batch of -1 images, -5 ms, 1e308
// images/s, a rate that is not finite): the first such field and its value, or none.
std::optional<Rejection> impossible_value(const nlohmann::json& r) {
  for (const char* key : {"model", "precision"})
    if (!r.contains(key) || !r[key].is_string()) return Rejection{key, "has no"};
  auto value = [](double v) { return fmt::format("{:g}", v); };
  // The rates a point needs (a token model's images_per_second counts sequences; its rate is its tokens/s),
  // each with a bound far above any machine's (an H200 trains resnet50 at about 3,000 images/s, gpt-mini
  // at some 10^7 tokens/s) and below what a corrupted or invented figure reaches.
  std::vector<std::pair<const char*, double>> rates = {{"images_per_second", 1e9}};
  if (rate_unit_of(r["model"].get<std::string>()) == RateUnit::tokens)
    rates.push_back({"tokens_per_second", 1e12});
  for (const auto& [key, most] : rates) {
    const std::optional<double> rate = number_at(r, key);
    if (!rate) return Rejection{key, "has no"};
    if (!std::isfinite(*rate) || *rate <= 0 || *rate > most)
      return Rejection{key, "is " + value(*rate) + ": not a possible rate"};
  }
  for (const char* key : {"batch_size", "ranks", "world_size"})
    if (const std::optional<double> v = number_at(r, key);
        v && (!(*v >= 1) || *v > 1e9 || *v != std::floor(*v)))
      return Rejection{key, "is " + value(*v) + ": must be a whole number, 1 or more"};
  std::vector<std::pair<std::string, std::optional<double>>> non_negative = {
      {"peak_memory_bytes", number_at(r, "peak_memory_bytes")},
      {"energy_joules_per_image", number_at(r, "energy_joules_per_image")},
      {"energy_joules_per_token", number_at(r, "energy_joules_per_token")},
      {"mfu", number_at(r, "mfu")},
      {"seconds_to_first_timed_step", number_at(r, "seconds_to_first_timed_step")}};
  if (r.contains("step_ms") && r["step_ms"].is_object())
    for (const char* key : {"median", "mean", "ci95", "p5", "p95", "jitter"})
      non_negative.push_back({fmt::format("step_ms.{}", key), number_at(r["step_ms"], key)});
  for (const auto& [key, v] : non_negative)
    if (v && (!std::isfinite(*v) || *v < 0 || *v > 1e15))
      return Rejection{key, "is " + value(*v) + ": not a possible value"};
  for (double t : numbers_at(r, "step_times_ms", NonNumbers::left_out))
    if (!std::isfinite(t) || t < 0 || t > 1e15)
      return Rejection{"step_times_ms", "holds " + value(t) + ": not a possible step time"};
  if (const std::optional<double> a = number_at(r, "test_accuracy"); a && !(*a >= 0 && *a <= 1))
    return Rejection{"test_accuracy", "is " + value(*a) + ": must lie between 0 and 1"};
  return std::nullopt;
}

// What ran the point, as the tables keep it apart: a run on the CPU is not a GPU's, and a training run
// (data loading, evaluation) is not a benchmark of the step; each is a framework of its own in the tables
// ("dlbench (CPU)", "dlbench train"), as a compiled peer is.
void name_the_variant(const nlohmann::json& r, ReportPoint& p) {
  const nlohmann::json config =
      r.contains("config") && r["config"].is_object() ? r["config"] : nlohmann::json();
  std::string device = text_at(r, "device", "");
  if (device.empty()) device = text_at(config, "device", "");
  p.on_cpu = device == "cpu";
  p.command = text_at(config, "command", "");
  if (p.command == "train") p.framework += " train";
  if (p.on_cpu) p.framework += " (CPU)";
}

// A dlbench run's result (bench/result.h) as a point.
void take_run_result(const RunResult& r, ReportPoint& p) {
  p.framework = "dlbench";
  p.model = r.model;
  p.precision = r.precision;
  p.launcher = r.launcher;
  p.gpus = static_cast<int>(r.ranks);
  p.batch_size = r.batch_size;
  p.images_per_second = r.images_per_second.value_or(0);
  if (r.step_ms) {
    p.step_median_ms = r.step_ms->median;
    p.step_mean_ms = r.step_ms->mean;
    p.step_ci95_ms = r.step_ms->ci95;
    p.step_p5_ms = r.step_ms->p5;
    p.step_p95_ms = r.step_ms->p95;
    p.jitter = r.step_ms->jitter;
  }
  p.peak_memory_bytes = static_cast<double>(r.peak_memory_bytes);
  if (r.bench) {
    for (double t : r.bench->step_times_ms)
      if (!std::isnan(t)) p.step_times_ms.push_back(t);
    if (r.bench->energy) p.energy_joules_per_item = r.bench->energy->joules_per_image;
    p.seconds_to_first_timed_step = r.bench->seconds_to_first_timed_step;
    if (r.bench->clocks) {
      p.sm_clock_median_mhz = r.bench->clocks->sm_clock_median_mhz;
      p.power_capped_fraction = r.bench->clocks->power_capped_fraction;
    }
  }
  if (r.train) {
    p.losses = r.train->losses;
    if (r.train->test && !std::isnan(r.train->test->test_accuracy))
      p.test_accuracy = r.train->test->test_accuracy;
  }
  p.system = r.system;
  p.algorithm_digest = r.algorithm_digest;
}

// A peer's result, or a line of another kind that states a point (a summary of runs), as a point.
void take_other_result(const nlohmann::json& r, ReportPoint& p) {
  p.framework = r.value("framework", std::string("dlbench"));
  p.model = r["model"];
  p.precision = r["precision"];
  p.launcher = r.value("launcher", std::string());
  p.gpus = static_cast<int>(number_at(r, "ranks").value_or(number_at(r, "world_size").value_or(1)));
  p.batch_size = static_cast<int64_t>(number_at(r, "batch_size").value_or(0));
  p.images_per_second = *number_at(r, "images_per_second");
  if (r.contains("step_ms")) {
    const auto& d = r["step_ms"];
    p.step_median_ms = number_at(d, "median");
    p.step_mean_ms = number_at(d, "mean");
    p.step_ci95_ms = number_at(d, "ci95");
    p.step_p5_ms = number_at(d, "p5");
    p.step_p95_ms = number_at(d, "p95");
    p.jitter = number_at(d, "jitter");
  }
  p.step_times_ms = numbers_at(r, "step_times_ms", NonNumbers::left_out);
  p.losses = numbers_at(r, "losses", NonNumbers::kept_as_nan);
  p.test_accuracy = number_at(r, "test_accuracy");
  p.peak_memory_bytes = number_at(r, "peak_memory_bytes");
  p.energy_joules_per_item = number_at(r, "energy_joules_per_image");
  p.seconds_to_first_timed_step = number_at(r, "seconds_to_first_timed_step");
  if (r.contains("gpu_clocks") && r["gpu_clocks"].is_object()) {
    p.sm_clock_median_mhz = number_at(r["gpu_clocks"], "sm_clock_median_mhz");
    p.power_capped_fraction = number_at(r["gpu_clocks"], "power_capped_fraction");
  }
  // A compiled peer is another program than the same peer run eagerly: never one cell of the tables.
  p.compiled = r.contains("compiled") && r["compiled"].is_boolean() && r["compiled"].get<bool>();
  if (p.compiled && p.framework != "dlbench") p.framework += " (compiled)";
  p.system = r.contains("system") ? r["system"] : nlohmann::json();
  if (r.contains("algorithm_digest") && r["algorithm_digest"].is_string())
    p.algorithm_digest = r["algorithm_digest"].get<std::string>();
}

// The point's rate in its model's unit: its images/s, or a token model's tokens/s (its images_per_second
// counts sequences), with the energy per image or per token to match and a token model's MFU.
void take_rate(const nlohmann::json& r, ReportPoint& p) {
  p.unit = rate_unit_of(p.model);
  p.rate = p.images_per_second;
  if (p.unit == RateUnit::images) return;
  // dlbench states the length in its config, the peers at the top.
  const std::optional<double> seq_len =
      r.contains("config") ? number_at(r["config"], "seq_len") : std::optional<double>();
  p.seq_len = static_cast<int64_t>(seq_len.value_or(number_at(r, "seq_len").value_or(0)));
  if (p.seq_len > 0 && p.seq_len != gpt_spec(p.model).context)
    p.model = fmt::format("{} (seq {})", p.model, p.seq_len);
  p.rate = *number_at(r, "tokens_per_second");  // impossible_value checked it
  p.mfu = number_at(r, "mfu");
  // The peers state the energy per token; dlbench per sequence (energy_joules_per_image): the same joules
  // per second over the tokens.
  if (const std::optional<double> per_token = number_at(r, "energy_joules_per_token"))
    p.energy_joules_per_item = per_token;
  else if (p.energy_joules_per_item)
    *p.energy_joules_per_item *= p.images_per_second / p.rate;
}

// One result object as a point; why it is not one otherwise.
std::optional<Rejection> to_point(const nlohmann::json& r, const std::string& source, ReportPoint& p) {
  if (std::optional<Rejection> wrong = impossible_value(r)) return wrong;
  p.source = source;
  if (is_run_result(r)) {
    try {
      take_run_result(run_result_from_json(r), p);
    } catch (const ResultFieldError& e) {
      return Rejection{e.field(), e.why()};
    }
  } else {
    take_other_result(r, p);
  }
  take_rate(r, p);
  // Statistics a result does not state (the peers give no confidence interval or jitter) come from its
  // step times, with the same functions dlbench's own results use.
  if (p.step_times_ms.size() >= 2) {
    const Distribution d = summarize(p.step_times_ms);
    auto fill = [](std::optional<double>& field, double value) {
      if (!field) field = value;
    };
    fill(p.step_median_ms, d.median);
    fill(p.step_mean_ms, d.mean);
    fill(p.step_ci95_ms, d.ci95);
    fill(p.step_p5_ms, d.p5);
    fill(p.step_p95_ms, d.p95);
    fill(p.jitter, d.jitter);
  }
  name_the_variant(r, p);
  return std::nullopt;
}

// Sweep points by their key (framework named, as sweep_point_key writes it): the failures, and those that
// succeeded, so that a failure later run again successfully is not reported as a failure.
struct SweepOutcomes {
  std::vector<std::pair<std::string, std::string>> failed;  // key, the failure's line in the report
  std::set<std::string> ok;
};

std::string sweep_key_text(nlohmann::json key) {
  if (!key.contains("framework")) key["framework"] = "dlbench";
  return key.dump();
}

void take(const nlohmann::json& j, const std::string& file, int line, ReportInput& in,
          SweepOutcomes& sweeps) {
  const std::string source = fmt::format("{}:{}", file, line);
  auto add = [&](const nlohmann::json& r, const char* where) {
    ReportPoint p;
    if (const std::optional<Rejection> wrong = to_point(r, source, p)) {
      const std::string what = wrong->why == "has no"
                                   ? fmt::format("has no \"{}\"", wrong->field)
                                   : fmt::format("its \"{}\" {}", wrong->field, wrong->why);
      std::fprintf(stderr, "report: %s line %d: %s%s; skipped\n", file.c_str(), line,
                   *where ? fmt::format("{} ", where).c_str() : "", what.c_str());
      ++in.skipped_lines;
      return;
    }
    in.points.push_back(std::move(p));
  };
  if (j.contains("sweep_point")) {  // a dlbench sweep (or compare) line
    const std::string status = text_at(j, "status", "");
    if (status == "ok" && j.contains("result")) {
      const size_t before = in.points.size();
      add(j["result"], "the result");
      const nlohmann::json& key = j["sweep_point"];
      if (in.points.size() > before && key.is_object() && key.contains("bench_args") &&
          key["bench_args"].is_array()) {
        std::string flags;
        for (const nlohmann::json& flag : key["bench_args"])
          flags += (flags.empty() ? "" : " ") + (flag.is_string() ? flag.get<std::string>() : flag.dump());
        in.points.back().bench_args = flags;
      }
      if (key.is_object()) sweeps.ok.insert(sweep_key_text(key));
    } else {
      const auto& k = j["sweep_point"];
      const std::string framework = text_at(k, "framework", "dlbench");
      const std::string gpus = text_at(k, "gpus", "0");
      const std::string point =
          fmt::format("{}{} {} {} GPU{} batch {} ({})", framework == "dlbench" ? "" : framework + " ",
                      text_at(k, "model", "?"), text_at(k, "precision", "?"), gpus, gpus == "1" ? "" : "s",
                      text_at(k, "batch_size", "0"), text_at(k, "launcher", "?"));
      const std::string error = text_at(j, "error", "no error recorded");
      sweeps.failed.emplace_back(k.is_object() ? sweep_key_text(k) : std::string(),
                                 status == "unavailable" ? fmt::format("{}: not available: {}", point, error)
                                                         : fmt::format("{}: {}", point, error));
    }
  } else if (j.contains("dlbench_result") || j.contains("peer_result")) {  // bench/gpu_*.sh lines
    if (j.contains("dlbench_result") && j["dlbench_result"].is_object())
      add(j["dlbench_result"], "dlbench_result");
    if (j.contains("peer_result") && j["peer_result"].is_object()) add(j["peer_result"], "peer_result");
  } else {
    add(j, "");
  }
}

}  // namespace

RateUnit rate_unit_of(const std::string& model) {
  // A report's model may carry its sequence length: "gpt2 (seq 256)".
  return is_gpt_model(model.substr(0, model.find(' '))) ? RateUnit::tokens : RateUnit::images;
}

const RateUnitNames& rate_unit_names(RateUnit unit) {
  static const RateUnitNames images = {"img/s", "images/s", "img", "image"};
  static const RateUnitNames tokens = {"tok/s", "tokens/s", "token", "token"};
  return unit == RateUnit::tokens ? tokens : images;
}

ReportInput read_report_input(const std::vector<std::string>& paths) {
  ReportInput in;
  SweepOutcomes sweeps;
  // A file given twice (or by two names: a link, "./r.jsonl") is one run: read once, its points once.
  std::set<std::string> read;
  for (const std::string& path : paths) {
    if (!read.insert(resolved_path(path)).second) {
      std::fprintf(stderr, "report: %s is given more than once; read once\n", path.c_str());
      continue;
    }
    std::ifstream file(path);
    DLB_REQUIRE(file.good(), "report: cannot read {}", path);
    std::stringstream whole;
    whole << file.rdbuf();
    const std::string text = whole.str();
    // A whole-file JSON object (a --json result), else JSON Lines.
    nlohmann::json single = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!single.is_discarded() && single.is_object()) {
      take(single, path, 1, in, sweeps);
      continue;
    }
    std::istringstream lines(text);
    std::string line;
    for (int number = 1; std::getline(lines, line); ++number) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        std::fprintf(stderr, "report: %s line %d: not a JSON object; skipped\n", path.c_str(), number);
        ++in.skipped_lines;
        continue;
      }
      take(j, path, number, in, sweeps);
    }
  }
  for (const auto& [key, text] : sweeps.failed) {
    if (!key.empty() && sweeps.ok.count(key)) {
      ++in.failed_then_ok;
    } else {
      in.failed.push_back(text);
    }
  }
  return in;
}

}  // namespace dlbench
