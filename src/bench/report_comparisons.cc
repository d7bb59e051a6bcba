// The report's sections that set points against each other (report_sections.h): how each framework
// scales, dlbench against its peers at one batch and each at its fastest, what FP16 and BF16 gain.
#include <fmt/format.h>

#include <filesystem>

#include "bench/report_sections.h"

namespace dlbench::report_detail {

namespace {

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

}  // namespace

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

}  // namespace dlbench::report_detail
