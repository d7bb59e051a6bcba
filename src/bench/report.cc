#include "bench/report.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "bench/measure.h"
#include "bench/report_sections.h"
#include "bench/system_info.h"
#include "core/status.h"

namespace dlbench {

using namespace report_detail;

namespace {

// A time in milliseconds as the statistics table writes it, "-" where the result does not state it.
std::string ms(const std::optional<double>& v) { return v ? fmt::format("{:.2f}", *v) : std::string("-"); }

// A point's throughput in points.jsonl: images_per_second as its result states it (sequences/s for a token
// model), and a token model's tokens_per_second, its rate.
nlohmann::json rates_json(const ReportPoint& p) {
  nlohmann::json j = {{"images_per_second", p.images_per_second}};
  if (p.unit == RateUnit::tokens) j["tokens_per_second"] = p.rate;
  return j;
}

ReportSection system_section(const ReportInput& in) {
  ReportSection s = section(report_section_id("system"), "System");
  // dlbench's results carry the machine, whatever ran them: "dlbench", "dlbench (CPU)", "dlbench train".
  for (const ReportPoint& p : in.points)
    if (p.system.is_object() && !p.system.empty() && p.framework.rfind("dlbench", 0) == 0) {
      s.preformatted = system_table(p.system);
      return s;
    }
  s.paragraphs.push_back("No result carries a system description.");
  return s;
}

ReportSection throughput_section(const std::string& model, const ReportAxes& axes, const Best& best) {
  ReportSection s = section(
      report_section_id("throughput", model),
      fmt::format("{}: throughput ({}, {} together)", model, rate_unit_names(rate_unit_of(model)).spelled,
                  axes.on_cpu_only ? "all ranks"
                  : axes.on_cpu    ? "all GPUs or ranks"
                                   : "all GPUs"));
  s.paragraphs.push_back(fmt::format(
      "Each cell is the best point of that framework, precision, batch and {} among the inputs "
      "(all of them are listed under Per-point statistics); compare cells measured in the same run.",
      axes.on_cpu_only ? "rank count" : "GPU count"));
  ReportTable t = table({"framework", "precision", "batch/GPU"}, {false, false, true});
  if (axes.on_cpu) t.columns.back() = axes.on_cpu_only ? "batch/rank" : "batch/GPU or rank";
  for (int g : axes.gpu_counts) {
    t.columns.push_back(report_workers_text(g, axes));
    t.numeric.push_back(true);
  }
  for (const std::string& f : axes.frameworks)
    for (const std::string& p : axes.precisions)
      for (int64_t b : axes.batch_sizes) {
        std::vector<ReportCell> row = {f, p, std::to_string(b)};
        bool any = false;
        for (int g : axes.gpu_counts) {
          const ReportPoint* point = find(best, f, model, p, g, b);
          any |= point != nullptr;
          row.push_back(point ? rate_text(point->rate) : "-");
        }
        if (any) t.rows.push_back(std::move(row));
      }
  s.table = std::move(t);
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
// The per-point tables' count of workers: GPUs, ranks where every point ran on the CPU, or both.
ReportTable point_table(const std::vector<const ReportPoint*>& sorted, std::vector<std::string> columns,
                        std::vector<bool> numeric) {
  const bool cpu = std::any_of(sorted.begin(), sorted.end(), [](const ReportPoint* p) { return p->on_cpu; });
  const bool gpu = std::any_of(sorted.begin(), sorted.end(), [](const ReportPoint* p) { return !p->on_cpu; });
  const std::string workers = !cpu ? "GPUs" : gpu ? "GPUs or ranks" : "ranks";
  ReportTable t = table({"framework", "model", "precision", workers, !cpu ? "batch/GPU" : "batch/" + workers},
                        {false, false, false, true, true});
  t.columns.insert(t.columns.end(), columns.begin(), columns.end());
  t.numeric.insert(t.numeric.end(), numeric.begin(), numeric.end());
  return t;
}

// How the per-point tables, which may mix image and token models, state each point's unit: in the column's
// heading where every point has the same one ("img/s", "energy J/img"), else in each cell ("7,000 img/s",
// "48,000 tok/s").
class PointUnits {
 public:
  explicit PointUnits(const std::vector<const ReportPoint*>& points) {
    for (const ReportPoint* p : points) units_.insert(p->unit);
  }
  bool mixed() const { return units_.size() > 1; }
  std::string rate_heading() const { return mixed() ? "throughput" : common().column; }
  std::string rate_cell(const ReportPoint& p) const {
    return mixed() ? fmt::format("{} {}", rate_text(p.rate), rate_unit_names(p.unit).column)
                   : rate_text(p.rate);
  }
  // What energy is per, spelled out: "image", "token", or "image or token".
  std::string energy_per() const { return mixed() ? "image or token" : common().one; }
  std::string energy_heading() const {
    return mixed() ? "energy" : fmt::format("energy J/{}", common().one_short);
  }
  // A token's joules are a thousandth of an image's: three significant digits rather than three decimals.
  std::string energy_cell(const ReportPoint& p) const {
    if (!p.energy_joules_per_item) return "—";
    const std::string joules = p.unit == RateUnit::tokens ? fmt::format("{:.3g}", *p.energy_joules_per_item)
                                                          : fmt::format("{:.3f}", *p.energy_joules_per_item);
    return mixed() ? fmt::format("{} J/{}", joules, rate_unit_names(p.unit).one_short) : joules;
  }

 private:
  const RateUnitNames& common() const {
    return rate_unit_names(units_.empty() ? RateUnit::images : *units_.begin());
  }
  std::set<RateUnit> units_;
};

ReportSection statistics_section(const std::vector<const ReportPoint*>& sorted) {
  ReportSection s = section(report_section_id("statistics"), "Per-point statistics");
  const PointUnits units(sorted);
  const bool mfu = std::any_of(sorted.begin(), sorted.end(), [](const ReportPoint* p) { return p->mfu; });
  s.paragraphs.push_back(fmt::format(
      "Step times of each point's timed window; jitter = standard deviation / mean. Points whose jitter "
      "exceeds 5% are flagged: their throughput moved during the window.{}{}",
      units.mixed() ? " Throughput in img/s for image models, in tok/s (tokens) for token models." : "",
      mfu ? " MFU: model FLOP utilisation, the model FLOPs one GPU ran per second over its stated dense "
            "peak for the precision (token models, where the GPU's peak is known)."
          : ""));
  std::vector<std::string> columns = {
      units.rate_heading(), "median ms", "mean +- 95% CI ms", "p5 ms", "p95 ms", "jitter", ""};
  std::vector<bool> numeric = {true, true, true, true, true, true, false};
  if (mfu) {
    columns.insert(columns.begin() + 1, "MFU");
    numeric.insert(numeric.begin() + 1, true);
  }
  ReportTable t = point_table(sorted, columns, numeric);
  for (const ReportPoint* p : sorted) {
    std::vector<ReportCell> row = point_cells(*p);
    const bool flagged = p->jitter && *p->jitter > 0.05;
    row.push_back(units.rate_cell(*p));
    if (mfu) row.push_back(p->mfu ? fmt::format("{:.1f}%", 100.0 * *p->mfu) : "");
    row.insert(
        row.end(),
        {ms(p->step_median_ms),
         p->step_mean_ms ? fmt::format("{:.2f} +- {}", *p->step_mean_ms, ms(p->step_ci95_ms)) : "-",
         ms(p->step_p5_ms), ms(p->step_p95_ms), p->jitter ? fmt::format("{:.1f}%", 100.0 * *p->jitter) : "-",
         ReportCell(flagged ? "large spread" : "", flagged)});
    t.rows.push_back(std::move(row));
  }
  s.table = std::move(t);
  return s;
}

ReportSection memory_energy_section(const std::vector<const ReportPoint*>& sorted) {
  const PointUnits units(sorted);
  ReportSection s =
      section(report_section_id("memory-energy"),
              fmt::format("Peak memory, energy per {}, clocks and start-up", units.energy_per()));
  ReportTable t = point_table(sorted,
                              {units.rate_heading(), "peak memory", units.energy_heading(), "SM clock MHz",
                               "at power cap", "start-up s"},
                              {true, true, true, true, true, true});
  for (const ReportPoint* p : sorted) {
    if (!p->peak_memory_bytes && !p->energy_joules_per_item && !p->sm_clock_median_mhz &&
        !p->seconds_to_first_timed_step)
      continue;
    std::vector<ReportCell> row = point_cells(*p);
    row.push_back(units.rate_cell(*p));
    row.push_back(p->peak_memory_bytes ? memory_text(*p->peak_memory_bytes) : "—");
    row.push_back(units.energy_cell(*p));
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
  if (std::all_of(sorted.begin(), sorted.end(), [](const ReportPoint* p) { return p->on_cpu; })) {
    s.paragraphs.push_back(
        "Peak memory: the most memory one rank (process) held (MiB = 2^20 bytes, GiB = 2^30). CPU runs "
        "record no energy or clocks (—). Start-up: from the process's start to its first timed step — "
        "building the network and the warm-up steps.");
    s.table = std::move(t);
    return s;
  }
  s.paragraphs.push_back(fmt::format(
      "Peak memory: the most device memory one rank held (MiB = 2^20 bytes, GiB = 2^30). Energy: what the "
      "GPUs drew "
      "during the timed window (their energy counters, all GPUs together) per {} trained; — where the "
      "result has no such figure (CPU runs, peers that do not read the counters). SM clock: the median "
      "over the window of the slowest GPU's clock, sampled through NVML every 50 ms; at power cap: the share "
      "of samples whose clocks the board's power limit held back. A GPU at its power limit trades clock for "
      "power, so work that draws more (a collective beside the layers) runs at lower clocks. Start-up: from "
      "the process's start to its first timed step — building the network, the algorithm search (once per "
      "shape with an --algorithm-cache file, as a sweep gives its points) and the warm-up steps.",
      units.energy_per()));
  s.table = std::move(t);
  return s;
}

ReportSection loss_section(const std::vector<const ReportPoint*>& sorted) {
  ReportSection s = section(report_section_id("loss"), "Training runs: loss and test accuracy");
  s.paragraphs.push_back(
      "The loss of every step of the training runs (steps whose loss was not finite are left out), and "
      "the share of the test images the last evaluation classified right.");
  ReportTable t = point_table(sorted, {"steps", "first loss", "last loss", "lowest loss", "test accuracy"},
                              {true, true, true, true, true});
  for (const ReportPoint* p : sorted) {
    std::vector<double> finite;
    for (double l : p->losses)
      if (std::isfinite(l)) finite.push_back(l);
    if (finite.empty() && !p->test_accuracy) continue;
    auto loss = [&](double v) { return finite.empty() ? std::string("-") : fmt::format("{:.4f}", v); };
    std::vector<ReportCell> row = point_cells(*p);
    row.push_back(std::to_string(p->losses.size()));
    row.push_back(loss(finite.empty() ? 0 : finite.front()));
    row.push_back(loss(finite.empty() ? 0 : finite.back()));
    row.push_back(loss(finite.empty() ? 0 : *std::min_element(finite.begin(), finite.end())));
    row.push_back(p->test_accuracy ? fmt::format("{:.2f}%", 100.0 * *p->test_accuracy) : "-");
    t.rows.push_back(std::move(row));
  }
  s.table = std::move(t);
  return s;
}

// Conclusions, each computed from the tables.
ReportSection conclusions_section(const ReportInput& in, const ReportAxes& axes, const Best& best) {
  ReportSection s = section(report_section_id("conclusions"), "Conclusions");
  for (const std::string& model : axes.models) {
    // Every comparison is at one batch size; named where the model ran at several.
    std::set<int64_t> batches;
    for (const auto& [key, point] : best)
      if (std::get<1>(key) == model) batches.insert(std::get<4>(key));
    auto at_batch = [&](int64_t b) {
      return batches.size() > 1 ? fmt::format(" at batch {}", b) : std::string();
    };
    const int most = axes.gpu_counts.back();
    if (most > 1) {
      std::string best_framework;
      double best_efficiency = -1;
      for (const std::string& f : axes.frameworks)
        for (const std::string& p : axes.precisions)
          for (int64_t b : axes.batch_sizes) {
            const ReportPoint *one = find(best, f, model, p, 1, b), *many = find(best, f, model, p, most, b);
            if (!one || !many) continue;
            const double e = many->rate / one->rate / most;
            if (e > best_efficiency) {
              best_efficiency = e;
              best_framework = fmt::format("{} ({}{})", f, p, at_batch(b));
            }
          }
      if (best_efficiency > 0)
        s.items.push_back(fmt::format("{} on {}: {} scales best, at {:.1f}% efficiency.", model,
                                      report_workers_text(most, axes), best_framework,
                                      100.0 * best_efficiency));
    }
    for (const std::string& f : axes.frameworks)
      for (int64_t b : axes.batch_sizes) {
        const ReportPoint *base = find(best, f, model, "fp32", 1, b),
                          *half = find(best, f, model, "fp16", 1, b);
        if (base && half) {
          const double ratio = half->rate / base->rate;
          s.items.push_back(fmt::format("{} {} on one GPU{}: FP16 trains {:.1f}x as fast as FP32 ({:+.0f}%).",
                                        f, model, at_batch(b), ratio, 100.0 * (ratio - 1)));
        }
      }
    // A best-batch comparison whose two sides were fastest at one batch is also the per-batch line below
    // where those two are the only frameworks at that batch: that line is then left out, not said twice.
    std::set<std::tuple<std::string, int, int64_t, std::string>> said;  // precision, GPUs, batch, peer
    for (const BestBatchPair& pair : best_batch_pairs(model, axes, best)) {
      if (pair.ours->batch_size == pair.theirs->batch_size)
        said.emplace(pair.precision, pair.gpus, pair.ours->batch_size, pair.peer);
      s.items.push_back(
          fmt::format("{} {} on {}, each at its fastest batch: dlbench (batch {}) is {:.2f}x as "
                      "fast as {} (batch {}){}.",
                      model, pair.precision, report_workers_text(pair.gpus, axes), pair.ours->batch_size,
                      pair.ours->rate / pair.theirs->rate, pair.peer, pair.theirs->batch_size,
                      run_of(*pair.ours) == run_of(*pair.theirs) ? "" : " (different runs)"));
    }
    // The fastest framework at each precision, batch and GPU count that two or more of them ran.
    for (const std::string& p : axes.precisions)
      for (int64_t b : axes.batch_sizes)
        for (int g : axes.gpu_counts) {
          std::vector<std::pair<double, std::string>> rates;
          for (const std::string& f : axes.frameworks)
            if (const ReportPoint* point = find(best, f, model, p, g, b)) rates.emplace_back(point->rate, f);
          if (rates.size() < 2) continue;
          if (rates.size() == 2) {
            const std::string& peer = rates[0].second == "dlbench" ? rates[1].second : rates[0].second;
            if (said.count({p, g, b, peer})) continue;
          }
          std::sort(rates.rbegin(), rates.rend());
          // The ratio of the two fastest, from points of one run where one holds both (as the peers' table).
          const PointPair pair = paired_points(in, best, rates[0].second, rates[1].second, model, p, g, b);
          s.items.push_back(fmt::format("{} {} on {}{}: {} is {:.2f}x as fast as {}{}.", model, p,
                                        report_workers_text(g, axes), at_batch(b), rates[0].second,
                                        pair.a->rate / pair.b->rate, rates[1].second,
                                        pair.same_run ? "" : " (best points of different runs)"));
        }
  }
  if (s.items.empty()) s.items.push_back("Too few points for a comparison.");
  if (in.skipped_lines > 0)
    s.closing.push_back(
        fmt::format("{} malformed input line(s) were skipped (named on stderr).", in.skipped_lines));
  return s;
}

}  // namespace

ReportAxes report_axes(const ReportInput& in) {
  std::set<std::string> frameworks, models, precisions;
  std::set<int> gpu_counts;
  std::set<int64_t> batch_sizes;
  ReportAxes axes;
  axes.on_cpu_only = !in.points.empty();
  for (const ReportPoint& p : in.points) {
    frameworks.insert(p.framework);
    models.insert(p.model);
    precisions.insert(p.precision);
    gpu_counts.insert(p.gpus);
    batch_sizes.insert(p.batch_size);
    axes.on_cpu |= p.on_cpu;
    axes.on_cpu_only &= p.on_cpu;
  }
  axes.batch_sizes.assign(batch_sizes.begin(), batch_sizes.end());
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
  const std::string workers = p.on_cpu ? (p.gpus > 1 ? fmt::format("{} ranks", p.gpus) : "1 process")
                                       : fmt::format("{} GPU{}", p.gpus, p.gpus > 1 ? "s" : "");
  return fmt::format("{}{} {} {}", with_model ? p.model + " " : "", p.framework, p.precision, workers);
}

std::string report_workers_text(int count, const ReportAxes& axes) {
  if (axes.on_cpu_only) return count > 1 ? fmt::format("{} ranks", count) : "1 process";
  if (axes.on_cpu) return count > 1 ? fmt::format("{} GPUs or ranks", count) : "1 GPU or process";
  return fmt::format("{} GPU{}", count, count > 1 ? "s" : "");
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
    std::set<std::pair<std::string, int>> measured;  // (precision, GPUs) by any framework, any batch
    std::set<std::tuple<std::string, std::string, int>> measured_by;  // (framework, precision, GPUs)
    std::set<std::string> ran_model;
    for (const auto& [key, point] : best)
      if (std::get<1>(key) == model) {
        measured.insert({std::get<2>(key), std::get<3>(key)});
        measured_by.insert({std::get<0>(key), std::get<2>(key), std::get<3>(key)});
        ran_model.insert(std::get<0>(key));
      }
    for (const std::string& f : axes.frameworks) {
      if (!ran_model.count(f)) continue;
      for (const std::string& precision : axes.precisions) {
        std::vector<std::string> gpus;
        for (int g : axes.gpu_counts)
          if (measured.count({precision, g}) && !measured_by.count({f, precision, g}))
            gpus.push_back(std::to_string(g));
        if (!gpus.empty())
          items.push_back(fmt::format("{} {} {} on {} {}{}: not measured (another framework was)", f, model,
                                      precision, fmt::join(gpus, ", "), axes.on_cpu_only ? "rank" : "GPU",
                                      gpus.size() > 1 || gpus[0] != "1" ? "s" : ""));
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
    if (std::optional<ReportSection> fastest = best_batch_section(model, axes, best))
      doc.sections.push_back(*fastest);
    doc.sections.push_back(gain_section(model, axes, best));
  }
  doc.sections.push_back(statistics_section(sorted));
  doc.sections.push_back(memory_energy_section(sorted));
  if (std::any_of(sorted.begin(), sorted.end(),
                  [](const ReportPoint* p) { return !p->losses.empty() || p->test_accuracy; }))
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

std::string report_markdown(const ReportInput& input) { return report_markdown(report_document(input)); }

std::string report_points_jsonl(const ReportInput& in) {
  const Best best = best_points(in);
  const ReportAxes axes = report_axes(in);
  std::string out;
  for (const ReportPoint* p : report_points_sorted(in)) {
    nlohmann::json j = rates_json(*p);
    j.update({{"framework", p->framework},
              {"model", p->model},
              {"precision", p->precision},
              {"ranks", p->gpus},
              {"launcher", p->launcher},
              {"batch_size", p->batch_size},
              {"source", p->source}});
    if (p->seq_len > 0) j["seq_len"] = p->seq_len;
    // Against the framework's one-GPU point of the same run where the run has one, else its best one (one
    // GPU under mpirun is the same run as in one process).
    const ReportPoint* one = same_run_or_best(in, best, *p, p->framework, 1).first;
    j["speedup"] = one ? nlohmann::json(p->rate / one->rate) : nullptr;
    j["scaling_efficiency"] = one ? nlohmann::json(p->rate / one->rate / p->gpus) : nullptr;
    j["peak_memory_bytes"] = p->peak_memory_bytes ? nlohmann::json(*p->peak_memory_bytes) : nullptr;
    if (!p->algorithm_digest.empty()) j["algorithm_digest"] = p->algorithm_digest;
    if (!p->bench_args.empty()) j["bench_args"] = p->bench_args;
    if (p->mfu) j["mfu"] = *p->mfu;
    j[fmt::format("energy_joules_per_{}", rate_unit_names(p->unit).one)] =
        p->energy_joules_per_item ? nlohmann::json(*p->energy_joules_per_item) : nullptr;
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
      if (other) {
        peers[f] = rates_json(*other);
        peers[f]["ratio"] = p->rate / other->rate;
        peers[f]["same_run"] = same_run;
      }
    }
    j["peers"] = peers;
    out += j.dump() + "\n";
  }
  return out;
}

}  // namespace dlbench
