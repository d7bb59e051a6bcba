#include "data/cuda/nvjpeg_memory.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <mutex>
#include <vector>

namespace dlbench::cuda {
namespace {

struct Block {
  void* pointer = nullptr;
  size_t bytes = 0;
  int key = 0;  // the device (device memory) or the cudaHostAlloc flags (pinned)
  bool in_use = false;
};

class BlockCache {
 public:
  using Allocate = cudaError_t (*)(void**, size_t, unsigned);

  int take(void** pointer, size_t bytes, int key, Allocate allocate, unsigned flags) {
    std::lock_guard<std::mutex> lock(mutex_);
    Block* best = nullptr;
    for (Block& b : blocks_)
      if (!b.in_use && b.key == key && b.bytes >= bytes && b.bytes / 2 <= bytes &&
          (!best || b.bytes < best->bytes))
        best = &b;
    if (best) {
      best->in_use = true;
      *pointer = best->pointer;
      return 0;
    }
    void* p = nullptr;
    const cudaError_t error = allocate(&p, bytes, flags);
    if (error != cudaSuccess) return static_cast<int>(error);
    blocks_.push_back({p, bytes, key, true});
    *pointer = p;
    return 0;
  }

  int give_back(void* pointer) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Block& b : blocks_)
      if (b.pointer == pointer) {
        b.in_use = false;
        return 0;
      }
    return static_cast<int>(cudaErrorInvalidValue);  // not ours
  }

 private:
  std::mutex mutex_;
  std::vector<Block> blocks_;
};

// Never destroyed: nvJPEG handles of static objects may free into it at exit.
BlockCache& device_cache() {
  static auto* cache = new BlockCache;
  return *cache;
}
BlockCache& pinned_cache() {
  static auto* cache = new BlockCache;
  return *cache;
}

cudaError_t device_allocate(void** p, size_t bytes, unsigned) { return cudaMalloc(p, bytes); }
cudaError_t pinned_allocate(void** p, size_t bytes, unsigned flags) { return cudaHostAlloc(p, bytes, flags); }

int device_malloc(void** p, size_t bytes) {
  int device = 0;
  if (const cudaError_t error = cudaGetDevice(&device); error != cudaSuccess) return static_cast<int>(error);
  return device_cache().take(p, bytes, device, device_allocate, 0);
}
int device_free(void* p) { return p ? device_cache().give_back(p) : 0; }
int pinned_malloc(void** p, size_t bytes, unsigned flags) {
  return pinned_cache().take(p, bytes, static_cast<int>(flags), pinned_allocate, flags);
}
int pinned_free(void* p) { return p ? pinned_cache().give_back(p) : 0; }

}  // namespace

nvjpeg::nvjpegDevAllocator_t* cached_nvjpeg_device_allocator() {
  static nvjpeg::nvjpegDevAllocator_t allocator{device_malloc, device_free};
  return &allocator;
}

nvjpeg::nvjpegPinnedAllocator_t* cached_nvjpeg_pinned_allocator() {
  static nvjpeg::nvjpegPinnedAllocator_t allocator{pinned_malloc, pinned_free};
  return &allocator;
}

}  // namespace dlbench::cuda
