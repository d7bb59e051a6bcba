// The timing harness of the CUDA backend's searches: candidates timed as the step's CUDA graph runs them,
// back to back on the backend's stream, by CUDA events. Included by the CUDA backend's files only (it needs
// the CUDA runtime); tuning/pick.h holds the rule that chooses among the times.
//
// Why back to back: timed as calls on an idle stream (as cudnnFind does), a small convolution's time is
// mostly the API's host work while the GPU waits — 0.16-0.24 ms for 1x1 FP16 convolutions at batch 256 on
// an H200 that run in 0.04 ms back to back. Each round's calls are queued behind a closed gate
// (cuda/stream_gate.h) that opens once they are all queued, so they run one after the other as in the
// graph. Why rounds: one timing made two candidates within a few percent of
// each other a coin toss; the median of kRounds rounds counts.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/stream_gate.h"

namespace dlbench::tuning {

// Two CUDA events around timed work, destroyed with their scope.
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  // Milliseconds between the two, once `stop` is reached.
  float elapsed_ms() const {
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms;
  }
};

inline constexpr int kRounds = 3;
inline constexpr int kCallsPerRound = 3;
// Each counted round runs at least this long (as many calls as it takes, up to kMaxCallsPerRound). Timed
// three to a round, calls under 0.1 ms moved by 0.7% (median; p90 1.5%, up to 6%) relative to their
// search's fastest between three processes, calls of 0.3 ms and more by 0.2%; with rounds of 1 ms, by
// 0.3% (bench/results/algorithm-search/2026-12-03-noise-and-margin). A call at least this long is timed
// one per round: FP32 convolutions of a few milliseconds each made three calls per round most of a first
// start's search.
inline constexpr float kRoundMs = 1.0f;
inline constexpr int kMaxCallsPerRound = 64;

// The calls a round of `run` needs to last kRoundMs, given one call's time.
inline int calls_per_round(float call_ms) {
  if (!(call_ms > 0)) return kCallsPerRound;
  return std::clamp(static_cast<int>(std::ceil(kRoundMs / call_ms)), 1, kMaxCallsPerRound);
}

// A candidate whose first timed call is this many times slower than the fastest of its kind so far is
// timed no further (time_calls' give_up_ms). Far outside the noise of one call timed back to back, so a
// candidate given up could not have won.
inline constexpr float kGiveUpFactor = 1.5f;

inline float give_up_time(std::optional<float> fastest) {
  return fastest ? kGiveUpFactor * *fastest : std::numeric_limits<float>::infinity();
}

// The mean time of `calls` calls of `run` on `stream`, queued behind `gate` (one round); nothing when a call
// fails.
template <typename Run>
std::optional<float> time_round(cudaStream_t stream, cuda::StreamGate& gate, const EventPair& events,
                                const Run& run, int calls) {
  {
    const cuda::ClosedGate closed(gate, stream);
    CUDA_CHECK(cudaEventRecord(events.start, stream));
    for (int call = 0; call < calls; ++call)
      if (!run()) return std::nullopt;
    CUDA_CHECK(cudaEventRecord(events.stop, stream));
  }  // the gate opens: the calls run
  return events.elapsed_ms() / calls;
}

inline float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median over kRounds rounds of the mean time of `run`'s calls on `stream` (a call returns whether it
// ran), each round at least kRoundMs long (calls_per_round), after one warm-up call; nothing when a call
// fails. A first, shorter round (kCallsPerRound calls, or one where the candidate may be given up) sets
// the number of calls, and counts where it lasted kRoundMs. `gate` holds each round's calls until they
// are queued. With `give_up_ms`, a candidate whose first round (one call) takes longer is timed no
// further: its time is that call's (it cannot win, and a slow candidate's rounds are what make a search
// long).
template <typename Run>
std::optional<float> time_calls(cudaStream_t stream, cuda::StreamGate& gate, const Run& run,
                                float give_up_ms = std::numeric_limits<float>::infinity()) {
  // The warm-up (first-call costs), not behind the gate: a first call may wait for the stream (cuDNN's
  // set-up), which a closed gate holds until its one-second safety net lets go.
  if (!run()) return std::nullopt;
  const EventPair events;
  const bool may_give_up = give_up_ms < std::numeric_limits<float>::infinity();
  // The first round that may give up is one call: a slow candidate costs two calls, warm-up included.
  const int first_calls = may_give_up ? 1 : kCallsPerRound;
  const std::optional<float> first = time_round(stream, gate, events, run, first_calls);
  if (!first) return std::nullopt;
  if (*first > give_up_ms) return *first;
  std::vector<float> rounds;
  if (*first * first_calls >= kRoundMs) rounds.push_back(*first);
  const int calls = calls_per_round(*first);
  while (rounds.size() < kRounds) {
    const std::optional<float> ms = time_round(stream, gate, events, run, calls);
    if (!ms) return std::nullopt;
    rounds.push_back(*ms);
  }
  return median(std::move(rounds));
}

// Rounds of the second, closer look at candidates a pick would decide by a hair (tuning/pick.h).
inline constexpr int kCloseLookRounds = 5;

// The closer look: `count` candidates (`run(i)` calls candidate i once and returns whether it ran) timed
// in kCloseLookRounds rounds each, interleaved round by round so that a drift of the GPU's clocks during
// them touches all alike, each round at least kRoundMs long; each one's median, nothing for one whose call
// failed.
template <typename Run>
std::vector<std::optional<float>> time_interleaved(cudaStream_t stream, cuda::StreamGate& gate, size_t count,
                                                   const Run& run) {
  const EventPair events;
  std::vector<std::vector<float>> rounds(count);
  std::vector<int> calls(count, kCallsPerRound);
  std::vector<bool> failed(count, false);
  for (size_t i = 0; i < count; ++i) {  // warm-up, then a short round that sets the calls per round
    failed[i] = !run(i);
    if (failed[i]) continue;
    const std::optional<float> probe = time_round(
        stream, gate, events, [&] { return run(i); }, kCallsPerRound);
    if (probe)
      calls[i] = calls_per_round(*probe);
    else
      failed[i] = true;
  }
  for (int round = 0; round < kCloseLookRounds; ++round) {
    for (size_t i = 0; i < count; ++i) {
      if (failed[i]) continue;
      const std::optional<float> ms = time_round(
          stream, gate, events, [&] { return run(i); }, calls[i]);
      if (ms)
        rounds[i].push_back(*ms);
      else
        failed[i] = true;
    }
  }
  std::vector<std::optional<float>> medians(count);
  for (size_t i = 0; i < count; ++i)
    if (!failed[i]) medians[i] = median(std::move(rounds[i]));
  return medians;
}

}  // namespace dlbench::tuning
