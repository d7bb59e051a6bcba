#include "parallel/thread_group.h"

#include <algorithm>
#include <chrono>

#include "core/status.h"
#include "parallel/mpi_runtime.h"

namespace dlbench::parallel {

ThreadGroup::ThreadGroup(int size, double timeout_seconds)
    : size_(size),
      timeout_seconds_(timeout_seconds),
      number_slots_(static_cast<size_t>(size)),
      text_slots_(static_cast<size_t>(size)) {
  DLB_CHECK(size >= 1, "a thread group needs at least one rank, not {}", size);
  DLB_CHECK(timeout_seconds > 0, "timeout {} s", timeout_seconds);
  for (int r = 0; r < size; ++r) trackers_.push_back(std::make_shared<ProgressTracker>(r, timeout_seconds));
  watchdog_ = std::thread([this] { watch(); });
}

ThreadGroup::~ThreadGroup() {
  {
    std::lock_guard lock(watch_mutex_);
    closing_ = true;
  }
  watch_cv_.notify_all();
  watchdog_.join();
}

const std::shared_ptr<ProgressTracker>& ThreadGroup::tracker(int rank) const {
  DLB_CHECK(rank >= 0 && rank < size_, "rank {} of a group of {}", rank, size_);
  return trackers_[static_cast<size_t>(rank)];
}

void ThreadGroup::add_probe(Probe probe) {
  std::lock_guard lock(watch_mutex_);
  probes_.push_back(std::move(probe));
}

void ThreadGroup::add_abort_hook(std::function<void()> hook) {
  std::lock_guard lock(watch_mutex_);
  abort_hooks_.push_back(std::move(hook));
}

void ThreadGroup::run_abort_hooks() {
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard lock(watch_mutex_);
    hooks = abort_hooks_;
  }
  for (const auto& hook : hooks) run_bounded(hook, 5.0);
}

void ThreadGroup::abort(const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    if (abort_reason_.empty()) abort_reason_ = reason.empty() ? "a rank failed" : reason;
  }
  met_cv_.notify_all();
}

void ThreadGroup::meet(std::unique_lock<std::mutex>& lock) {
  if (!abort_reason_.empty()) throw Error("stopped: another rank failed: " + abort_reason_);
  const uint64_t generation = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    met_cv_.notify_all();
    return;
  }
  // No deadline here: the watchdog ends the process when a rank does not come.
  met_cv_.wait(lock, [&] { return generation_ != generation || !abort_reason_.empty(); });
  if (generation_ == generation) throw Error("stopped: another rank failed: " + abort_reason_);
}

template <typename T, typename Combine>
T ThreadGroup::exchange(int rank, OpKind kind, T value, std::vector<T>& slots, Combine combine) {
  ProgressTracker& progress = *tracker(rank);
  const int64_t sequence = progress.begin(kind);
  std::unique_lock lock(mutex_);
  slots[static_cast<size_t>(rank)] = std::move(value);
  meet(lock);
  T result = combine(slots);
  meet(lock);  // nobody writes the slots again before every rank has read them
  lock.unlock();
  progress.finish(sequence);
  return result;
}

void ThreadGroup::barrier(int rank) {
  ProgressTracker& progress = *tracker(rank);
  const int64_t sequence = progress.begin(OpKind::barrier);
  {
    std::unique_lock lock(mutex_);
    meet(lock);
  }
  progress.finish(sequence);
}

double ThreadGroup::sum(int rank, double value) {
  return exchange(rank, OpKind::sum, value, number_slots_, [](const std::vector<double>& s) {
    double total = 0;
    for (double v : s) total += v;  // rank order: the same bits on every rank
    return total;
  });
}

double ThreadGroup::max(int rank, double value) {
  return exchange(rank, OpKind::max, value, number_slots_,
                  [](const std::vector<double>& s) { return *std::max_element(s.begin(), s.end()); });
}

std::vector<std::string> ThreadGroup::all_gather(int rank, const std::string& value) {
  std::string own = value;
  std::vector<std::string> result;
  exchange(rank, OpKind::all_gather, std::move(own), text_slots_, [&](const std::vector<std::string>& s) {
    result = s;
    return std::string();
  });
  return result;
}

void ThreadGroup::watch() {
  const auto period = std::chrono::duration<double>(watchdog_period_seconds(timeout_seconds_));
  std::unique_lock lock(watch_mutex_);
  while (!watch_cv_.wait_for(lock, period, [&] { return closing_; })) {
    std::optional<std::string> failure;
    for (const Probe& probe : probes_) {
      if (!failure) failure = probe();
    }
    if (!failure) {
      std::vector<RankProgress> records;
      for (const auto& t : trackers_) records.push_back(t->snapshot());
      failure = stall_verdict(records, timeout_seconds_);
    }
    if (!failure) continue;
    // The ranks are threads of this process: one line, then the process ends (a rank's thread may be
    // asleep or inside a GPU wait, where nothing else would reach it).
    print_stop_line("", *failure);
    for (const auto& hook : abort_hooks_) run_bounded(hook, 5.0);
    abort_all_ranks(kStalledExitCode);
  }
}

}  // namespace dlbench::parallel
