// Wall-clock timing on the host. GPU work is timed with CUDA events in the CUDA backend.
#pragma once

#include <chrono>

namespace dlbench {

class WallTimer {
 public:
  WallTimer() : start_(Clock::now()) {}
  void restart() { start_ = Clock::now(); }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  double milliseconds() const { return seconds() * 1e3; }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

}  // namespace dlbench
