// Timestamps taken in a device's stream order: what the timeline (core/timeline.h) needs of a backend, so
// that core does not depend on the backend layer. Backend implements it (backend/backend.h).
#pragma once

#include <cstdint>

namespace dlbench {

class StreamClock {
 public:
  virtual ~StreamClock() = default;
  // A timestamp taken in stream order on `stream` (a native stream of the implementation; null: its main
  // one); marker_ms reads it, after synchronize(), in milliseconds since the first marker.
  virtual int64_t mark(void* stream = nullptr) = 0;
  virtual double marker_ms(int64_t marker) = 0;
  // Waits until every stream's work issued so far has run.
  virtual void synchronize() = 0;
};

}  // namespace dlbench
