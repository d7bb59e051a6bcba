#include "bench/measure.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dlbench {

namespace {
// Two-sided 95% Student t quantiles for 1..30 degrees of freedom; 1.96 beyond.
double t_quantile_95(int64_t dof) {
  static const double table[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                 2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                 2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  if (dof < 1) return 0;
  if (dof <= 30) return table[dof - 1];
  return 1.96;
}
}  // namespace

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(rank));
  size_t hi = std::min(lo + 1, values.size() - 1);
  double frac = rank - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

Distribution summarize(const std::vector<double>& values) {
  Distribution d;
  d.count = static_cast<int64_t>(values.size());
  if (values.empty()) return d;
  d.median = percentile(values, 50);
  d.p5 = percentile(values, 5);
  d.p95 = percentile(values, 95);
  d.min = *std::min_element(values.begin(), values.end());
  d.max = *std::max_element(values.begin(), values.end());
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  if (values.size() > 1) {
    double sq = 0;
    for (double v : values) sq += (v - d.mean) * (v - d.mean);
    d.stddev = std::sqrt(sq / static_cast<double>(values.size() - 1));
    d.ci95 = t_quantile_95(d.count - 1) * d.stddev / std::sqrt(static_cast<double>(values.size()));
  }
  d.jitter = d.mean > 0 ? d.stddev / d.mean : 0;
  return d;
}

nlohmann::json to_json(const Distribution& d) {
  return {{"count", d.count}, {"median", d.median}, {"mean", d.mean}, {"p5", d.p5},
          {"p95", d.p95},     {"min", d.min},       {"max", d.max},   {"stddev", d.stddev},
          {"ci95", d.ci95},   {"jitter", d.jitter}};
}

std::optional<std::string> busy_machine_note(const Distribution& d) {
  if (d.count < 3 || d.jitter <= kBusyMachineJitter) return std::nullopt;
  return fmt::format("step times varied by {:.0f}% (stddev / mean): the machine may be busy with other work",
                     100 * d.jitter);
}

}  // namespace dlbench
