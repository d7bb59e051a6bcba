// Progress of one rank through its collectives, and the verdict the watchdogs draw from every rank's.
//
// Each rank counts the collectives it has entered (`issued`) and keeps the time the oldest unfinished one
// began. Ranks call collectives in the same order, so when some ranks have waited longer than the timeout,
// a rank that has entered fewer collectives than the others is the one they are waiting for; when all have
// entered the same number, the collective itself (network, GPU, NCCL) is stuck. The watchdogs exchange these
// records (shared memory for threads, a periodic MPI all-gather for processes) and stop every rank with the
// same one-line verdict.
//
// DLBENCH_TEST_STALL="RANK:STEP:SECONDS" (tests only) makes rank RANK sleep SECONDS in set_step(STEP), as a
// rank whose host hangs at the start of that step would.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>

namespace dlbench::parallel {

enum class OpKind : int32_t {
  none = 0,
  all_reduce,
  wait_all_reduces,
  broadcast,
  barrier,
  sum,
  max,
  all_gather,
  compute_stream,  // watch_compute_stream
  shutdown,        // the communicator's destructor
};
const char* op_kind_name(OpKind kind);

// One rank's state as the watchdogs exchange it (plain bytes: it crosses MPI as MPI_BYTE).
struct RankProgress {
  int64_t step = -1;
  int64_t issued = 0;             // collectives entered
  double pending_seconds = -1.0;  // age of the oldest unfinished collective; -1: none
  int64_t pending_sequence = 0;   // its sequence number
  OpKind pending_kind = OpKind::none;
  int32_t closing = 0;   // the communicator is being destroyed (MPI watchdogs: end of the exchange)
  int32_t stopping = 0;  // this rank's watchdog has reached a verdict and is stopping the run
};

// Thread-safe: the rank's thread writes, its watchdog reads.
class ProgressTracker {
 public:
  ProgressTracker(int rank, double timeout_seconds);
  int rank() const { return rank_; }
  double timeout_seconds() const { return timeout_seconds_; }

  void set_step(int64_t step);  // also where an injected stall sleeps
  int64_t step() const;
  // A collective entered; returns its sequence number (1, 2, ...). At most kMaxUnfinished may be
  // unfinished at a time (a step enqueues a few dozen gradient buckets before it waits).
  int64_t begin(OpKind kind);
  void finish(int64_t sequence);          // that collective has finished
  void finish_through(int64_t sequence);  // every collective up to and including `sequence` has
  int64_t issued() const;
  RankProgress snapshot() const;

  static constexpr int64_t kMaxUnfinished = 4096;

 private:
  using Clock = std::chrono::steady_clock;
  struct Started {
    Clock::time_point start{};
    OpKind kind = OpKind::none;
    bool done = false;
  };
  Started& slot(int64_t sequence) { return ring_[static_cast<size_t>(sequence % kMaxUnfinished)]; }
  void advance_finished();

  const int rank_;
  const double timeout_seconds_;
  mutable std::mutex mutex_;
  int64_t step_ = -1;
  int64_t issued_ = 0;
  // Every collective up to finished_ has finished; ring_ holds the ones after it (by sequence number), the
  // oldest of which is the longest wait.
  int64_t finished_ = 0;
  std::unique_ptr<Started[]> ring_;
  // The injected stall of DLBENCH_TEST_STALL, if it names this rank.
  std::optional<int64_t> stall_step_;
  double stall_seconds_ = 0;
};

// The verdict on a set of records, one per rank: nullopt while no rank has waited longer than `timeout`.
// The message is one line, naming the rank(s) stalled and their step, e.g.
//   "rank 1 stalled at step 5: ranks 0, 2, 3 waited 2.0 s for it in all_reduce (collective #12)"
// With `hosts` (rank -> host name; MPI ranks), the stalled ranks' hosts are named too:
//   "rank 2 (host nodeb) stalled at step 5: ..."
std::optional<std::string> stall_verdict(std::span<const RankProgress> ranks, double timeout_seconds,
                                         std::span<const std::string> hosts = {});

// Parses DLBENCH_TEST_STALL ("RANK:STEP:SECONDS"); nullopt when unset. A malformed value is a UserError.
struct InjectedStall {
  int rank = 0;
  int64_t step = 0;
  double seconds = 0;
};
std::optional<InjectedStall> injected_stall_from_environment();

// "0, 2, 3" for {0, 2, 3}.
std::string rank_list(std::span<const int> ranks);
// "rank 2", "ranks 2, 3"; with hosts "rank 2 (host nodeb)", "ranks 1, 2 (hosts nodea, nodeb)".
std::string ranks_named(std::span<const int> ranks, std::span<const std::string> hosts = {});

}  // namespace dlbench::parallel
