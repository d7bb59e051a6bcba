// The rule that makes a timed search repeatable: of candidates timed in a fixed order (cuDNN's heuristic
// order, say), the first whose time is within the timing noise of the fastest wins, not the fastest. Two
// candidates a few percent apart swap places from one process to the next (the GPU's clocks, the other
// work on the machine); taking the earliest of those within the noise gives every process the same pick
// unless a time moves across the noise margin. Times near that margin's edge are therefore measured again
// before the rule applies (ambiguous_contenders: more rounds, the contenders interleaved round by round,
// cuda_timing.h), which makes such a move rare. The cost is bounded: the pick is at most kTimingNoise
// slower than the fastest candidate measured.
#pragma once

#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

namespace dlbench::tuning {

// Above the spread of one candidate's time, relative to the fastest, between processes, which the rule
// must absorb (bench/gpu_checks.sh's same_algorithms_in_two_processes checks that it does). Eight fresh
// ResNet-50 fp16 processes on an H200 (bench/results/algorithm-search/2026-12-03-noise-and-margin): a
// candidate's ratio to its search's fastest moved by 0.4-0.7% (median) and up to 7.9% between them.
// Their searches replayed (bench/pick_replay.py): margins of 2-5.5% gave 13 to 27 of the 28 pairs of
// processes some other pick, 6-8% none, 9% a dearer one (2.4% over the fastest on the convolutions'
// time against 0.5%); the searches of three processes timed with shorter rounds agreed at 7% alone.
inline constexpr double kTimingNoise = 0.07;
// Within this of the margin's edge (a candidate kTimingNoise +- kEdgeBand slower than the fastest), a time
// decides the pick by a hair, and is measured again.
inline constexpr double kEdgeBand = 0.01;
// A pick whose two fastest candidates are closer than this is worth naming in the run's result.
inline constexpr double kCloseMargin = kTimingNoise;

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

// The candidates to time again before the pick: where some time lies within kEdgeBand of the noise
// margin's edge, every candidate within the margin plus the band (the fastest among them); empty when no
// time is that close to the edge, or fewer than two candidates ran.
inline std::vector<size_t> ambiguous_contenders(std::span<const double> ms, double noise = kTimingNoise,
                                                double band = kEdgeBand) {
  const std::optional<Pick> p = pick_within_noise(ms, noise);
  if (!p || !std::isfinite(p->second_ms)) return {};
  std::vector<size_t> contenders;
  bool near_edge = false;
  for (size_t i = 0; i < ms.size(); ++i) {
    if (!std::isfinite(ms[i])) continue;
    const double slower = ms[i] / p->fastest_ms - 1;
    if (slower < noise + band) contenders.push_back(i);
    if (std::abs(slower - noise) < band) near_edge = true;
  }
  return near_edge && contenders.size() > 1 ? contenders : std::vector<size_t>{};
}

}  // namespace dlbench::tuning
