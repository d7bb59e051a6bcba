// PeerCopyAllReduce: the all-reduce of the GPUs of one process (--gpus N) done by their copy engines, so
// that a sum running beside backward takes no SMs from it (--allreduce-engine copy).
//
// Why: cuDNN's semi-persistent batch-norm kernels size their grid to the whole GPU and need every block
// resident; an NCCL kernel holding even one SM while one of them starts makes it wait, and convolutions
// beside it lose the SMs it holds. On a 2-GPU NVLink machine the layers that ran beside an all-reduce
// slowed down by about as much time as the overlap hid. Copies over NVLink run on the copy engines; only a
// short summing kernel per bucket and rank runs on the SMs.
//
// The tensor of n ranks is cut into n shards; rank k owns shard k. For one all-reduce, on each rank r's
// communication stream:
//   1. scatter: for every peer k, copy x_r[shard k] into k's receive area, slot r; raise k's flag sent[r]
//   2. reduce:  wait until every peer's sent flag is up (and lower it); x_r[shard r] += the slots, summed
//               in f32 (exact for f32 inputs of two ranks, one rounding for f16/bf16)
//   3. gather:  copy the summed x_r[shard r] into every peer's gather area, slot r; raise its gathered[r]
//   4. collect: wait for every peer's gathered flag (and lower it); copy its slot into x_r[shard k]
// Flags live in pinned host memory that every GPU maps, written and awaited by stream memory operations
// (cuStreamWriteValue32 / cuStreamWaitValue32): the front end of the GPU waits, no SM spins, and the
// operations are captured into a CUDA graph like any other. A flag is raised to 1 and lowered by the one
// rank that waits on it; the order of the steps makes every reuse safe without further flags: a rank
// scatters the next tensor only after collecting this one, which needs every peer to have summed (so its
// receive slot is free), and a rank gathers the next tensor only after every peer's next scatter, which
// each peer issues after collecting this one (so its gather slot was read).
//
// Every rank must call all_reduce_sum with tensors of the same sizes in the same order (as with NCCL).
// Tensors larger than the reserved room, and machines where some pair of GPUs cannot reach each other
// directly, are summed by NCCL instead (the caller asks usable()).
#pragma once

#if DLBENCH_WITH_CUDA

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "dist/thread_group.h"

namespace dlbench::dist {

class PeerCopyGroup {
 public:
  // For GPUs 0..ranks-1 of this process; null when some pair has no peer access or the driver lacks
  // stream memory operations (the reason goes to `why_not`).
  static std::shared_ptr<PeerCopyGroup> create(int ranks, std::string* why_not);
  ~PeerCopyGroup();
  PeerCopyGroup(const PeerCopyGroup&) = delete;
  PeerCopyGroup& operator=(const PeerCopyGroup&) = delete;

  int ranks() const { return ranks_; }
  // Collective (every rank's thread, with the same `bytes`): makes room for tensors of up to `bytes`, on
  // rank `rank`'s GPU. Synchronises that GPU when it grows the room.
  void reserve(int rank, size_t bytes, ThreadGroup& group);
  size_t reserved() const { return reserved_; }
  // Enqueues the all-reduce of `x` (f32, f16 or bf16, at most reserved() bytes) on `stream` of rank
  // `rank`'s GPU.
  void all_reduce_sum(int rank, Tensor& x, cudaStream_t stream);

 private:
  explicit PeerCopyGroup(int ranks);
  uint32_t* flag(int owner, int from, int kind) const;
  std::byte* slot(int owner, int area, int from) const;  // area 0: receive, 1: gather

  int ranks_;
  uint32_t* flags_ = nullptr;  // pinned host memory mapped on every GPU: [owner][from][kind]
  size_t reserved_ = 0;
  size_t slot_bytes_ = 0;            // one shard of the largest tensor
  std::vector<std::byte*> areas_;  // per rank, on its GPU: 2 areas x ranks slots of slot_bytes_
};

}  // namespace dlbench::dist

#endif
