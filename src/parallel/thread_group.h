// ThreadGroup: the ranks of one process (one thread each), their control plane in shared memory and the
// watchdog that watches them all.
//
// The control plane is a reusable barrier with one slot per rank: a rank writes its value, every rank meets,
// each reads all the slots in rank order (so a sum is the same, bit for bit, on every rank), every rank
// meets again before the slots are reused. The NCCL-threads communicator puts its data plane beside it.
//
// The watchdog (one thread per group) reads every rank's ProgressTracker; when one has waited longer than
// the timeout it prints the verdict of parallel/progress.h, runs the abort hooks (ncclCommAbort) and ends the
// process with kStalledExitCode.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "parallel/progress.h"
#include "parallel/watchdog.h"

namespace dlbench::parallel {

class ThreadGroup {
 public:
  ThreadGroup(int size, double timeout_seconds);
  ~ThreadGroup();
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  int size() const { return size_; }
  double timeout_seconds() const { return timeout_seconds_; }
  const std::shared_ptr<ProgressTracker>& tracker(int rank) const;

  // Control plane, called by rank `rank`'s thread; every rank calls the same sequence.
  void barrier(int rank);
  double sum(int rank, double value);
  double max(int rank, double value);
  std::vector<std::string> all_gather(int rank, const std::string& value);

  // Polled by the watchdog on each round / run before it stops the process (see parallel/watchdog.h).
  void add_probe(Probe probe);
  void add_abort_hook(std::function<void()> hook);
  void run_abort_hooks();  // each bounded in time (parallel/watchdog.h)

  // A rank failed (an exception): ranks blocked in the control plane, and later calls, throw an Error
  // saying so instead of waiting for it. Idempotent; the first reason is kept.
  void abort(const std::string& reason);

 private:
  // Meets every rank; throws if the group was aborted. Caller holds `lock`.
  void meet(std::unique_lock<std::mutex>& lock);
  template <typename T, typename Combine>
  T exchange(int rank, OpKind kind, T value, std::vector<T>& slots, Combine combine);
  void watch();

  const int size_;
  const double timeout_seconds_;
  std::vector<std::shared_ptr<ProgressTracker>> trackers_;

  std::mutex mutex_;
  std::condition_variable met_cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::string abort_reason_;
  std::vector<double> number_slots_;
  std::vector<std::string> text_slots_;

  std::mutex watch_mutex_;
  std::condition_variable watch_cv_;
  bool closing_ = false;
  std::vector<Probe> probes_;
  std::vector<std::function<void()>> abort_hooks_;
  std::thread watchdog_;
};

}  // namespace dlbench::parallel
