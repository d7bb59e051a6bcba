#include "core/timeline.h"

#include "core/status.h"

namespace dlbench {

namespace {
thread_local Timeline* this_thread_timeline = nullptr;
}  // namespace

Timeline* Timeline::current() { return this_thread_timeline; }
void Timeline::set_current(Timeline* timeline) { this_thread_timeline = timeline; }

Timeline::Timeline(StreamClock& clock, int rank)
    : backend_(clock), rank_(rank), origin_(std::chrono::steady_clock::now()) {
  // The reference: a device timestamp taken when the device is idle, at a known host time.
  backend_.synchronize();
  reference_host_us_ = host_now_us();
  reference_marker_ = backend_.mark();
  backend_.synchronize();
}

double Timeline::host_now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_).count();
}

void Timeline::begin(std::string name, const char* track, void* stream) {
  Span s;
  s.name = std::move(name);
  s.track = track;
  s.begin = backend_.mark(stream);
  spans_.push_back(std::move(s));
}

int64_t Timeline::open_span(const char* track) const {
  for (int64_t i = static_cast<int64_t>(spans_.size()) - 1; i >= 0; --i) {
    const Span& s = spans_[static_cast<size_t>(i)];
    if (s.track == track && s.end < 0) return i;  // host spans set end to 0 when they close
  }
  DLB_CHECK(false, "timeline: end of a span on {} that was never begun", track);
  return -1;
}

void Timeline::end(const char* track, void* stream) {
  spans_[static_cast<size_t>(open_span(track))].end = backend_.mark(stream);
}

void Timeline::host_begin(std::string name, const char* track) {
  Span s;
  s.name = std::move(name);
  s.track = track;
  s.host = true;
  s.host_begin = host_now_us();
  spans_.push_back(std::move(s));
}

void Timeline::host_end(const char* track) {
  Span& s = spans_[static_cast<size_t>(open_span(track))];
  s.host_end = host_now_us();
  s.end = 0;  // closed
}

nlohmann::json Timeline::events() {
  backend_.synchronize();
  const double reference_ms = backend_.marker_ms(reference_marker_);
  auto device_us = [&](int64_t marker) {
    return reference_host_us_ + (backend_.marker_ms(marker) - reference_ms) * 1e3;
  };
  nlohmann::json out = nlohmann::json::array();
  for (const Span& s : spans_) {
    if (s.end < 0) continue;  // never closed
    const double begin = s.host ? s.host_begin : device_us(s.begin);
    const double end = s.host ? s.host_end : device_us(s.end);
    out.push_back({{"name", s.name},
                   {"ph", "X"},
                   {"ts", begin},
                   {"dur", std::max(0.0, end - begin)},
                   {"pid", rank_},
                   {"tid", s.track}});
  }
  out.push_back({{"name", "process_name"},
                 {"ph", "M"},
                 {"pid", rank_},
                 {"args", {{"name", fmt::format("rank {}", rank_)}}}});
  return out;
}

TimelineSpan::TimelineSpan(std::string name, const char* track, void* stream)
    : timeline_(Timeline::current()), track_(track), stream_(stream) {
  if (timeline_) timeline_->begin(std::move(name), track, stream);
}

TimelineSpan::~TimelineSpan() {
  if (timeline_) timeline_->end(track_, stream_);
}

}  // namespace dlbench
