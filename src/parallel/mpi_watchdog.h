// The watchdog of a rank that is an MPI process (the mpi and mpi-nccl communicators).
//
// A thread per rank runs rounds: each round it polls its probes, then all-gathers every rank's
// RankProgress over a communicator of its own (MPI_Iallgather, polled with MPI_Test: the rank's own
// collectives go on undisturbed). Since every watchdog receives the same records in the same round, every
// rank reaches the same verdict at the same time: each prints it (prefixed with its rank), one more round
// makes sure all have printed, and MPI_Abort ends the job with kStalledExitCode. A rank whose probe reports
// a transport error raises a flag in its record, so the others stop with its message.
//
// If the rounds themselves stop completing (a process or its host frozen whole, the network to it cut)
// while this rank waits past the timeout, it stops on its own with what it knows: its rank, host, step and
// collective. Every record carries its rank's host, so that each line names hosts as well as ranks.
//
// When the launcher ends the job (mpirun sends SIGTERM to every rank when a rank, its host's daemon or the
// connection to it is lost), a rank left waiting in a collective could never reach the step's end, where a
// train run stops on a signal; a thread of the watchdog's that never calls MPI (an MPI call may block on a
// dead peer's connection) checks for the signal often, prints the rank's one line instead — rank, host,
// step and collective — and ends the process before mpirun's SIGKILL.
//
// Destruction is collective: the destructor raises `closing`, and the rounds go on until every rank has,
// so that no round is left half-matched. (While an exception unwinds, the thread just leaves: main's
// finish_mpi_process ends the job.)
#pragma once

#if DLBENCH_WITH_MPI

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "parallel/progress.h"
#include "parallel/watchdog.h"

namespace dlbench::parallel {

class MpiWatchdog {
 public:
  // `world` is duplicated (collective). Probes and abort hooks are fixed at construction.
  MpiWatchdog(MPI_Comm world, std::shared_ptr<ProgressTracker> progress, std::vector<Probe> probes,
              std::vector<std::function<void()>> abort_hooks);
  ~MpiWatchdog();
  MpiWatchdog(const MpiWatchdog&) = delete;
  MpiWatchdog& operator=(const MpiWatchdog&) = delete;

 private:
  // The record each round sends: RankProgress plus the reason of a rank that stops on its own.
  struct Record {
    RankProgress progress;
    char host[64] = {0};
    char reason[480] = {0};
  };
  void watch();
  // Prints "(rank R on HOST) message", and ends the job; `tell_others`: after one more round (the others
  // stop with it), else at once (the rounds no longer complete).
  // `about_self`: the message names this rank itself (no prefix).
  [[noreturn]] void stop(const std::string& message, bool tell_others = true, bool about_self = false);
  // Until the watchdog ends: where a stop signal arrived while this rank waits in a collective, its line,
  // and the end of this process.
  void watch_for_signal();
  // Starts a round with `own` if none is in flight; returns true when the round in flight has completed.
  bool round(const Record& own);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::string host_;
  std::vector<std::string> hosts_;  // every rank's, from the first completed round
  std::shared_ptr<ProgressTracker> progress_;
  std::vector<Probe> probes_;
  std::vector<std::function<void()>> abort_hooks_;
  double timeout_seconds_;

  // A round's buffers, on the heap: a round abandoned in flight (an exception unwinding) may still complete
  // in finish_mpi_process's barrier or in MPI_Finalize, once the other ranks post theirs, and MPI then
  // reads and writes these. The destructor leaves them to the process instead of freeing them under MPI.
  struct RoundBuffers {
    Record send{};
    std::vector<Record> received;
  };
  std::unique_ptr<RoundBuffers> buffers_;
  MPI_Request request_ = MPI_REQUEST_NULL;

  std::mutex mutex_;
  std::condition_variable wake_;
  bool closing_ = false;
  bool abandon_ = false;
  std::atomic<bool> finished_{false};
  std::atomic<bool> ending_{false};
  std::atomic<bool> speaking_{false};  // this rank has printed its stop line (one per rank)
  std::thread thread_;
  std::thread signal_thread_;
};

}  // namespace dlbench::parallel

#endif
