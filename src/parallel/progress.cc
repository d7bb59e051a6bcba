#include "parallel/progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/log.h"
#include "core/status.h"

namespace dlbench::parallel {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::none:
      return "none";
    case OpKind::all_reduce:
      return "all_reduce_sum";
    case OpKind::wait_all_reduces:
      return "wait_all_reduces";
    case OpKind::broadcast:
      return "broadcast";
    case OpKind::barrier:
      return "barrier";
    case OpKind::sum:
      return "sum";
    case OpKind::max:
      return "max";
    case OpKind::all_gather:
      return "all_gather";
    case OpKind::compute_stream:
      return "the replayed step (watch_compute_stream)";
    case OpKind::shutdown:
      return "the communicator's shutdown";
  }
  return "?";
}

std::optional<InjectedStall> injected_stall_from_environment() {
  const char* text = std::getenv("DLBENCH_TEST_STALL");
  if (text == nullptr || *text == '\0') return std::nullopt;
  InjectedStall stall;
  char tail = 0;
  long long step = 0;
  if (std::sscanf(text, "%d:%lld:%lf%c", &stall.rank, &step, &stall.seconds, &tail) != 3 || stall.rank < 0 ||
      step < 0 || stall.seconds < 0) {
    throw_user_error("DLBENCH_TEST_STALL={}: expected RANK:STEP:SECONDS, e.g. 1:5:30", text);
  }
  stall.step = step;
  return stall;
}

std::string rank_list(std::span<const int> ranks) { return fmt::format("{}", fmt::join(ranks, ", ")); }

std::string ranks_named(std::span<const int> ranks, std::span<const std::string> hosts) {
  std::string text = fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", rank_list(ranks));
  std::vector<std::string> names;
  for (int r : ranks) {
    if (r < 0 || r >= static_cast<int>(hosts.size())) return text;  // hosts unknown: ranks only
    if (std::find(names.begin(), names.end(), hosts[static_cast<size_t>(r)]) == names.end())
      names.push_back(hosts[static_cast<size_t>(r)]);
  }
  return fmt::format("{} ({} {})", text, names.size() == 1 ? "host" : "hosts", fmt::join(names, ", "));
}

// ---- ProgressTracker ----

ProgressTracker::ProgressTracker(int rank, double timeout_seconds)
    : rank_(rank), timeout_seconds_(timeout_seconds), ring_(new Started[kMaxUnfinished]) {
  if (auto stall = injected_stall_from_environment(); stall && stall->rank == rank) {
    stall_step_ = stall->step;
    stall_seconds_ = stall->seconds;
  }
}

void ProgressTracker::set_step(int64_t step) {
  {
    std::lock_guard lock(mutex_);
    step_ = step;
  }
  if (stall_step_ && *stall_step_ == step) {
    log_warning("rank {}: DLBENCH_TEST_STALL: sleeping {} s at step {}", rank_, stall_seconds_, step);
    std::this_thread::sleep_for(std::chrono::duration<double>(stall_seconds_));
  }
}

int64_t ProgressTracker::step() const {
  std::lock_guard lock(mutex_);
  return step_;
}

int64_t ProgressTracker::begin(OpKind kind) {
  std::lock_guard lock(mutex_);
  DLB_CHECK(issued_ - finished_ < kMaxUnfinished, "rank {}: {} collectives enqueued and none waited for",
            rank_, kMaxUnfinished);
  ++issued_;
  slot(issued_) = Started{Clock::now(), kind, false};
  return issued_;
}

void ProgressTracker::advance_finished() {
  while (finished_ < issued_ && slot(finished_ + 1).done) ++finished_;
}

void ProgressTracker::finish(int64_t sequence) {
  std::lock_guard lock(mutex_);
  if (sequence <= finished_ || sequence > issued_) return;
  slot(sequence).done = true;
  advance_finished();
}

void ProgressTracker::finish_through(int64_t sequence) {
  std::lock_guard lock(mutex_);
  sequence = std::min(sequence, issued_);
  for (int64_t s = finished_ + 1; s <= sequence; ++s) slot(s).done = true;
  advance_finished();
}

int64_t ProgressTracker::issued() const {
  std::lock_guard lock(mutex_);
  return issued_;
}

RankProgress ProgressTracker::snapshot() const {
  std::lock_guard lock(mutex_);
  RankProgress p;
  p.step = step_;
  p.issued = issued_;
  if (finished_ < issued_) {
    const Started& oldest = ring_[static_cast<size_t>((finished_ + 1) % kMaxUnfinished)];
    p.pending_seconds = std::chrono::duration<double>(Clock::now() - oldest.start).count();
    p.pending_kind = oldest.kind;
    p.pending_sequence = finished_ + 1;
  }
  return p;
}

// ---- the verdict ----

std::optional<std::string> stall_verdict(std::span<const RankProgress> ranks, double timeout_seconds,
                                         std::span<const std::string> hosts) {
  std::vector<int> waiting;
  int longest = -1;
  int64_t max_issued = 0, min_issued = INT64_MAX;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    const RankProgress& p = ranks[static_cast<size_t>(r)];
    max_issued = std::max(max_issued, p.issued);
    min_issued = std::min(min_issued, p.issued);
    if (p.pending_seconds > timeout_seconds) {
      waiting.push_back(r);
      if (longest < 0 || p.pending_seconds > ranks[static_cast<size_t>(longest)].pending_seconds) longest = r;
    }
  }
  if (waiting.empty()) return std::nullopt;
  const RankProgress& w = ranks[static_cast<size_t>(longest)];

  std::vector<int> laggards;
  std::vector<int64_t> laggard_steps;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    if (ranks[static_cast<size_t>(r)].issued < max_issued) {
      laggards.push_back(r);
      laggard_steps.push_back(ranks[static_cast<size_t>(r)].step);
    }
  }
  if (!laggards.empty()) {
    // Ranks call the collectives in the same order: the ones that entered fewer are those the others wait
    // for. The first collective they have not joined is the one after the fewest entered.
    const bool one = laggards.size() == 1;
    const bool same_step = std::all_of(laggard_steps.begin(), laggard_steps.end(),
                                       [&](int64_t s) { return s == laggard_steps.front(); });
    return fmt::format(
        "{} stalled at step{} {}: {} {} waited {:.1f} s for {} in {} (collective #{}; timeout {} s)",
        ranks_named(laggards, hosts), same_step ? "" : "s",
        same_step ? fmt::format("{}", laggard_steps.front())
                  : fmt::format("{}", fmt::join(laggard_steps, ", ")),
        waiting.size() == 1 ? "rank" : "ranks", rank_list(waiting), w.pending_seconds, one ? "it" : "them",
        op_kind_name(w.pending_kind), min_issued + 1, timeout_seconds);
  }
  return fmt::format(
      "collective #{} ({}) at step {} did not finish within {} s on {} {} although every rank entered it "
      "(the transport stalled: network, GPU or NCCL)",
      w.pending_sequence, op_kind_name(w.pending_kind), w.step, timeout_seconds,
      waiting.size() == 1 ? "rank" : "ranks", rank_list(waiting));
}

}  // namespace dlbench::parallel
