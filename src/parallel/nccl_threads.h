// NcclThreadsGroup: one process, one thread per GPU (the Caffe2/MXNet way; `--gpus N`).
//
// Created once per process, before the rank threads start: it makes one NCCL communicator per GPU
// 0..N-1 from one ncclUniqueId (ncclCommInitRankConfig for each, inside one ncclGroupStart/End,
// non-blocking) and the ThreadGroup that carries the control plane in shared memory and watches every
// rank. Each rank's thread then calls join(rank, its backend) for its Communicator ("nccl-threads").
#pragma once

#if DLBENCH_WITH_CUDA

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "parallel/communicator.h"
#include "parallel/launch.h"
#include "parallel/thread_group.h"

struct ncclComm;

namespace dlbench::parallel {

class NcclThreadsGroup {
 public:
  // Throws UserError when the machine has fewer than `gpus` GPUs.
  NcclThreadsGroup(int gpus, double timeout_seconds, const NcclTuning& nccl = {});
  ~NcclThreadsGroup();
  NcclThreadsGroup(const NcclThreadsGroup&) = delete;
  NcclThreadsGroup& operator=(const NcclThreadsGroup&) = delete;

  int size() const { return static_cast<int>(comms_.size()); }
  // From rank `rank`'s thread, once per rank; `backend` is that thread's backend on GPU `rank` and
  // outlives the communicator. The communicator keeps what it needs of the group.
  std::unique_ptr<Communicator> join(int rank, Backend& backend);
  // A rank failed: wakes the others' control-plane waits with an error, aborts the NCCL communicators.
  void abort(const std::string& reason);

 private:
  std::shared_ptr<ThreadGroup> group_;
  std::mutex mutex_;
  NcclTuning nccl_;
  std::vector<ncclComm*> comms_;  // handed to the ranks' data planes at join (nullptr afterwards)
};

}  // namespace dlbench::parallel

#endif
