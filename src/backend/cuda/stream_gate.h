// A gate on a stream: work queued behind a closed gate waits on the GPU until the host opens it, then runs
// back to back however long the host took to queue it. The algorithm searches time candidates this way
// (tuning/cuda_timing.h).
//
// Why not a fixed hold (hold_stream): the host's time to queue a round of calls varies from tens of
// microseconds (a cuBLAS GEMM) to about a millisecond (a cuDNN graph's execute), so a fixed hold must be
// the longest, and it was paid by every round of every candidate: about three quarters of a first start's
// search on an H200 (2 ms x 3 rounds for each of ~60 candidates per convolution shape).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dlbench::cuda {

class StreamGate {
 public:
  StreamGate();
  ~StreamGate();
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  // Queues on `stream` one thread that waits until open() (or, as a safety net should the host never
  // open it, one second). The previous close's wait must have finished (the caller synchronized on work
  // queued after it).
  void close(cudaStream_t stream);
  // Lets the waiting thread go; the work behind it starts.
  void open();

 private:
  volatile int32_t* flag_ = nullptr;  // mapped host memory: 0 closed, 1 open
  int32_t* device_flag_ = nullptr;    // the same memory, as the GPU addresses it
};

// Closes `gate` on `stream` for its scope and opens it on leaving, also when the scope is left by an
// exception, so that a stream is never left waiting.
class ClosedGate {
 public:
  ClosedGate(StreamGate& gate, cudaStream_t stream) : gate_(gate) { gate_.close(stream); }
  ~ClosedGate() { gate_.open(); }
  ClosedGate(const ClosedGate&) = delete;
  ClosedGate& operator=(const ClosedGate&) = delete;

 private:
  StreamGate& gate_;
};

}  // namespace dlbench::cuda
