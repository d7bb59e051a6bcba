// Choosing a convolution algorithm from repeated timed searches.
//
// One cuDNN search (cudnnFind*AlgorithmEx) times every candidate once, and two algorithms of one shape are
// often within a few percent of each other, so a single timing is a coin toss between them. With one
// search per direction, a ResNet-50 fp16 step on an H200 took 34.5 or 36.5 ms depending on the process;
// with three rounds and the median, six processes in a row chose the same algorithms (one algorithm
// digest) and took 34.2-34.4 ms (bench/results/2026-11-30-gpu-2xh200-scaling/). So the search is run
// several times and the candidate with the lowest median time over the rounds wins, among those that were
// accepted (ran, fit the workspace limit) in every round.
//
// Header-only and free of cuDNN types so that the choice can be tested without a GPU: `Perf` is any
// struct with cuDNN's perf-result fields (algo, mathType, memory, time; status through `accept`).
#pragma once

#include <algorithm>
#include <cstddef>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace dlbench::cuda {

struct TimedChoice {
  int algo = 0;
  int math = 0;
  size_t memory = 0;  // the largest workspace any round reported for it
  float median_ms = 0;
};

// Every candidate accepted in every round, fastest median first (ties in (algo, math) order: the same
// inputs always give the same order).
template <typename Perf, typename Accept>
std::vector<TimedChoice> rank_by_median(const std::vector<std::vector<Perf>>& rounds, const Accept& accept) {
  std::map<std::pair<int, int>, std::vector<float>> times;  // (algo, math) -> its time in every round
  std::map<std::pair<int, int>, size_t> memory;
  for (const auto& results : rounds) {
    std::map<std::pair<int, int>, bool> seen;  // a candidate listed twice in one round counts once
    for (const Perf& r : results) {
      if (!accept(r)) continue;
      const std::pair<int, int> id{static_cast<int>(r.algo), static_cast<int>(r.mathType)};
      if (std::exchange(seen[id], true)) continue;
      times[id].push_back(r.time);
      memory[id] = std::max(memory[id], static_cast<size_t>(r.memory));
    }
  }
  std::vector<TimedChoice> ranked;
  for (auto& [id, t] : times) {
    if (rounds.empty() || t.size() != rounds.size()) continue;  // missing or refused in some round
    std::sort(t.begin(), t.end());
    ranked.push_back(TimedChoice{id.first, id.second, memory[id], t[t.size() / 2]});
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const TimedChoice& a, const TimedChoice& b) { return a.median_ms < b.median_ms; });
  return ranked;
}

template <typename Perf, typename Accept>
std::optional<TimedChoice> pick_by_median(const std::vector<std::vector<Perf>>& rounds,
                                          const Accept& accept) {
  const std::vector<TimedChoice> ranked = rank_by_median(rounds, accept);
  if (ranked.empty()) return std::nullopt;
  return ranked.front();
}

}  // namespace dlbench::cuda
