// The rule that makes a timed search repeatable: of candidates timed in a fixed order (cuDNN's heuristic
// order, say), the first whose time is within the timing noise of the fastest wins, not the fastest. Two
// candidates a few percent apart swap places from one process to the next (the GPU's clocks, the other
// work on the machine); taking the earliest of those within the noise gives every process the same pick
// unless a time moves across the noise margin, which the median of several rounds (cuda_timing.h) makes
// rare. The cost is bounded: the pick is at most kTimingNoise slower than the fastest candidate measured.
#pragma once

#include <cmath>
#include <cstddef>
#include <optional>
#include <span>

namespace dlbench::tuning {

// Above the spread of one candidate's median time between processes, which the rule must absorb
// (bench/gpu_checks.sh's same_algorithms_in_two_processes checks that it does).
inline constexpr double kTimingNoise = 0.02;
// A pick whose two fastest candidates are closer than this is worth naming in the run's result.
inline constexpr double kCloseMargin = 0.05;

struct Pick {
  size_t index = 0;       // the winner's place in the order
  double ms = 0;          // its time
  double fastest_ms = 0;  // the fastest time of all (the winner's, or one within the noise of it)
  double second_ms = 0;   // the second-fastest time (infinity when only one candidate ran)
  bool close() const { return std::isfinite(second_ms) && second_ms < fastest_ms * (1 + kCloseMargin); }
};

// `ms[i]`: candidate i's time, in the fixed order; NaN or infinity where it did not run. Nullopt when none
// ran.
inline std::optional<Pick> pick_within_noise(std::span<const double> ms, double noise = kTimingNoise) {
  Pick p;
  p.fastest_ms = p.second_ms = INFINITY;
  for (double t : ms) {
    if (!std::isfinite(t)) continue;
    if (t < p.fastest_ms) {
      p.second_ms = p.fastest_ms;
      p.fastest_ms = t;
    } else if (t < p.second_ms) {
      p.second_ms = t;
    }
  }
  if (!std::isfinite(p.fastest_ms)) return std::nullopt;
  for (size_t i = 0; i < ms.size(); ++i) {
    if (std::isfinite(ms[i]) && ms[i] <= p.fastest_ms * (1 + noise)) {
      p.index = i;
      p.ms = ms[i];
      return p;
    }
  }
  return std::nullopt;  // not reached: the fastest is within the noise of itself
}

}  // namespace dlbench::tuning
