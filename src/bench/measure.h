// The measuring protocol (docs/PERFORMANCE.md): warm-up steps are run and thrown away; the timed window
// covers the steps after them; throughput = images processed in the window / the window's wall time
// (never a mean of per-step rates); per-step times are kept for their distribution.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace dlbench {

struct Distribution {
  int64_t count = 0;
  double median = 0, mean = 0, p5 = 0, p95 = 0, min = 0, max = 0;
  double stddev = 0;
  double ci95 = 0;    // half-width of the 95% confidence interval of the mean (Student t)
  double jitter = 0;  // stddev / mean
};

// Percentiles by linear interpolation between closest ranks (numpy's default).
double percentile(std::vector<double> values, double p);
Distribution summarize(const std::vector<double>& values);
nlohmann::json to_json(const Distribution& d);

// Above this stddev / mean of the step times a measurement is flagged as taken on a busy machine (a
// steady ResNet-50 run varies by 1-3%; the report flags points past 5%).
inline constexpr double kBusyMachineJitter = 0.25;

// "step times varied by 91% (stddev / mean): the machine may be busy with other work" for a window of at
// least 3 steps whose jitter exceeds kBusyMachineJitter; nullopt for a steady one.
std::optional<std::string> busy_machine_note(const Distribution& d);

class MeasuredWindow {
 public:
  void add_step(double step_ms, int64_t images) {
    step_ms_.push_back(step_ms);
    images_ += images;
  }
  // The window's wall time, measured around the whole window (not the sum of steps).
  void set_wall_seconds(double seconds) { wall_seconds_ = seconds; }
  int64_t images() const { return images_; }
  double wall_seconds() const { return wall_seconds_; }
  double images_per_second() const {
    return wall_seconds_ > 0 ? static_cast<double>(images_) / wall_seconds_ : 0;
  }
  const std::vector<double>& step_ms() const { return step_ms_; }
  Distribution step_distribution() const { return summarize(step_ms_); }

 private:
  std::vector<double> step_ms_;
  int64_t images_ = 0;
  double wall_seconds_ = 0;
};

}  // namespace dlbench
