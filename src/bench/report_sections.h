// What the report's sections share, for the files that build them (not for the rest of dlbench):
//   report_points.cc       which points a table shows and how it writes their numbers;
//   report_comparisons.cc  the sections that set points against each other: scaling, dlbench against its
//                          peers (at one batch and each at its fastest), what FP16 and BF16 gain;
//   report.cc              the rest (system, throughput, the per-point tables, conclusions) and the document.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/report.h"

namespace dlbench::report_detail {

// Bytes in the unit that shows them: 42 MiB, not "0.0 GiB" (MiB = 2^20 bytes, GiB = 2^30).
std::string memory_text(double bytes);
// A rate with its thousands separated, as the study's tables: 12,345.
std::string rate_text(double v);

ReportSection section(const std::string& id, std::string title);
ReportTable table(std::vector<std::string> columns, std::vector<bool> numeric);

// The point of (framework, model, precision, gpus, batch) with the highest rate: a file may hold repeats
// (two launchers, two runs); the table shows the best and the statistics section lists them all. The batch
// is part of the key: a speedup or a ratio across batch sizes is the batches' difference, not the GPUs'.
using Key = std::tuple<std::string, std::string, std::string, int, int64_t>;
using Best = std::map<Key, const ReportPoint*>;
Best best_points(const ReportInput& in);
// The best point of (framework f, model, precision p, gpus, batch), or null.
const ReportPoint* find(const Best& best, const std::string& f, const std::string& model,
                        const std::string& p, int gpus, int64_t batch);

// The run a point belongs to: the input file it came from (its source is "file:line"). A file holds the
// points of one sweep, one call of a script, one process: what ran under the same conditions.
std::string run_of(const ReportPoint& p);
// The best point of (framework, model, precision, gpus, batch) in one run, or null.
const ReportPoint* best_in_run(const ReportInput& in, const std::string& run, const std::string& f,
                               const std::string& model, const std::string& precision, int gpus,
                               int64_t batch);
// Framework f's point at `point`'s model, precision and batch on `gpus` GPUs: its best in `point`'s run
// (true), or its best anywhere (false), or none.
std::pair<const ReportPoint*, bool> same_run_or_best(const ReportInput& in, const Best& best,
                                                     const ReportPoint& point, const std::string& f,
                                                     int gpus);
// Framework a's and b's points at one model, precision and GPU count, for their ratio: both from the run
// where a did best among the runs that hold both (same_run), else each one's best point; null where either
// has none.
struct PointPair {
  const ReportPoint *a = nullptr, *b = nullptr;
  bool same_run = false;
};
PointPair paired_points(const ReportInput& in, const Best& best, const std::string& a, const std::string& b,
                        const std::string& model, const std::string& precision, int gpus, int64_t batch);

// Speedup over one GPU and scaling efficiency, per framework, precision and batch.
ReportSection speedup_section(const std::string& model, const ReportAxes& axes, const Best& best);
// dlbench beside each peer (every other framework), point by point: the study's comparison (the rates and
// their ratio, and how each scales), where both ran the same precision on the same GPU count; nothing where
// no such pair exists. A ratio means most between points of one run, so a row takes both points (and the
// one-GPU points its efficiencies divide by) from the run where dlbench did best among the runs that hold
// both; only where no run holds both does it pair the best points of different runs, and says so.
std::optional<ReportSection> peers_section(const std::string& model, const ReportAxes& axes, const Best& best,
                                           const ReportInput& in);
// The pairs the best-batch comparison sets side by side: dlbench's fastest point and a peer's, at one
// precision and GPU count, where the batch each ran fastest at is a question (either ran two or more batch
// sizes, or the two ran different ones); where both ran one and the same batch the peers' table has it.
struct BestBatchPair {
  std::string peer, precision;
  int gpus;
  const ReportPoint *ours, *theirs;
};
std::vector<BestBatchPair> best_batch_pairs(const std::string& model, const ReportAxes& axes,
                                            const Best& best);
// dlbench against each peer with each at the batch it ran fastest at: the question a buyer asks ("how fast
// does each train this model?") where the points span batch sizes, since a framework that fits a larger
// batch in memory, or runs a smaller one better, should be measured at it. The batches and peak memories
// stand beside the rates, so that a ratio bought with memory shows it. Nothing where best_batch_pairs has
// no pair.
std::optional<ReportSection> best_batch_section(const std::string& model, const ReportAxes& axes,
                                                const Best& best);
// What FP16 and BF16 gain over FP32, per framework, batch and GPU count.
ReportSection gain_section(const std::string& model, const ReportAxes& axes, const Best& best);

}  // namespace dlbench::report_detail
