// Which points the report's tables show, and how they write numbers (report_sections.h).
#include <fmt/format.h>

#include "bench/report_sections.h"

namespace dlbench::report_detail {

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

std::pair<const ReportPoint*, bool> same_run_or_best(const ReportInput& in, const Best& best,
                                                     const ReportPoint& point, const std::string& f,
                                                     int gpus) {
  if (const ReportPoint* q =
          best_in_run(in, run_of(point), f, point.model, point.precision, gpus, point.batch_size))
    return {q, true};
  return {find(best, f, point.model, point.precision, gpus, point.batch_size), false};
}

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

}  // namespace dlbench::report_detail
