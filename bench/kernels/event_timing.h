// What the standalone GPU programs of bench/kernels (gpu_ceilings, the GPT-2 GEMM probes) share: errors
// that end the program with one line naming it, and the median time of a body between two CUDA events.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace kernel_bench {

inline const char* program = "probe";  // set by main: the name each error line starts with

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s: %s\n", program, what, cudaGetErrorString(e));
    std::exit(1);
  }
}
inline void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s: %s: cuBLAS status %d\n", program, what, static_cast<int>(s));
    std::exit(1);
  }
}

// The median over `reps` runs of `body` on `stream`, in milliseconds, each between two events, after
// `warm_ups` untimed runs.
inline double median_ms(cudaStream_t stream, int reps, const std::function<void()>& body, int warm_ups = 0) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  for (int i = 0; i < warm_ups; ++i) body();
  if (warm_ups > 0) check(cudaStreamSynchronize(stream), "warm-up");
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    check(cudaEventRecord(start, stream), "record");
    body();
    check(cudaEventRecord(stop, stream), "record");
    check(cudaEventSynchronize(stop), "synchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// The mean time of `body` in milliseconds, run back to back for about `window_ms` of GPU time after as
// long again untimed: the rate a power-capped GPU holds once it sits at its cap (its clock lowered), not
// the rate of a short burst at full clock, which is what median_ms sees. A step of many GEMMs runs at
// the cap, so their ranking there is the one that matters to it.
inline double sustained_ms(cudaStream_t stream, double window_ms, const std::function<void()>& body) {
  const double one = median_ms(stream, 3, body, 1);
  const int count = std::max(1, static_cast<int>(window_ms / std::max(one, 1e-3)));
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  for (int i = 0; i < count; ++i) body();  // to the cap
  check(cudaEventRecord(start, stream), "record");
  for (int i = 0; i < count; ++i) body();
  check(cudaEventRecord(stop, stream), "record");
  check(cudaEventSynchronize(stop), "synchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / count;
}

}  // namespace kernel_bench
