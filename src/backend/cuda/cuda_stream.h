// Streams of the CUDA backend and of the GPU communicators, created alike: non-blocking (no implicit
// synchronisation with the legacy default stream), at the device's lowest or greatest priority.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_check.h"

namespace dlbench::cuda {

// A new stream on the current device. `greatest_priority`: its thread blocks are scheduled before those of
// streams at a lower priority (CUDA: the lower the number, the higher the priority); otherwise the lowest,
// which is also the priority of a stream created without one.
inline cudaStream_t new_stream(bool greatest_priority) {
  int lowest = 0, greatest = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &greatest));
  cudaStream_t stream = nullptr;
  CUDA_CHECK(
      cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest_priority ? greatest : lowest));
  return stream;
}

}  // namespace dlbench::cuda
