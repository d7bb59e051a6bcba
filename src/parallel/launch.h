// How this process takes part in a run, and the factory of its communicators.
//
// A Launch is made once per process (make_launch) and says how many ranks the process runs — one, or one
// thread per GPU with `--gpus N` — and on which GPU each; each rank's thread then joins with its backend for
// its Communicator. The trainer and comm-bench use it the same way:
//
//   auto launch = parallel::make_launch(options);
//   parallel::run_local_ranks(*launch, [&](int slot) {
//     auto backend = make_backend(..., Device{DeviceKind::cuda, launch->gpu(slot)}, ...);
//     auto comm = launch->join(slot, *backend);
//     ... comm->rank(), comm->size(), comm->all_reduce_sum(...) ...
//   });
//
// Choice (launcher x device x what was built):
//   auto     under mpirun: as mpi; else cuda with --gpus > 1: as threads; else one rank (local)
//   mpi      cpu: mpi; cuda: mpi-nccl, GPU = the process's local rank on its node (the launcher's
//            OMPI_COMM_WORLD_LOCAL_RANK, else MPI_Comm_split_type's: parallel/placement.h)
//   threads  cuda: nccl-threads with --gpus N ranks (N = 1 included: a one-rank NCCL group); cpu: local
// A launcher this build or this start cannot give is one UserError line saying what to do.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "parallel/communicator.h"
#include "parallel/launcher.h"

namespace dlbench::parallel {

// How the GPU communicators' collectives share the GPU with training (nccl-threads and mpi-nccl).
struct NcclTuning {
  // The gradient buffers live in NCCL symmetric windows (ncclMemAlloc, registered with
  // NCCL_WIN_COLL_SYMMETRIC): all-reduces on them run NCCL's symmetric-memory kernels, which read and write
  // the peers' buffers directly over NVLink instead of staging through NCCL's own FIFOs.
  bool symmetric = false;
};

struct LaunchOptions {
  Launcher launcher = Launcher::automatic;
  DeviceKind device = DeviceKind::cpu;
  int gpus = 1;                  // threads: ranks (GPUs) this process runs
  double timeout_seconds = 300;  // a collective unfinished after this stops every rank
  NcclTuning nccl;
};

class Launch {
 public:
  virtual ~Launch() = default;
  virtual std::string launcher() const = 0;      // "single" | "threads" | "mpi"
  virtual std::string communicator() const = 0;  // the Communicator::name() joins give
  virtual int local_ranks() const = 0;           // ranks (threads) this process runs
  virtual int gpu(int slot) const = 0;           // the GPU of local rank `slot` (a cuda run)
  // Local rank `slot`'s index among the ranks of its host (mpi: the process's place on its node).
  virtual int node_local_rank(int slot) const = 0;
  // From local rank `slot`'s thread (collective with the other ranks); `backend` outlives the result.
  virtual std::unique_ptr<Communicator> join(int slot, Backend& backend) = 0;
  // A local rank failed: wake the others (threads) instead of letting them wait for it.
  virtual void abort(const std::string& reason) {}
};

// Throws UserError for a launcher that is unknown or unavailable here.
std::unique_ptr<Launch> make_launch(const LaunchOptions& options);

// For a process that runs one rank (local, mpi, mpi-nccl): make_launch, then join.
std::unique_ptr<Communicator> make_communicator(const LaunchOptions& options, Backend& backend);

// Runs body(slot) for every local rank, each on its own thread (inline when there is one). The first
// exception aborts the launch (the other ranks stop waiting for the failed one) and is rethrown here.
void run_local_ranks(Launch& launch, const std::function<void(int slot)>& body);

}  // namespace dlbench::parallel
