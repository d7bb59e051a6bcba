#include "parallel/watchdog.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

namespace dlbench::parallel {

double watchdog_period_seconds(double timeout_seconds) { return std::clamp(timeout_seconds / 10, 0.02, 1.0); }

void print_stop_line(const std::string& prefix, const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "dlbench: error: %s%s\n", prefix.c_str(), message.c_str());
  std::fflush(stderr);
}

void run_bounded(const std::function<void()>& hook, double seconds) {
  struct State {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
  };
  auto state = std::make_shared<State>();
  std::thread([hook, state] {
    try {
      hook();
    } catch (...) {
      // Best effort on the way out: the run is being stopped anyway.
    }
    std::lock_guard lock(state->mutex);
    state->done = true;
    state->done_cv.notify_all();
  }).detach();
  std::unique_lock lock(state->mutex);
  state->done_cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return state->done; });
}

}  // namespace dlbench::parallel
