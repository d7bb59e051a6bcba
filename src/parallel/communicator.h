// Communicator: how the ranks of a data-parallel run talk to each other, one object per rank.
//
// Two planes. The data plane sums tensors (gradient buckets) in the backend's memory, asynchronously: a
// reduction is ordered after the work already issued on the backend's compute stream and runs on a
// communication stream, so the compute issued next (the rest of the backward) overlaps it. The control plane
// carries small host values (a loss to average, a config hash, a barrier) and blocks.
//
// Every rank must call the collectives (data and control plane alike) in the same order: that is what
// matches them up, and what the watchdog counts to name a rank that stalled.
//
// Implementations (make_launch in parallel/launch.h chooses one):
//   local         one rank; the data plane does nothing
//   mpi           CPU ranks, one process each under mpirun (OpenMPI), f32 only
//   mpi-nccl      one process per GPU under mpirun: NCCL for tensors, MPI for the control plane
//   nccl-threads  one process, one thread per GPU: NCCL for tensors, shared memory for the control plane
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace dlbench::parallel {

class ProgressTracker;

class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual std::string name() const = 0;  // "local" | "nccl-threads" | "mpi-nccl" | "mpi"
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // ---- data plane: tensors in the backend's memory ----
  // Enqueues an in-place SUM over the ranks of `x` (contiguous f32, f16 or bf16, any element count >= 1),
  // ordered after everything already issued on the backend's compute stream. `x` must not be touched until
  // wait_all_reduces(). The 1/size of an average is the caller's (folded into the optimizer's scale).
  virtual void all_reduce_sum(Tensor& x) = 0;
  // Work issued on the compute stream from now on waits for every reduction enqueued so far. On a GPU this
  // is an event wait on the stream (no host synchronisation, so it can be captured in a CUDA graph); on the
  // CPU it blocks until the sums are there.
  virtual void wait_all_reduces() = 0;
  // Copies root's `x` to every rank, in place; complete on return (setup only: initial weights).
  virtual void broadcast(Tensor& x, int root) = 0;
  // GPU: after replaying captured work that holds collectives (a CUDA graph of a whole step), lets the
  // watchdog watch it too: everything issued so far on the compute stream must finish within the timeout.
  // Counts as a collective (every rank calls it in the same order). Nothing to do on the CPU.
  virtual void watch_compute_stream() {}
  // Device memory for tensors summed every step (the gradient buffers) that makes their sums faster, or
  // nullptr when this communicator has none to give (then the caller allocates as usual). GPU ranks with
  // NcclTuning::symmetric: an NCCL symmetric window. Collective (every rank, same order, same size); the
  // memory belongs to the communicator and lives as long as it does.
  virtual void* allocate_window(size_t bytes) {
    (void)bytes;
    return nullptr;
  }

  // ---- control plane: small host values, blocking ----
  virtual void barrier() = 0;
  virtual double sum(double value) = 0;
  virtual double max(double value) = 0;
  virtual std::vector<std::string> all_gather(const std::string& value) = 0;

  // The step the caller is in: timeout messages name it. (Also where a test's injected stall happens: see
  // DLBENCH_TEST_STALL in parallel/progress.h.)
  void set_step(int64_t step);
  int64_t step() const;

 protected:
  explicit Communicator(std::shared_ptr<ProgressTracker> progress);
  ProgressTracker& progress() { return *progress_; }

 private:
  std::shared_ptr<ProgressTracker> progress_;
};

// "f32", "f16" or "bf16" with at least one element, contiguous by construction (a Tensor is a dense view);
// anything else is a caller's bug (DLB_CHECK).
void check_reducible(const char* op, const Tensor& x);

}  // namespace dlbench::parallel
