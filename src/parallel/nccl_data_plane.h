// The data plane of the GPU communicators (nccl-threads and mpi-nccl): NCCL collectives on a
// communication stream of their own, forked from and joined to the backend's compute stream by events.
//
//   all_reduce_sum:   record `fork` on compute; comm stream waits on it; ncclAllReduce on comm; record
//                     `joined` on comm
//   wait_all_reduces: compute waits on `joined` (the comm stream is in order: the last covers all)
//
// Both are stream operations only, so a whole step with its reductions can be captured in a CUDA graph.
// Outside a capture each reduction also records a tracking event that the watchdog queries (from its own
// thread, in relaxed capture mode) to see it finish; captured work is watched through
// watch_compute_stream() after each replay.
//
// The NCCL communicator is non-blocking (ncclConfig_t.blocking = 0), so that the watchdog can
// ncclCommAbort a stuck one and poll ncclCommGetAsyncError.
#pragma once

#if DLBENCH_WITH_CUDA

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "parallel/launch.h"
#include "parallel/progress.h"

namespace dlbench::parallel {

// Sets NCCL_NVLS_ENABLE=0 unless the user set it (NVLink multicast stays off), and returns the config of
// a non-blocking communicator.
ncclConfig_t nonblocking_nccl_config(const NcclTuning& nccl);
// Waits while a non-blocking communicator reports ncclInProgress after a call returned `result`; throws on
// an error (NCCL_CHECK's message). No deadline: the watchdog watches the collective meanwhile.
void settle(ncclComm_t comm, ncclResult_t result, const char* what);

class NcclDataPlane {
 public:
  // Takes ownership of `comm` (initialised on `backend`'s GPU). `backend` must be a GPU backend
  // (native_stream() not null) and outlive this object. `nccl.symmetric`: allocate_window gives registered
  // memory.
  NcclDataPlane(ncclComm_t comm, Backend& backend, std::shared_ptr<ProgressTracker> progress,
                const NcclTuning& nccl = {});
  ~NcclDataPlane();
  NcclDataPlane(const NcclDataPlane&) = delete;
  NcclDataPlane& operator=(const NcclDataPlane&) = delete;

  void all_reduce_sum(Tensor& x);
  void wait_all_reduces();
  void broadcast(Tensor& x, int root);  // complete on return
  void watch_compute_stream();
  // With nccl.symmetric: `bytes` of device memory from ncclMemAlloc, registered with the communicator as a
  // symmetric window (collective: every rank calls it in the same order with the same size). Owned by this
  // object, freed after the communicator is destroyed (which releases the window). Otherwise nullptr.
  void* allocate_window(size_t bytes);

  // For the watchdog's thread: marks tracked collectives finished when their events have completed, and
  // returns a message if NCCL or CUDA reported an error.
  std::optional<std::string> probe();
  // ncclCommAbort: kernels stuck in a collective return. The object is unusable afterwards.
  void abort();

 private:
  void activate() const;
  ncclComm_t comm_;
  Backend& backend_;
  int device_;
  cudaStream_t compute_;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t fork_ = nullptr, joined_ = nullptr;
  std::shared_ptr<ProgressTracker> progress_;

  // Watched work: the tracking events and the last sequence number each covers (0: none outstanding).
  std::mutex track_mutex_;
  cudaEvent_t track_comm_ = nullptr, track_compute_ = nullptr;
  int64_t comm_sequence_ = 0, compute_sequence_ = 0;
  bool aborted_ = false;
  bool symmetric_ = false;
  std::vector<void*> windows_;  // ncclMemAlloc'd memory of the registered windows
};

}  // namespace dlbench::parallel

#endif
