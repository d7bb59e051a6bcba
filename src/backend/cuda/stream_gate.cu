#include "backend/cuda/kernel_check.h"
#include "backend/cuda/stream_gate.h"

namespace dlbench::cuda {
namespace {

constexpr uint64_t kSafetyNanoseconds = 1'000'000'000;

__global__ void wait_for_gate(const volatile int32_t* flag, uint64_t limit_ns) {
  uint64_t start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    if (*flag != 0) return;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < limit_ns);
}

}  // namespace

StreamGate::StreamGate() {
  void* host = nullptr;
  DLB_KERNEL_CHECK(cudaHostAlloc(&host, sizeof(int32_t), cudaHostAllocMapped | cudaHostAllocPortable));
  flag_ = static_cast<volatile int32_t*>(host);
  *flag_ = 1;
  void* device = nullptr;
  DLB_KERNEL_CHECK(cudaHostGetDevicePointer(&device, host, 0));
  device_flag_ = static_cast<int32_t*>(device);
}

StreamGate::~StreamGate() {
  if (flag_) cudaFreeHost(const_cast<int32_t*>(flag_));
}

void StreamGate::close(cudaStream_t stream) {
  *flag_ = 0;
  wait_for_gate<<<1, 1, 0, stream>>>(device_flag_, kSafetyNanoseconds);
  DLB_KERNEL_CHECK(cudaGetLastError());
}

void StreamGate::open() {
  // A full fence first: the GPU must see the flag only after everything the host wrote before it.
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  *flag_ = 1;
}

}  // namespace dlbench::cuda
