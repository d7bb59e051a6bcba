#include "parallel/mpi_watchdog.h"

#if DLBENCH_WITH_MPI

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <exception>

#include "core/signals.h"
#include "parallel/mpi_runtime.h"
#include "parallel/placement.h"

namespace dlbench::parallel {

MpiWatchdog::MpiWatchdog(MPI_Comm world, std::shared_ptr<ProgressTracker> progress, std::vector<Probe> probes,
                         std::vector<std::function<void()>> abort_hooks)
    : progress_(std::move(progress)),
      probes_(std::move(probes)),
      abort_hooks_(std::move(abort_hooks)),
      timeout_seconds_(progress_->timeout_seconds()) {
  MPI_CHECK(MPI_Comm_dup(world, &comm_));
  MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
  host_ = this_host();
  buffers_ = std::make_unique<RoundBuffers>();
  buffers_->received.resize(static_cast<size_t>(size_));
  thread_ = std::thread([this] { watch(); });
  signal_thread_ = std::thread([this] { watch_for_signal(); });
}

MpiWatchdog::~MpiWatchdog() {
  const bool unwinding = std::uncaught_exceptions() > 0;
  // Closing is itself watched: a rank that never gets here is named by the others' verdict.
  if (!unwinding) progress_->begin(OpKind::shutdown);
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
    abandon_ = unwinding;
  }
  wake_.notify_all();
  thread_.join();
  ending_ = true;
  signal_thread_.join();
  // A round left in flight (abandoned) keeps the communicator, since freeing it could wait for that round,
  // and its buffers, which MPI may yet write: a few kilobytes left to the ending process.
  if (request_ == MPI_REQUEST_NULL)
    MPI_Comm_free(&comm_);
  else
    static_cast<void>(buffers_.release());
}

bool MpiWatchdog::round(const Record& own) {
  if (request_ == MPI_REQUEST_NULL) {
    buffers_->send = own;
    MPI_CHECK(MPI_Iallgather(&buffers_->send, sizeof(Record), MPI_BYTE, buffers_->received.data(),
                             sizeof(Record), MPI_BYTE, comm_, &request_));
  }
  int done = 0;
  MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
  return done != 0;
}

void MpiWatchdog::stop(const std::string& message, bool tell_others, bool about_self) {
  // One line per rank: a signal arriving from here on (the others' MPI_Abort) adds none, and a stop that
  // comes second waits for the first one's end of the process.
  if (speaking_.exchange(true)) {
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  // The line says which rank speaks, unless it speaks of itself.
  print_stop_line(about_self ? "" : fmt::format("(rank {} on {}) ", rank_, host_), message);
  for (const auto& hook : abort_hooks_) run_bounded(hook, 5.0);
  // One more round tells the others this rank has printed; then the first MPI_Abort ends the job.
  Record own{};
  own.progress = progress_->snapshot();
  own.progress.stopping = 1;
  std::snprintf(own.host, sizeof own.host, "%s", host_.c_str());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  try {
    while (tell_others && !round(own) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  } catch (...) {
    // The job ends below whatever MPI says now.
  }
  abort_all_ranks(kStalledExitCode);
}

void MpiWatchdog::watch_for_signal() {
  // A rank that reaches the step's end stops there on its own (a train run saves its checkpoint first);
  // one that, signalled, has waited this long in a collective is waiting for ranks that are gone. Short:
  // under mpirun (Open MPI 4.1) the ranks end 0.1-0.2 s after its SIGTERM reaches them; a longer grace
  // would rarely speak, a shorter one would cut off more healthy jobs' clean stops at the step's end.
  constexpr double kGraceSeconds = 0.1;
  while (!ending_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const int signal_number = stop_signal();
    if (signal_number == 0) continue;
    const RankProgress mine = progress_->snapshot();
    if (mine.pending_seconds < std::min(kGraceSeconds, timeout_seconds_)) continue;
    if (speaking_.exchange(true)) return;  // the watchdog's own verdict is this rank's line
    print_stop_line(
        "", fmt::format(
                "rank {} (host {}) stopped by {} at step {} while waiting {:.1f} s in {} (collective #{}): "
                "the launcher is ending the job, as mpirun does after a rank's MPI_Abort or when a rank, "
                "its host's daemon or the connection to it is lost (the lines before this one say which)",
                rank_, host_, signal_name(signal_number), mine.step, mine.pending_seconds,
                op_kind_name(mine.pending_kind), mine.pending_sequence));
    // MPI cannot be trusted to return now (the launcher is tearing the job down): leave at once.
    std::_Exit(stopped_exit_code(signal_number));
  }
}

void MpiWatchdog::watch() {
  using Clock = std::chrono::steady_clock;
  const auto period = std::chrono::duration<double>(watchdog_period_seconds(timeout_seconds_));
  auto last_round_end = Clock::now();
  std::string local_failure;
  try {
    while (true) {
      bool closing = false;
      {
        std::unique_lock lock(mutex_);
        // While closing, rounds follow each other quickly: the destructor is waiting.
        wake_.wait_for(lock, closing_ ? std::chrono::duration<double>(0.002) : period,
                       [&] { return abandon_; });
        if (abandon_) return;
        closing = closing_;
      }
      for (const Probe& probe : probes_) {
        if (local_failure.empty()) {
          if (auto failure = probe()) local_failure = *failure;
        }
      }
      Record own{};
      own.progress = progress_->snapshot();
      own.progress.closing = closing ? 1 : 0;
      std::snprintf(own.host, sizeof own.host, "%s", host_.c_str());
      if (!local_failure.empty()) {
        own.progress.stopping = 1;
        std::snprintf(own.reason, sizeof own.reason, "rank %d (host %s): %s", rank_, host_.c_str(),
                      local_failure.c_str());
      }
      if (round(own)) {
        last_round_end = Clock::now();
        std::vector<RankProgress> records;
        bool all_closing = true;
        hosts_.clear();
        for (const Record& r : buffers_->received) {
          if (r.progress.stopping && r.reason[0] != '\0') stop(r.reason);
          records.push_back(r.progress);
          hosts_.emplace_back(r.host);
          all_closing = all_closing && r.progress.closing;
        }
        if (auto verdict = stall_verdict(records, timeout_seconds_, hosts_)) stop(*verdict);
        if (all_closing) {
          finished_ = true;
          return;
        }
        continue;
      }
      // The round has not completed: some process is not answering at all (frozen, or cut off). Once this
      // rank has waited past the timeout in a collective and no round has completed for as long, stop
      // with what this rank knows; the rounds being stalled, without waiting for the others.
      const RankProgress mine = progress_->snapshot();
      const double silent = std::chrono::duration<double>(Clock::now() - last_round_end).count();
      if (mine.pending_seconds > timeout_seconds_ && silent > timeout_seconds_) {
        stop(fmt::format("rank {} (host {}) waited {:.1f} s in {} (collective #{}) at step {}, and some "
                         "rank's watchdog has not answered for {:.1f} s (a process or host hung whole, or "
                         "the network to it is cut)",
                         rank_, host_, mine.pending_seconds, op_kind_name(mine.pending_kind),
                         mine.pending_sequence, mine.step, silent),
             /*tell_others=*/false, /*about_self=*/true);
      }
    }
  } catch (const std::exception& e) {
    stop(fmt::format("rank {} (host {}): the watchdog failed: {}", rank_, host_, e.what()));
  }
}

}  // namespace dlbench::parallel

#endif
