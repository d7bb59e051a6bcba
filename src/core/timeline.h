// Timeline: what each stream did during the traced steps (--trace FILE --trace-steps A:B), written as a
// Chrome trace (chrome://tracing, Perfetto): one process per rank, one row per track — "compute" (each
// layer's forward and backward), "communication" (each gradient bucket's all-reduce), "data" (batches
// loaded by the host) — so anyone can see whether communication overlaps backward.
//
// GPU spans are timestamps taken in stream order (Backend::mark: CUDA events), read after the steps, and
// placed on the host clock through one reference mark taken when the timeline starts. A thread installs
// its rank's timeline as current(); instrumented code asks for it and records nothing when there is none.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/stream_clock.h"

namespace dlbench {

class Timeline {
 public:
  // `clock`: the rank's backend, which outlives the timeline.
  Timeline(StreamClock& clock, int rank);

  // A span on `track`, in stream order on `stream` (a native stream of the backend; null: its compute
  // stream). Spans on one track nest like a stack.
  void begin(std::string name, const char* track, void* stream = nullptr);
  void end(const char* track, void* stream = nullptr);
  // A span measured by the host clock (work the host does itself, e.g. loading a batch).
  void host_begin(std::string name, const char* track);
  void host_end(const char* track);

  // Chrome trace events of every closed span (waits for the backend's streams).
  nlohmann::json events();

  // This thread's timeline, or null.
  static Timeline* current();
  static void set_current(Timeline* timeline);

 private:
  struct Span {
    std::string name, track;
    bool host = false;
    int64_t begin = -1, end = -1;         // backend markers; end < 0: still open
    double host_begin = 0, host_end = 0;  // microseconds on the host clock
  };
  double host_now_us() const;
  int64_t open_span(const char* track) const;

  StreamClock& backend_;
  int rank_;
  std::chrono::steady_clock::time_point origin_;
  int64_t reference_marker_ = -1;
  double reference_host_us_ = 0;
  std::vector<Span> spans_;
};

// The compute track's span of a step's parameter update (trace-summary counts it apart from the layers).
inline constexpr const char* kOptimizerSpan = "optimizer";

// begin/end on the current timeline, if any.
class TimelineSpan {
 public:
  TimelineSpan(std::string name, const char* track, void* stream = nullptr);
  ~TimelineSpan();
  TimelineSpan(const TimelineSpan&) = delete;
  TimelineSpan& operator=(const TimelineSpan&) = delete;

 private:
  Timeline* timeline_;
  const char* track_;
  void* stream_;
};

}  // namespace dlbench
