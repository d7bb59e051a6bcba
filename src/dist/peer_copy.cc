#include "dist/peer_copy.h"

#if DLBENCH_WITH_CUDA

#include <cuda.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "core/status.h"

namespace dlbench::dist {

namespace {

// The driver's stream memory operations, looked up at run time: dlbench links the CUDA runtime only, so
// that it starts on machines without a driver (CPU runs, CI).
using WriteValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using WaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using DeviceGetAttribute = CUresult (*)(int*, CUdevice_attribute, CUdevice);

struct MemoryOps {
  WriteValue32 write = nullptr;
  WaitValue32 wait = nullptr;
  unsigned wait_flags = CU_STREAM_WAIT_VALUE_EQ;
};
MemoryOps memory_ops;  // set by create(), read-only afterwards

template <typename Fn>
bool driver_function(const char* name, Fn* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || p == nullptr) {
    cudaGetLastError();
    return false;
  }
  *fn = reinterpret_cast<Fn>(p);
  return true;
}

void check_driver(CUresult result, const char* what) {
  DLB_CHECK(result == CUDA_SUCCESS, "{} failed (CUresult {})", what, static_cast<int>(result));
}

void raise_flag(uint32_t* flag, cudaStream_t stream) {
  check_driver(memory_ops.write(stream, reinterpret_cast<CUdeviceptr>(flag), 1, CU_STREAM_WRITE_VALUE_DEFAULT),
               "cuStreamWriteValue32");
}

// Waits until the flag is up, then lowers it (both on the stream, in order).
void take_flag(uint32_t* flag, cudaStream_t stream) {
  check_driver(memory_ops.wait(stream, reinterpret_cast<CUdeviceptr>(flag), 1, memory_ops.wait_flags),
               "cuStreamWaitValue32");
  check_driver(memory_ops.write(stream, reinterpret_cast<CUdeviceptr>(flag), 0, CU_STREAM_WRITE_VALUE_DEFAULT),
               "cuStreamWriteValue32");
}

void copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes > 0) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
}

constexpr int kSent = 0, kGathered = 1;

}  // namespace

std::shared_ptr<PeerCopyGroup> PeerCopyGroup::create(int ranks, std::string* why_not) {
  auto refuse = [&](std::string why) {
    if (why_not) *why_not = std::move(why);
    return std::shared_ptr<PeerCopyGroup>();
  };
  if (ranks < 2) return refuse("one GPU has nothing to exchange");
  DeviceGetAttribute get_attribute = nullptr;
  if (!driver_function("cuStreamWriteValue32", &memory_ops.write) ||
      !driver_function("cuStreamWaitValue32", &memory_ops.wait) ||
      !driver_function("cuDeviceGetAttribute", &get_attribute)) {
    return refuse("the CUDA driver has no stream memory operations");
  }
  bool flush = true;
  for (int d = 0; d < ranks; ++d) {
    int can_flush = 0;
    if (get_attribute(&can_flush, CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, d) != CUDA_SUCCESS) can_flush = 0;
    flush = flush && can_flush;
    CUDA_CHECK(cudaSetDevice(d));
    for (int peer = 0; peer < ranks; ++peer) {
      if (peer == d) continue;
      int can = 0;
      CUDA_CHECK(cudaDeviceCanAccessPeer(&can, d, peer));
      if (!can) return refuse(fmt::format("cuda:{} cannot reach cuda:{} directly (no peer access)", d, peer));
      const cudaError_t enabled = cudaDeviceEnablePeerAccess(peer, 0);
      if (enabled == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();
      } else {
        CUDA_CHECK(enabled);
      }
    }
  }
  // Remote writes (the peers' copies) are flushed before work that follows a satisfied wait, where the
  // device can; elsewhere the copy completing before its flag is written orders them.
  if (flush) memory_ops.wait_flags |= CU_STREAM_WAIT_VALUE_FLUSH;
  std::shared_ptr<PeerCopyGroup> group(new PeerCopyGroup(ranks));
  const size_t flag_bytes = sizeof(uint32_t) * static_cast<size_t>(ranks * ranks * 2);
  CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&group->flags_), flag_bytes,
                           cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(group->flags_, 0, flag_bytes);
  return group;
}

PeerCopyGroup::PeerCopyGroup(int ranks) : ranks_(ranks), areas_(static_cast<size_t>(ranks), nullptr) {}

