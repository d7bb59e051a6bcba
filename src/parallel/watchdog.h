// What a watchdog does when a collective has stalled or a transport failed: every rank stops, with one
// line saying which rank and step (parallel/progress.h draws that verdict).
//
// A hung collective cannot be interrupted from the thread that waits in it, so the watchdogs end the
// process themselves — the one place outside main that picks an exit code.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace dlbench::parallel {

// Exit code of a run its watchdog stopped (main's own codes are 0-3).
constexpr int kStalledExitCode = 4;

// Something a watchdog polls on each round, from its own thread: it may mark finished collectives in the
// rank's ProgressTracker (a GPU event has completed) and returns a message when the transport has failed
// (an NCCL asynchronous error).
using Probe = std::function<std::optional<std::string>()>;

// Poll period of a watchdog with this timeout: often enough to stop soon after the deadline, rarely
// enough to cost nothing (between 20 ms and 1 s).
double watchdog_period_seconds(double timeout_seconds);

// Prints "dlbench: error: <prefix><message>" on stderr and flushes.
void print_stop_line(const std::string& prefix, const std::string& message);

// Runs `hook` (an ncclCommAbort, which lets GPU kernels stuck in a collective return) for at most
// `seconds`; a hook that does not return in time is left behind, since the process ends next.
void run_bounded(const std::function<void()>& hook, double seconds);

}  // namespace dlbench::parallel
