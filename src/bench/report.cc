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
#include "bench/system_info.h"
#include "core/status.h"

namespace dlbench {

namespace {

// Bytes in the unit that shows them: 42 MiB, not "0.0 GiB" (MiB = 2^20 bytes, GiB = 2^30).
std::string memory_text(double bytes) {
  if (bytes >= double(1 << 30)) return fmt::format("{:.1f} GiB", bytes / double(1 << 30));
  if (bytes >= double(1 << 20)) return fmt::format("{:.0f} MiB", bytes / double(1 << 20));
  return fmt::format("{:.0f} KiB", bytes / 1024.0);
}
std::string rate_text(double v) {
  // Thousands separated, as the study's tables: 12,345
  std::string digits = fmt::format("{:.0f}", v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}
std::string ms(const std::optional<double>& v) { return v ? fmt::format("{:.2f}", *v) : std::string("-"); }

// The point of (framework, model, precision, gpus, batch) with the highest rate: a file may hold repeats
// (two launchers, two runs); the table shows the best and the statistics section lists them all. The batch
// is part of the key: a speedup or a ratio across batch sizes is the batches' difference, not the GPUs'.
using Key = std::tuple<std::string, std::string, std::string, int, int64_t>;
using Best = std::map<Key, const ReportPoint*>;

Best best_points(const ReportInput& in) {
  Best best;
  for (const ReportPoint& p : in.points) {
    const ReportPoint*& cell = best[{p.framework, p.model, p.precision, p.gpus, p.batch_size}];
    if (!cell || cell->rate < p.rate) cell = &p;
  }
  return best;
}

const ReportPoint* find(const Best& best, const std::string& f, const std::string& model,
                        const std::string& p, int gpus, int64_t batch) {
  auto it = best.find({f, model, p, gpus, batch});
  return it == best.end() ? nullptr : it->second;
}

// The run a point belongs to: the input file it came from (its source is "file:line"). A file holds the
// points of one sweep, one call of a script, one process: what ran under the same conditions.
std::string run_of(const ReportPoint& p) { return p.source.substr(0, p.source.rfind(':')); }

// A point's throughput in points.jsonl: images_per_second as its result states it (sequences/s for a token
// model), and a token model's tokens_per_second, its rate.
nlohmann::json rates_json(const ReportPoint& p) {
  nlohmann::json j = {{"images_per_second", p.images_per_second}};
  if (p.unit == RateUnit::tokens) j["tokens_per_second"] = p.rate;
  return j;
}

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

ReportSection speedup_section(const std::string& model, const ReportAxes& axes, const Best& best) {
  ReportSection s = section(report_section_id("speedup", model),
                            fmt::format("{}: speedup over {} and scaling efficiency", model,
                                        axes.on_cpu_only ? "one process" : "one GPU"));
  ReportTable t = table({"framework", "precision", "batch/GPU", "GPUs", "speedup", "efficiency"},
                        {false, false, true, true, true, true});
  for (const std::string& f : axes.frameworks)
    for (const std::string& p : axes.precisions)
      for (int64_t b : axes.batch_sizes) {
        const ReportPoint* one = find(best, f, model, p, 1, b);
        if (!one) continue;
        for (int g : axes.gpu_counts) {
          const ReportPoint* many = g > 1 ? find(best, f, model, p, g, b) : nullptr;
          if (!many) continue;
          const double speedup = many->rate / one->rate;
          t.rows.push_back({f, p, std::to_string(b), std::to_string(g), fmt::format("{:.2f}x", speedup),
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
          // the N-GPU run's slowest GPU ran at least 1% below the one-GPU run, that is part of the
          // efficiency.
          if (one->sm_clock_median_mhz && many->sm_clock_median_mhz &&
              *many->sm_clock_median_mhz < 0.99 * *one->sm_clock_median_mhz)
            s.closing.push_back(
                fmt::format("{} {} on {} GPUs: the slowest GPU's median SM clock was {:.0f} MHz against "
                            "{:.0f} MHz on one "
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
    s.paragraphs.push_back(axes.on_cpu_only ? "No framework ran this model both in one process and in more."
                                            : "No framework ran this model both on one GPU and on more.");
  } else {
    s.table = std::move(t);
  }
  return s;
}

// The best point of (framework, model, precision, gpus, batch) in one run, or null.
const ReportPoint* best_in_run(const ReportInput& in, const std::string& run, const std::string& f,
                               const std::string& model, const std::string& precision, int gpus,
                               int64_t batch) {
  const ReportPoint* found = nullptr;
  for (const ReportPoint& p : in.points) {
    if (p.framework != f || p.model != model || p.precision != precision || p.gpus != gpus ||
        p.batch_size != batch || run_of(p) != run)
      continue;
    if (!found || found->rate < p.rate) found = &p;
  }
  return found;
}

// Framework f's point at `point`'s model, precision and batch on `gpus` GPUs: its best in `point`'s run
// (true), or its best anywhere (false), or none.
std::pair<const ReportPoint*, bool> same_run_or_best(const ReportInput& in, const Best& best,
                                                     const ReportPoint& point, const std::string& f,
                                                     int gpus) {
  if (const ReportPoint* q =
          best_in_run(in, run_of(point), f, point.model, point.precision, gpus, point.batch_size))
    return {q, true};
  return {find(best, f, point.model, point.precision, gpus, point.batch_size), false};
}

// Framework a's and b's points at one model, precision and GPU count, for their ratio: both from the run
// where a did best among the runs that hold both (same_run), else each one's best point; null where either
// has none.
struct PointPair {
  const ReportPoint *a = nullptr, *b = nullptr;
  bool same_run = false;
};

PointPair paired_points(const ReportInput& in, const Best& best, const std::string& a, const std::string& b,
                        const std::string& model, const std::string& precision, int gpus, int64_t batch) {
  PointPair pair{find(best, a, model, precision, gpus, batch), find(best, b, model, precision, gpus, batch),
                 false};
  if (!pair.a || !pair.b) return pair;
  for (const ReportPoint& q : in.points) {
    if (q.framework != b || q.model != model || q.precision != precision || q.gpus != gpus ||
        q.batch_size != batch)
      continue;
    const ReportPoint* mine = best_in_run(in, run_of(q), a, model, precision, gpus, batch);
    if (mine && (!pair.same_run || pair.a->rate < mine->rate)) {
      pair = {mine, best_in_run(in, run_of(q), b, model, precision, gpus, batch), true};
    }
  }
  return pair;
}

// dlbench beside each peer (every other framework), point by point: the study's comparison (the rates and
// their ratio, and how each scales), where both ran the same precision on the same GPU count; nothing where
// no such pair exists. A ratio means most between points of one run, so a row takes both points (and the
// one-GPU points its efficiencies divide by) from the run where dlbench did best among the runs that hold
// both; only where no run holds both does it pair the best points of different runs, and says so.
std::optional<ReportSection> peers_section(const std::string& model, const ReportAxes& axes, const Best& best,
                                           const ReportInput& in) {
  ReportSection s =
      section(report_section_id("peers", model), fmt::format("{}: dlbench against its peers", model));
  const RateUnitNames& unit = rate_unit_names(rate_unit_of(model));
  s.paragraphs.push_back(fmt::format(
      "Each row: dlbench's point and the peer's at one precision and GPU count ({}, all GPUs "
      "together), their ratio, and each one's scaling efficiency over its own one-GPU point, all from one "
      "input file (one run) where a file holds both (dlbench's best such run); a ratio marked "
      "\"(different runs)\" pairs the best points of different files.",
      unit.spelled));
  ReportTable t =
      table({"peer", "precision", "batch/GPU", "GPUs", fmt::format("dlbench {}", unit.column),
             fmt::format("peer {}", unit.column), "dlbench / peer", "dlbench efficiency", "peer efficiency"},
            {false, false, true, true, true, true, true, true, true});
  for (const std::string& f : axes.frameworks) {
    // dlbench's other variants (its CPU and training runs) are not its peers; a peer's CPU run is set
    // beside dlbench's CPU run.
    if (f.rfind("dlbench", 0) == 0) continue;
    const std::string cpu = " (CPU)";
    const bool on_cpu = f.size() > cpu.size() && f.compare(f.size() - cpu.size(), cpu.size(), cpu) == 0;
    const std::string dlbench = on_cpu ? "dlbench" + cpu : "dlbench";
    for (const std::string& p : axes.precisions)
      for (int64_t b : axes.batch_sizes)
        for (int g : axes.gpu_counts) {
          const PointPair pair = paired_points(in, best, dlbench, f, model, p, g, b);
          if (!pair.a || !pair.b) continue;
          const ReportPoint &ours = *pair.a, &theirs = *pair.b;
          const std::optional<std::string> run =
              pair.same_run ? std::optional<std::string>(run_of(ours)) : std::nullopt;
          auto one_gpu = [&](const std::string& framework) {
            return run ? best_in_run(in, *run, framework, model, p, 1, b)
                       : find(best, framework, model, p, 1, b);
          };
          auto efficiency = [&](const std::string& framework, const ReportPoint& point) {
            const ReportPoint* one = g > 1 ? one_gpu(framework) : nullptr;
            return one ? fmt::format("{:.1f}%", 100.0 * point.rate / (g * one->rate)) : std::string("-");
          };
          t.rows.push_back({f, p, std::to_string(b), std::to_string(g), rate_text(ours.rate),
                            rate_text(theirs.rate),
                            fmt::format("{:.2f}x{}", ours.rate / theirs.rate, run ? "" : " (different runs)"),
                            efficiency(dlbench, ours), efficiency(f, theirs)});
        }
  }
  if (t.rows.empty()) return std::nullopt;
  s.table = std::move(t);
  return s;
}

// A framework's fastest point of a model at one precision and GPU count, over every batch it ran, or null.
const ReportPoint* fastest_batch(const Best& best, const ReportAxes& axes, const std::string& f,
                                 const std::string& model, const std::string& p, int gpus) {
  const ReportPoint* fastest = nullptr;
  for (int64_t b : axes.batch_sizes)
    if (const ReportPoint* point = find(best, f, model, p, gpus, b);
        point && (!fastest || point->rate > fastest->rate))
      fastest = point;
  return fastest;
}

// How many batch sizes framework f ran the model at, at one precision and GPU count.
int batches_run(const Best& best, const ReportAxes& axes, const std::string& f, const std::string& model,
                const std::string& p, int gpus) {
  int count = 0;
  for (int64_t b : axes.batch_sizes) count += find(best, f, model, p, gpus, b) != nullptr;
  return count;
}

// The pairs the best-batch comparison sets side by side: dlbench's fastest point and a peer's, at one
// precision and GPU count, where the batch each ran fastest at is a question (either ran two or more batch
// sizes, or the two ran different ones); where both ran one and the same batch the peers' table has it.
struct BestBatchPair {
  std::string peer, precision;
  int gpus;
  const ReportPoint *ours, *theirs;
};
std::vector<BestBatchPair> best_batch_pairs(const std::string& model, const ReportAxes& axes,
                                            const Best& best) {
  std::vector<BestBatchPair> pairs;
  for (const std::string& f : axes.frameworks) {
    if (f.rfind("dlbench", 0) == 0) continue;  // dlbench's CPU and training runs are not its peers
    for (const std::string& p : axes.precisions)
      for (int g : axes.gpu_counts) {
        const ReportPoint *ours = fastest_batch(best, axes, "dlbench", model, p, g),
                          *theirs = fastest_batch(best, axes, f, model, p, g);
        if (!ours || !theirs || ours->on_cpu != theirs->on_cpu) continue;
        const bool one_batch_each = batches_run(best, axes, "dlbench", model, p, g) == 1 &&
                                    batches_run(best, axes, f, model, p, g) == 1;
        if (one_batch_each && ours->batch_size == theirs->batch_size) continue;
        pairs.push_back({f, p, g, ours, theirs});
      }
  }
  return pairs;
}

// dlbench against each peer with each at the batch it ran fastest at: the question a buyer asks ("how fast
// does each train this model?") where the points span batch sizes, since a framework that fits a larger
// batch in memory, or runs a smaller one better, should be measured at it. The batches and peak memories
// stand beside the rates, so that a ratio bought with memory shows it.
std::optional<ReportSection> best_batch_section(const std::string& model, const ReportAxes& axes,
                                                const Best& best) {
  const std::vector<BestBatchPair> pairs = best_batch_pairs(model, axes, best);
  if (pairs.empty()) return std::nullopt;
  ReportSection s = section(report_section_id("best-batch", model),
                            fmt::format("{}: dlbench against its peers, each at its fastest batch", model));
  const RateUnitNames& unit = rate_unit_names(rate_unit_of(model));
  s.paragraphs.push_back(fmt::format(
      "Each row: dlbench's fastest point and the peer's over every batch size either ran, at one precision "
      "and GPU count ({}, all GPUs together), and their ratio; \"(different runs)\" where the two points "
      "come from different input files.",
      unit.spelled));
  ReportTable t = table({"peer", "precision", "GPUs", "dlbench batch/GPU",
                         fmt::format("dlbench {}", unit.column), "dlbench memory", "peer batch/GPU",
                         fmt::format("peer {}", unit.column), "peer memory", "dlbench / peer"},
                        {false, false, true, true, true, true, true, true, true, true});
  auto memory = [](const ReportPoint& p) {
    return p.peak_memory_bytes ? memory_text(*p.peak_memory_bytes) : std::string("-");
  };
  for (const BestBatchPair& pair : pairs) {
    const bool same_run = run_of(*pair.ours) == run_of(*pair.theirs);
    t.rows.push_back(
        {pair.peer, pair.precision, std::to_string(pair.gpus), std::to_string(pair.ours->batch_size),
         rate_text(pair.ours->rate), memory(*pair.ours), std::to_string(pair.theirs->batch_size),
         rate_text(pair.theirs->rate), memory(*pair.theirs),
         fmt::format("{:.2f}x{}", pair.ours->rate / pair.theirs->rate, same_run ? "" : " (different runs)")});
  }
  s.table = std::move(t);
  return s;
}

ReportSection gain_section(const std::string& model, const ReportAxes& axes, const Best& best) {
  ReportSection s =
      section(report_section_id("gain", model), fmt::format("{}: what FP16 and BF16 gain over FP32", model));
  ReportTable t = table({"framework", "batch/GPU", "GPUs", "fp16 over fp32", "bf16 over fp32"},
                        {false, true, true, true, true});
  for (const std::string& f : axes.frameworks)
    for (int64_t b : axes.batch_sizes)
      for (int g : axes.gpu_counts) {
        const ReportPoint* base = find(best, f, model, "fp32", g, b);
        if (!base) continue;
        auto gain = [&](const char* p) {
          const ReportPoint* half = find(best, f, model, p, g, b);
          return half ? fmt::format("{:+.0f}%", 100.0 * (half->rate / base->rate - 1.0)) : std::string("-");
        };
        if (find(best, f, model, "fp16", g, b) || find(best, f, model, "bf16", g, b))
          t.rows.push_back({f, std::to_string(b), std::to_string(g), gain("fp16"), gain("bf16")});
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
    for (const BestBatchPair& pair : best_batch_pairs(model, axes, best))
      s.items.push_back(
          fmt::format("{} {} on {}, each at its fastest batch: dlbench (batch {}) is {:.2f}x as "
                      "fast as {} (batch {}){}.",
                      model, pair.precision, report_workers_text(pair.gpus, axes), pair.ours->batch_size,
                      pair.ours->rate / pair.theirs->rate, pair.peer, pair.theirs->batch_size,
                      run_of(*pair.ours) == run_of(*pair.theirs) ? "" : " (different runs)"));
    // The fastest framework at each precision, batch and GPU count that two or more of them ran.
    for (const std::string& p : axes.precisions)
      for (int64_t b : axes.batch_sizes)
        for (int g : axes.gpu_counts) {
          std::vector<std::pair<double, std::string>> rates;
          for (const std::string& f : axes.frameworks)
            if (const ReportPoint* point = find(best, f, model, p, g, b)) rates.emplace_back(point->rate, f);
          if (rates.size() < 2) continue;
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