PeerCopyGroup::~PeerCopyGroup() {
  for (int r = 0; r < ranks_; ++r) {
    if (areas_[static_cast<size_t>(r)] != nullptr) {
      cudaSetDevice(r);
      cudaFree(areas_[static_cast<size_t>(r)]);
    }
  }
  if (flags_ != nullptr) cudaFreeHost(flags_);
}

uint32_t* PeerCopyGroup::flag(int owner, int from, int kind) const {
  return flags_ + (static_cast<size_t>(owner) * static_cast<size_t>(ranks_) + static_cast<size_t>(from)) * 2 +
         static_cast<size_t>(kind);
}

std::byte* PeerCopyGroup::slot(int owner, int area, int from) const {
  // Each area holds ranks - 1 slots, one per peer, in rank order without the owner.
  const int index = area * (ranks_ - 1) + (from < owner ? from : from - 1);
  return areas_[static_cast<size_t>(owner)] + static_cast<size_t>(index) * slot_bytes_;
}

void PeerCopyGroup::reserve(int rank, size_t bytes, ThreadGroup& group) {
  if (bytes <= reserved_) return;  // the same answer on every rank: same bytes, same reserved_
  group.barrier(rank);             // every rank is here: none is still reading reserved_ or the areas
  // A shard of any tensor up to `bytes`: bytes / ranks, plus its rounding to 8 elements (32 bytes of f32).
  const size_t slot_bytes = (bytes / static_cast<size_t>(ranks_) + 64 + 255) / 256 * 256;
  CUDA_CHECK(cudaSetDevice(rank));
  CUDA_CHECK(cudaDeviceSynchronize());
  std::byte*& area = areas_[static_cast<size_t>(rank)];
  if (area != nullptr) CUDA_CHECK(cudaFree(area));
  area = nullptr;
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&area), slot_bytes * 2 * static_cast<size_t>(ranks_ - 1)));
  if (rank == 0) {
    slot_bytes_ = slot_bytes;
    reserved_ = bytes;
  }
  group.barrier(rank);  // every area is allocated and published
}

void PeerCopyGroup::all_reduce_sum(int rank, Tensor& x, cudaStream_t stream) {
  DLB_CHECK(x.bytes() <= reserved_, "peer-copy all-reduce of {} bytes, {} reserved", x.bytes(), reserved_);
  const DType dtype = x.dtype();
  const size_t element = dtype_size(dtype);
  const int64_t count = x.numel();
  // Shards of whole 8-element groups (16-byte aligned for f16/bf16, 32 for f32): vector loads in the sum.
  const int64_t n = ranks_;
  const int64_t shard = ((count + n - 1) / n + 7) / 8 * 8;
  auto begin = [&](int k) { return std::min<int64_t>(count, k * shard); };
  auto length = [&](int k) { return std::min<int64_t>(count, (k + 1) * shard) - begin(k); };
  auto at = [&](int k) { return static_cast<std::byte*>(x.data()) + static_cast<size_t>(begin(k)) * element; };
  auto bytes = [&](int k) { return static_cast<size_t>(length(k)) * element; };

  // 1. scatter: each peer's shard to that peer (peers in turn from the next rank, to spread the links).
  for (int j = 1; j < ranks_; ++j) {
    const int k = (rank + j) % ranks_;
    copy(slot(k, 0, rank), at(k), bytes(k), stream);
    raise_flag(flag(k, rank, kSent), stream);
  }
  // 2. reduce: once every peer's copy of my shard is here.
  for (int j = 1; j < ranks_; ++j) take_flag(flag(rank, (rank + j) % ranks_, kSent), stream);
  if (length(rank) > 0) {
    cuda::sum_into(at(rank), slot(rank, 0, rank == 0 ? 1 : 0), static_cast<int64_t>(slot_bytes_ / element),
                   ranks_ - 1, dtype, length(rank), stream);
  }
  // 3. gather: the summed shard to every peer.
  for (int j = 1; j < ranks_; ++j) {
    const int k = (rank + j) % ranks_;
    copy(slot(k, 1, rank), at(rank), bytes(rank), stream);
    raise_flag(flag(k, rank, kGathered), stream);
  }
  // 4. collect: every peer's summed shard into place.
  for (int j = 1; j < ranks_; ++j) {
    const int k = (rank + j) % ranks_;
    take_flag(flag(rank, k, kGathered), stream);
    copy(at(k), slot(rank, 1, k), bytes(k), stream);
  }
}

}  // namespace dlbench::dist

#endif
