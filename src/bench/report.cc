#include "bench/report.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "bench/measure.h"
#include "bench/report_figures.h"
#include "bench/report_html.h"
#include "bench/system_info.h"
#include "core/file_io.h"
#include "core/process.h"
#include "core/status.h"

namespace dlbench {

namespace {

std::optional<double> number_at(const nlohmann::json& j, const char* key) {
  if (j.is_object() && j.contains(key) && j[key].is_number()) return j[key].get<double>();
  return std::nullopt;
}

// The numbers of an array field; an entry that is not a number (JSON has no NaN: a diverged loss is
// written as null) is kept as NaN when `keep_positions`, so that the loss of step i stays at i.
std::vector<double> numbers_at(const nlohmann::json& j, const char* key, bool keep_positions) {
  std::vector<double> values;
  if (!j.contains(key) || !j[key].is_array()) return values;
  for (const nlohmann::json& v : j[key]) {
    if (v.is_number()) {
      values.push_back(v.get<double>());
    } else if (keep_positions) {
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

// One result object as a point; the name of the missing field when it is not one.
std::optional<std::string> to_point(const nlohmann::json& r, const std::string& source, ReportPoint& p) {
  for (const char* key : {"model", "precision"})
    if (!r.contains(key) || !r[key].is_string()) return std::string(key);
  if (!number_at(r, "images_per_second")) return std::string("images_per_second");
  p.source = source;
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
  p.step_times_ms = numbers_at(r, "step_times_ms", /*keep_positions=*/false);
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
  p.losses = numbers_at(r, "losses", /*keep_positions=*/true);
  p.peak_memory_bytes = number_at(r, "peak_memory_bytes");
  p.energy_joules_per_image = number_at(r, "energy_joules_per_image");
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
    if (auto missing = to_point(r, source, p)) {
      std::fprintf(stderr, "report: %s line %d: %shas no \"%s\"; skipped\n", file.c_str(), line,
                   *where ? fmt::format("{} ", where).c_str() : "", missing->c_str());
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
      const std::string point =
          fmt::format("{}{} {} {} GPU(s) batch {} ({})", framework == "dlbench" ? "" : framework + " ",
                      text_at(k, "model", "?"), text_at(k, "precision", "?"), text_at(k, "gpus", "0"),
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

std::string gib(double bytes) { return fmt::format("{:.1f}", bytes / double(1 << 30)); }
std::string rate(double v) {
  // Thousands separated, as the study's tables: 12,345
  std::string digits = fmt::format("{:.0f}", v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}
std::string ms(const std::optional<double>& v) { return v ? fmt::format("{:.2f}", *v) : std::string("-"); }

// The point of (framework, model, precision, gpus) with the highest rate: a file may hold repeats (two
// launchers, two runs); the table shows the best and the statistics section lists them all.
using Key = std::tuple<std::string, std::string, std::string, int>;
using Best = std::map<Key, const ReportPoint*>;

Best best_points(const ReportInput& in) {
  Best best;
  for (const ReportPoint& p : in.points) {
    const ReportPoint*& cell = best[{p.framework, p.model, p.precision, p.gpus}];
    if (!cell || cell->images_per_second < p.images_per_second) cell = &p;
  }
  return best;
}

const ReportPoint* find(const Best& best, const std::string& f, const std::string& model,
                        const std::string& p, int gpus) {
  auto it = best.find({f, model, p, gpus});
  return it == best.end() ? nullptr : it->second;
}

// The run a point belongs to: the input file it came from (its source is "file:line"). A file holds the
// points of one sweep, one call of a script, one process: what ran under the same conditions.
std::string run_of(const ReportPoint& p) { return p.source.substr(0, p.source.rfind(':')); }

ReportSection section(const std::string& id, std::string title) {
  ReportSection s;
  s.id = id;
  s.title = std::move(title);
  return s;
}

ReportTable table(std::vector<std::string> columns, std::vector<bool> numeric) {
  ReportTable t;
  t.columns = std::move(columns);
  t.numeric = std::move(numeric);
  return t;
}

ReportSection system_section(const ReportInput& in) {
  ReportSection s = section(report_section_id("system"), "System");
  for (const ReportPoint& p : in.points)
    if (p.system.is_object() && p.framework == "dlbench") {
      s.preformatted = system_table(p.system);
      return s;
    }
  s.paragraphs.push_back("No result carries a system description.");
  return s;
}

ReportSection throughput_section(const std::string& model, const ReportAxes& axes, const Best& best) {
  ReportSection s = section(report_section_id("throughput", model),
                            fmt::format("{}: throughput (images/s, all GPUs together)", model));
  s.paragraphs.push_back(
      "Each cell is the best point of that framework, precision and GPU count among the inputs (all of them "
      "are listed under Per-point statistics); compare cells measured in the same run.");
  ReportTable t = table({"framework", "precision"}, {false, false});
  for (int g : axes.gpu_counts) {
    t.columns.push_back(fmt::format("{} GPU{}", g, g > 1 ? "s" : ""));
    t.numeric.push_back(true);
  }
  for (const std::string& f : axes.frameworks)
    for (const std::string& p : axes.precisions) {
      std::vector<ReportCell> row = {f, p};
      bool any = false;
      for (int g : axes.gpu_counts) {
        const ReportPoint* point = find(best, f, model, p, g);
        any |= point != nullptr;
        row.push_back(point ? rate(point->images_per_second) : "-");
      }
      if (any) t.rows.push_back(std::move(row));
    }
  s.table = std::move(t);
  return s;
}

ReportSection speedup_section(const std::string& model, const ReportAxes& axes, const Best& best) {
  ReportSection s = section(report_section_id("speedup", model),
                            fmt::format("{}: speedup over one GPU and scaling efficiency", model));
  ReportTable t =
      table({"framework", "precision", "GPUs", "speedup", "efficiency"}, {false, false, true, true, true});
  for (const std::string& f : axes.frameworks)
    for (const std::string& p : axes.precisions) {
      const ReportPoint* one = find(best, f, model, p, 1);
      if (!one) continue;
      for (int g : axes.gpu_counts) {
        const ReportPoint* many = g > 1 ? find(best, f, model, p, g) : nullptr;
        if (!many) continue;
        const double speedup = many->images_per_second / one->images_per_second;
        t.rows.push_back({f, p, std::to_string(g), fmt::format("{:.2f}x", speedup),
                          fmt::format("{:.1f}%", 100.0 * speedup / g)});
        // The best points may come from different runs (input files): a speedup across runs is also the
        // difference between the runs' conditions.
        if (run_of(*one) != run_of(*many))
          s.closing.push_back(
              fmt::format("{} {} on {} GPUs: the best points on one GPU and on {} come from "
                          "different runs ({} and {}).",
                          f, p, g, g, std::filesystem::path(run_of(*one)).filename().string(),
                          std::filesystem::path(run_of(*many)).filename().string()));
        // A speedup between runs of different kernels is partly the kernels' difference: say so.
        if (!one->algorithm_digest.empty() && !many->algorithm_digest.empty() &&
            one->algorithm_digest != many->algorithm_digest)
          s.closing.push_back(fmt::format(
              "{} {} on {} GPUs ran other convolution algorithms than on one GPU (algorithm digest {} "
              "against "
              "{}): part of that speedup is the algorithms'. One --algorithm-cache file for the whole "
              "sweep makes every point run the same ones.",
              f, p, g, many->algorithm_digest, one->algorithm_digest));
        // A GPU at its power limit runs heavier work at lower clocks: where the clocks were recorded and
        // the N-GPU run's slowest GPU ran at least 1% below the one-GPU run, that is part of the efficiency.
        if (one->sm_clock_median_mhz && many->sm_clock_median_mhz &&
            *many->sm_clock_median_mhz < 0.99 * *one->sm_clock_median_mhz)
          s.closing.push_back(fmt::format(
              "{} {} on {} GPUs: the slowest GPU's median SM clock was {:.0f} MHz against {:.0f} MHz on one "
              "GPU ({:.1f}% lower{}): part of the efficiency lost is the clocks'.",
              f, p, g, *many->sm_clock_median_mhz, *one->sm_clock_median_mhz,
              100.0 * (1.0 - *many->sm_clock_median_mhz / *one->sm_clock_median_mhz),
              many->power_capped_fraction
                  ? fmt::format("; the power cap held the clocks in {:.0f}% of its samples",
                                100.0 * *many->power_capped_fraction)
                  : std::string()));
      }
    }
  if (t.rows.empty()) {
    s.paragraphs.push_back("No framework ran this model both on one GPU and on more.");
  } else {
    s.table = std::move(t);
  }
  return s;
}

// The best point of (framework, model, precision, gpus) in one run, or null.
const ReportPoint* best_in_run(const ReportInput& in, const std::string& run, const std::string& f,
                               const std::string& model, const std::string& precision, int gpus) {
  const ReportPoint* found = nullptr;
  for (const ReportPoint& p : in.points) {
    if (p.framework != f || p.model != model || p.precision != precision || p.gpus != gpus ||
        run_of(p) != run)
      continue;
    if (!found || found->images_per_second < p.images_per_second) found = &p;
  }
  return found;
}

// Framework f's point at `point`'s model and precision on `gpus` GPUs: its best in `point`'s run (true), or
// its best anywhere (false), or none.
std::pair<const ReportPoint*, bool> same_run_or_best(const ReportInput& in, const Best& best,
                                                     const ReportPoint& point, const std::string& f,
                                                     int gpus) {
  if (const ReportPoint* q = best_in_run(in, run_of(point), f, point.model, point.precision, gpus))
    return {q, true};
  return {find(best, f, point.model, point.precision, gpus), false};
}

// Framework a's and b's points at one model, precision and GPU count, for their ratio: both from the run
// where a did best among the runs that hold both (same_run), else each one's best point; null where either
// has none.
struct PointPair {
  const ReportPoint *a = nullptr, *b = nullptr;
  bool same_run = false;
};

PointPair paired_points(const ReportInput& in, const Best& best, const std::string& a, const std::string& b,
                        const std::string& model, const std::string& precision, int gpus) {
  PointPair pair{find(best, a, model, precision, gpus), find(best, b, model, precision, gpus), false};
  if (!pair.a || !pair.b) return pair;
  for (const ReportPoint& q : in.points) {
    if (q.framework != b || q.model != model || q.precision != precision || q.gpus != gpus) continue;
    const ReportPoint* mine = best_in_run(in, run_of(q), a, model, precision, gpus);
    if (mine && (!pair.same_run || pair.a->images_per_second < mine->images_per_second)) {
      pair = {mine, best_in_run(in, run_of(q), b, model, precision, gpus), true};
    }
  }
  return pair;
}

// dlbench beside each peer (every other framework), point by point: the study's comparison (images/s and
// their ratio, and how each scales), where both ran the same precision on the same GPU count; nothing where
// no such pair exists. A ratio means most between points of one run, so a row takes both points (and the
// one-GPU points its efficiencies divide by) from the run where dlbench did best among the runs that hold
// both; only where no run holds both does it pair the best points of different runs, and says so.
std::optional<ReportSection> peers_section(const std::string& model, const ReportAxes& axes, const Best& best,
                                           const ReportInput& in) {
  ReportSection s =
      section(report_section_id("peers", model), fmt::format("{}: dlbench against its peers", model));
  s.paragraphs.push_back(
      "Each row: dlbench's point and the peer's at one precision and GPU count (images/s, all GPUs "
      "together), their ratio, and each one's scaling efficiency over its own one-GPU point, all from one "
      "input file (one run) where a file holds both (dlbench's best such run); a ratio marked "
      "\"(different runs)\" pairs the best points of different files.");
  ReportTable t = table({"peer", "precision", "GPUs", "dlbench img/s", "peer img/s", "dlbench / peer",
                         "dlbench efficiency", "peer efficiency"},
                        {false, false, true, true, true, true, true, true});
  for (const std::string& f : axes.frameworks) {
    if (f == "dlbench") continue;
    for (const std::string& p : axes.precisions)
      for (int g : axes.gpu_counts) {
        const PointPair pair = paired_points(in, best, "dlbench", f, model, p, g);
        if (!pair.a || !pair.b) continue;
        const ReportPoint &ours = *pair.a, &theirs = *pair.b;
        const std::optional<std::string> run =
            pair.same_run ? std::optional<std::string>(run_of(ours)) : std::nullopt;
        auto one_gpu = [&](const std::string& framework) {
          return run ? best_in_run(in, *run, framework, model, p, 1) : find(best, framework, model, p, 1);
        };
        auto efficiency = [&](const std::string& framework, const ReportPoint& point) {
          const ReportPoint* one = g > 1 ? one_gpu(framework) : nullptr;
          return one ? fmt::format("{:.1f}%", 100.0 * point.images_per_second / (g * one->images_per_second))
                     : std::string("-");
        };
        t.rows.push_back({f, p, std::to_string(g), rate(ours.images_per_second),
                          rate(theirs.images_per_second),
                          fmt::format("{:.2f}x{}", ours.images_per_second / theirs.images_per_second,
                                      run ? "" : " (different runs)"),
                          efficiency("dlbench", ours), efficiency(f, theirs)});
      }
  }
  if (t.rows.empty()) return std::nullopt;
  s.table = std::move(t);
  return s;
}

ReportSection gain_section(const std::string& model, const ReportAxes& axes, const Best& best) {
  ReportSection s =
      section(report_section_id("gain", model), fmt::format("{}: what FP16 and BF16 gain over FP32", model));
  ReportTable t = table({"framework", "GPUs", "fp16 over fp32", "bf16 over fp32"}, {false, true, true, true});
  for (const std::string& f : axes.frameworks)
    for (int g : axes.gpu_counts) {
      const ReportPoint* base = find(best, f, model, "fp32", g);
      if (!base) continue;
      auto gain = [&](const char* p) {
        const ReportPoint* half = find(best, f, model, p, g);
        return half ? fmt::format("{:+.0f}%",
                                  100.0 * (half->images_per_second / base->images_per_second - 1.0))
                    : std::string("-");
      };
      if (find(best, f, model, "fp16", g) || find(best, f, model, "bf16", g))
        t.rows.push_back({f, std::to_string(g), gain("fp16"), gain("bf16")});
    }
  if (t.rows.empty()) {
    s.paragraphs.push_back("No framework ran this model in FP32 and in FP16 or BF16 on the same GPU count.");
  } else {
    s.table = std::move(t);
  }
  return s;
}

// The first cells of every per-point table: which point it is.
// With several GPUs the launcher is named: one process (nccl-threads) and one per GPU (mpi-nccl, DDP) are
// different runs of the same point. So are the extra bench flags a sweep ran a point with.
std::vector<ReportCell> point_cells(const ReportPoint& p) {
  std::vector<std::string> how;
  if (p.gpus > 1 && !p.launcher.empty()) how.push_back(p.launcher);
  if (!p.bench_args.empty()) how.push_back(p.bench_args);
  const std::string who =
      how.empty() ? p.framework : fmt::format("{} ({})", p.framework, fmt::join(how, "; "));
  return {who, p.model, p.precision, std::to_string(p.gpus), std::to_string(p.batch_size)};
}
ReportTable point_table(std::vector<std::string> columns, std::vector<bool> numeric) {
  ReportTable t =
      table({"framework", "model", "precision", "GPUs", "batch/GPU"}, {false, false, false, true, true});
  t.columns.insert(t.columns.end(), columns.begin(), columns.end());
  t.numeric.insert(t.numeric.end(), numeric.begin(), numeric.end());
  return t;
}

ReportSection statistics_section(const std::vector<const ReportPoint*>& sorted) {
  ReportSection s = section(report_section_id("statistics"), "Per-point statistics");
  s.paragraphs.push_back(
      "Step times of each point's timed window; jitter = standard deviation / mean. Points whose jitter "
      "exceeds 5% are flagged: their throughput moved during the window.");
  ReportTable t = point_table({"img/s", "median ms", "mean +- 95% CI ms", "p5 ms", "p95 ms", "jitter", ""},
                              {true, true, true, true, true, true, false});
  for (const ReportPoint* p : sorted) {
    std::vector<ReportCell> row = point_cells(*p);
    const bool flagged = p->jitter && *p->jitter > 0.05;
    row.insert(
        row.end(),
        {rate(p->images_per_second), ms(p->step_median_ms),
         p->step_mean_ms ? fmt::format("{:.2f} +- {}", *p->step_mean_ms, ms(p->step_ci95_ms)) : "-",
         ms(p->step_p5_ms), ms(p->step_p95_ms), p->jitter ? fmt::format("{:.1f}%", 100.0 * *p->jitter) : "-",
         ReportCell(flagged ? "large spread" : "", flagged)});
    t.rows.push_back(std::move(row));
  }
  s.table = std::move(t);
  return s;
}

ReportSection memory_energy_section(const std::vector<const ReportPoint*>& sorted) {
  ReportSection s =
      section(report_section_id("memory-energy"), "Peak memory, energy per image, clocks and start-up");
  ReportTable t =
      point_table({"img/s", "peak memory GiB", "energy J/img", "SM clock MHz", "at power cap", "start-up s"},
                  {true, true, true, true, true, true});
  for (const ReportPoint* p : sorted) {
    if (!p->peak_memory_bytes && !p->energy_joules_per_image && !p->sm_clock_median_mhz &&
        !p->seconds_to_first_timed_step)
      continue;
    std::vector<ReportCell> row = point_cells(*p);
    row.push_back(rate(p->images_per_second));
    row.push_back(p->peak_memory_bytes ? gib(*p->peak_memory_bytes) : "—");
    row.push_back(p->energy_joules_per_image ? fmt::format("{:.3f}", *p->energy_joules_per_image) : "—");
    row.push_back(p->sm_clock_median_mhz ? fmt::format("{:.0f}", *p->sm_clock_median_mhz) : "—");
    row.push_back(p->power_capped_fraction ? fmt::format("{:.0f}%", 100 * *p->power_capped_fraction) : "—");
    row.push_back(p->seconds_to_first_timed_step ? fmt::format("{:.1f}", *p->seconds_to_first_timed_step)
                                                 : "—");
    t.rows.push_back(std::move(row));
  }
  if (t.rows.empty()) {
    s.paragraphs.push_back("No result records its peak memory or energy.");
    return s;
  }
  s.paragraphs.push_back(
      "Peak memory: the most device memory one rank held (GiB = 2^30 bytes). Energy: what the GPUs drew "
      "during the timed window (their energy counters, all GPUs together) per image trained; — where the "
      "result has no such figure (CPU runs, peers that do not read the counters). SM clock: the median "
      "over the window of the slowest GPU's clock, sampled through NVML every 50 ms; at power cap: the share "
      "of samples whose clocks the board's power limit held back. A GPU at its power limit trades clock for "
      "power, so work that draws more (a collective beside the layers) runs at lower clocks. Start-up: from "
      "the process's start to its first timed step — building the network, the algorithm search (once per "
      "shape with an --algorithm-cache file, as a sweep gives its points) and the warm-up steps.");
  s.table = std::move(t);
  return s;
}

ReportSection loss_section(const std::vector<const ReportPoint*>& sorted) {
  ReportSection s = section(report_section_id("loss"), "Training runs: loss");
  s.paragraphs.push_back(
      "The loss of every step of the training runs (steps whose loss was not finite are left out).");
  ReportTable t = point_table({"steps", "first loss", "last loss", "lowest loss"}, {true, true, true, true});
  for (const ReportPoint* p : sorted) {
    std::vector<double> finite;
    for (double l : p->losses)
      if (std::isfinite(l)) finite.push_back(l);
    if (finite.empty()) continue;
    std::vector<ReportCell> row = point_cells(*p);
    row.push_back(std::to_string(p->losses.size()));
    row.push_back(fmt::format("{:.4f}", finite.front()));
    row.push_back(fmt::format("{:.4f}", finite.back()));
    row.push_back(fmt::format("{:.4f}", *std::min_element(finite.begin(), finite.end())));
    t.rows.push_back(std::move(row));
  }
  s.table = std::move(t);
  return s;
}

// Conclusions, each computed from the tables.
ReportSection conclusions_section(const ReportInput& in, const ReportAxes& axes, const Best& best) {
  ReportSection s = section(report_section_id("conclusions"), "Conclusions");
  for (const std::string& model : axes.models) {
    const int most = axes.gpu_counts.back();
    if (most > 1) {
      std::string best_framework;
      double best_efficiency = -1;
      for (const std::string& f : axes.frameworks)
        for (const std::string& p : axes.precisions) {
          const ReportPoint *one = find(best, f, model, p, 1), *many = find(best, f, model, p, most);
          if (!one || !many) continue;
          const double e = many->images_per_second / one->images_per_second / most;
          if (e > best_efficiency) {
            best_efficiency = e;
            best_framework = fmt::format("{} ({})", f, p);
          }
        }
      if (best_efficiency > 0)
        s.items.push_back(fmt::format("{} on {} GPUs: {} scales best, at {:.1f}% efficiency.", model, most,
                                      best_framework, 100.0 * best_efficiency));
    }
    for (const std::string& f : axes.frameworks) {
      const ReportPoint *base = find(best, f, model, "fp32", 1), *half = find(best, f, model, "fp16", 1);
      if (base && half) {
        const double ratio = half->images_per_second / base->images_per_second;
        s.items.push_back(fmt::format("{} {} on one GPU: FP16 trains {:.1f}x as fast as FP32 ({:+.0f}%).", f,
                                      model, ratio, 100.0 * (ratio - 1)));
      }
    }
    // The fastest framework at each precision and GPU count that two or more of them ran.
    for (const std::string& p : axes.precisions)
      for (int g : axes.gpu_counts) {
        std::vector<std::pair<double, std::string>> rates;
        for (const std::string& f : axes.frameworks)
          if (const ReportPoint* point = find(best, f, model, p, g))
            rates.emplace_back(point->images_per_second, f);
        if (rates.size() < 2) continue;
        std::sort(rates.rbegin(), rates.rend());
        // The ratio of the two fastest, from points of one run where one holds both (as the peers' table).
        const PointPair pair = paired_points(in, best, rates[0].second, rates[1].second, model, p, g);
        s.items.push_back(fmt::format("{} {} on {} GPU(s): {} is {:.2f}x as fast as {}{}.", model, p, g,
                                      rates[0].second, pair.a->images_per_second / pair.b->images_per_second,
                                      rates[1].second,
                                      pair.same_run ? "" : " (best points of different runs)"));
      }
  }
  if (s.items.empty()) s.items.push_back("Too few points for a comparison.");
  if (in.skipped_lines > 0)
    s.closing.push_back(
        fmt::format("{} malformed input line(s) were skipped (named on stderr).", in.skipped_lines));
  return s;
}

// A Markdown table cell: a '|' would end the cell.
std::string markdown_cell(const ReportCell& cell) {
  std::string text;
  for (char c : cell.text) {
    if (c == '|') text += '\\';
    text += c;
  }
  return cell.strong && !text.empty() ? fmt::format("**{}**", text) : text;
}

std::string markdown_table(const ReportTable& t) {
  std::string md = "|";
  for (const std::string& c : t.columns) md += fmt::format(" {} |", c);
  md += "\n|";
  for (bool numeric : t.numeric) md += numeric ? " ---: |" : " --- |";
  md += "\n";
  for (const auto& row : t.rows) {
    md += "|";
    for (const ReportCell& cell : row) md += fmt::format(" {} |", markdown_cell(cell));
    md += "\n";
  }
  return md;
}

}  // namespace

ReportInput read_report_input(const std::vector<std::string>& paths) {
  ReportInput in;
  SweepOutcomes sweeps;
  for (const std::string& path : paths) {
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

ReportAxes report_axes(const ReportInput& in) {
  std::set<std::string> frameworks, models, precisions;
  std::set<int> gpu_counts;
  for (const ReportPoint& p : in.points) {
    frameworks.insert(p.framework);
    models.insert(p.model);
    precisions.insert(p.precision);
    gpu_counts.insert(p.gpus);
  }
  ReportAxes axes;
  axes.frameworks.assign(frameworks.begin(), frameworks.end());
  axes.models.assign(models.begin(), models.end());
  axes.gpu_counts.assign(gpu_counts.begin(), gpu_counts.end());
  // Precisions in the order of the study: fp32 first.
  for (const char* p : {"fp32", "tf32", "fp16", "bf16"})
    if (precisions.count(p)) axes.precisions.push_back(p);
  for (const std::string& p : precisions)
    if (std::find(axes.precisions.begin(), axes.precisions.end(), p) == axes.precisions.end())
      axes.precisions.push_back(p);
  return axes;
}

std::vector<const ReportPoint*> report_points_sorted(const ReportInput& in) {
  std::vector<const ReportPoint*> sorted;
  for (const ReportPoint& p : in.points) sorted.push_back(&p);
  std::stable_sort(sorted.begin(), sorted.end(), [](const ReportPoint* a, const ReportPoint* b) {
    return std::tie(a->model, a->framework, a->precision, a->gpus) <
           std::tie(b->model, b->framework, b->precision, b->gpus);
  });
  return sorted;
}

std::string report_point_label(const ReportPoint& p, bool with_model) {
  return fmt::format("{}{} {} {} GPU{}", with_model ? p.model + " " : "", p.framework, p.precision, p.gpus,
                     p.gpus > 1 ? "s" : "");
}

std::string report_section_id(const std::string& kind, const std::string& model) {
  std::string id = model.empty() ? kind : kind + "-" + model;
  for (char& c : id)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '-';
  return id;
}

// The points one framework measured and another, which ran the same model, did not: a peer stopped by a
// time limit leaves no line, and a reader comparing the tables should know what is absent rather than
// infer it from a dash.
std::vector<std::string> unmeasured_points(const ReportAxes& axes, const Best& best) {
  std::vector<std::string> items;
  for (const std::string& model : axes.models) {
    std::set<std::pair<std::string, int>> measured;  // (precision, GPUs) by any framework
    std::set<std::string> ran_model;
    for (const auto& [key, point] : best)
      if (std::get<1>(key) == model) {
        measured.insert({std::get<2>(key), std::get<3>(key)});
        ran_model.insert(std::get<0>(key));
      }
    for (const std::string& f : axes.frameworks) {
      if (!ran_model.count(f)) continue;
      for (const std::string& precision : axes.precisions) {
        std::vector<std::string> gpus;
        for (int g : axes.gpu_counts)
          if (measured.count({precision, g}) && !find(best, f, model, precision, g))
            gpus.push_back(std::to_string(g));
        if (!gpus.empty())
          items.push_back(fmt::format("{} {} {} on {} GPU(s): not measured (another framework was)", f, model,
                                      precision, fmt::join(gpus, ", ")));
      }
    }
  }
  return items;
}

ReportDocument report_document(const ReportInput& in) {
  ReportDocument doc;
  doc.title = "dlbench report";
  const ReportAxes axes = report_axes(in);
  const Best best = best_points(in);
  const std::vector<const ReportPoint*> sorted = report_points_sorted(in);

  doc.sections.push_back(system_section(in));
  for (const std::string& model : axes.models) {
    doc.sections.push_back(throughput_section(model, axes, best));
    doc.sections.push_back(speedup_section(model, axes, best));
    if (std::optional<ReportSection> peers = peers_section(model, axes, best, in))
      doc.sections.push_back(*peers);
    doc.sections.push_back(gain_section(model, axes, best));
  }
  doc.sections.push_back(statistics_section(sorted));
  doc.sections.push_back(memory_energy_section(sorted));
  if (std::any_of(sorted.begin(), sorted.end(), [](const ReportPoint* p) { return !p->losses.empty(); }))
    doc.sections.push_back(loss_section(sorted));
  const std::vector<std::string> unmeasured = unmeasured_points(axes, best);
  if (!in.failed.empty() || in.failed_then_ok > 0 || !unmeasured.empty()) {
    ReportSection failed = section(report_section_id("failed"), "Points that failed or did not run");
    failed.items = in.failed;
    failed.items.insert(failed.items.end(), unmeasured.begin(), unmeasured.end());
    if (in.failed_then_ok > 0)
      failed.closing.push_back(
          fmt::format("{} more point(s) failed once and succeeded when run again; the "
                      "successful run is the one reported.",
                      in.failed_then_ok));
    doc.sections.push_back(std::move(failed));
  }
  doc.sections.push_back(conclusions_section(in, axes, best));
  return doc;
}

std::string report_markdown(const ReportDocument& doc) {
  std::string md = "# " + doc.title + "\n\n";
  for (const ReportSection& s : doc.sections) {
    md += "## " + s.title + "\n\n";
    for (const std::string& p : s.paragraphs) md += p + "\n\n";
    if (!s.preformatted.empty()) {
      md += "```\n" + s.preformatted;
      if (s.preformatted.back() != '\n') md += '\n';
      md += "```\n\n";
    }
    if (s.table) md += markdown_table(*s.table) + "\n";
    for (const std::string& item : s.items) md += "- " + item + "\n";
    if (!s.items.empty()) md += "\n";
    for (const std::string& p : s.closing) md += p + "\n\n";
    for (const ReportFigureRef& f : s.figures)
      md += fmt::format("![{0}](figures/{0}.png)\n\n*{1}*\n\n", f.name, f.title);
  }
  md.pop_back();  // one newline at the end, not a blank line
  return md;
}

std::string report_markdown(const ReportInput& input) { return report_markdown(report_document(input)); }

std::string report_points_jsonl(const ReportInput& in) {
  const Best best = best_points(in);
  const ReportAxes axes = report_axes(in);
  std::string out;
  for (const ReportPoint* p : report_points_sorted(in)) {
    nlohmann::json j = {{"framework", p->framework},
                        {"model", p->model},
                        {"precision", p->precision},
                        {"ranks", p->gpus},
                        {"launcher", p->launcher},
                        {"batch_size", p->batch_size},
                        {"images_per_second", p->images_per_second},
                        {"source", p->source}};
    // Against the framework's one-GPU point of the same run where the run has one, else its best one (one
    // GPU under mpirun is the same run as in one process).
    const ReportPoint* one = same_run_or_best(in, best, *p, p->framework, 1).first;
    j["speedup"] = one ? nlohmann::json(p->images_per_second / one->images_per_second) : nullptr;
    j["scaling_efficiency"] =
        one ? nlohmann::json(p->images_per_second / one->images_per_second / p->gpus) : nullptr;
    j["peak_memory_bytes"] = p->peak_memory_bytes ? nlohmann::json(*p->peak_memory_bytes) : nullptr;
    if (!p->algorithm_digest.empty()) j["algorithm_digest"] = p->algorithm_digest;
    if (!p->bench_args.empty()) j["bench_args"] = p->bench_args;
    j["energy_joules_per_image"] =
        p->energy_joules_per_image ? nlohmann::json(*p->energy_joules_per_image) : nullptr;
    j["sm_clock_median_mhz"] = p->sm_clock_median_mhz ? nlohmann::json(*p->sm_clock_median_mhz) : nullptr;
    j["power_capped_fraction"] =
        p->power_capped_fraction ? nlohmann::json(*p->power_capped_fraction) : nullptr;
    j["seconds_to_first_timed_step"] =
        p->seconds_to_first_timed_step ? nlohmann::json(*p->seconds_to_first_timed_step) : nullptr;
    // The other frameworks at the same model, precision and GPU count — their best point of this run, else
    // their best anywhere (same_run false) — and this point's ratio to each.
    nlohmann::json peers = nlohmann::json::object();
    for (const std::string& f : axes.frameworks) {
      if (f == p->framework) continue;
      const auto [other, same_run] = same_run_or_best(in, best, *p, f, p->gpus);
      if (other)
        peers[f] = {{"images_per_second", other->images_per_second},
                    {"ratio", p->images_per_second / other->images_per_second},
                    {"same_run", same_run}};
    }
    j["peers"] = peers;
    out += j.dump() + "\n";
  }
  return out;
}

void run_report(const std::vector<std::string>& paths, const std::string& out_dir) {
  DLB_REQUIRE(!paths.empty(), "report: give one or more result files");
  const ReportInput input = read_report_input(paths);
  DLB_REQUIRE(!input.points.empty(),
              "report: no result in {} (expected lines of dlbench bench/train --json, "
              "dlbench sweep or bench/*.sh)",
              fmt::join(paths, ", "));
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  DLB_REQUIRE(!ec, "report: cannot create {}: {}", out_dir, ec.message());
  std::printf("report: %zu points%s\n", input.points.size(),
              input.skipped_lines ? fmt::format(" ({} lines skipped)", input.skipped_lines).c_str() : "");

  ReportDocument doc = report_document(input);
  // The figures first: the HTML embeds the SVGs gnuplot drew.
  std::map<std::string, std::string> svg_of;
  std::string first_failure;
  int failures = 0;
  const std::vector<ReportFigure> figures = plan_figures(input);
  const std::optional<std::string> gnuplot = figures.empty() ? std::nullopt : find_program("gnuplot");
  if (!figures.empty() && !gnuplot) {
    std::fprintf(stderr, "report: gnuplot not found (apt-get install gnuplot-nox); figures skipped\n");
  } else if (!figures.empty()) {
    const std::string figures_dir = out_dir + "/figures";
    std::filesystem::create_directories(figures_dir, ec);
    DLB_REQUIRE(!ec, "report: cannot create {}: {}", figures_dir, ec.message());
    for (const ReportFigure& f : figures) {
      try {
        svg_of[f.name] = draw_figure(f, figures_dir, *gnuplot);
      } catch (const UserError& e) {
        if (failures++ == 0) first_failure = e.what();
        continue;
      }
      auto target = std::find_if(doc.sections.begin(), doc.sections.end(),
                                 [&](const ReportSection& s) { return s.id == f.section; });
      DLB_CHECK(target != doc.sections.end(), "figure {} illustrates no section ({})", f.name, f.section);
      target->figures.push_back({f.name, f.title});
      std::printf("report: wrote %s/%s.{dat,gp,svg,png}\n", figures_dir.c_str(), f.name.c_str());
    }
  }
  for (const auto& [name, text] :
       {std::pair{"report.md", report_markdown(doc)}, std::pair{"report.html", report_html(doc, svg_of)},
        std::pair{"points.jsonl", report_points_jsonl(input)}}) {
    const std::string path = out_dir + "/" + name;
    write_file_atomically(path, text);
    std::printf("report: wrote %s\n", path.c_str());
  }
  DLB_REQUIRE(failures == 0, "{}{}; report.md and report.html are written without {}", first_failure,
              failures > 1 ? fmt::format(" (and {} more figures)", failures - 1) : "",
              failures > 1 ? "them" : "it");
}

}  // namespace dlbench
