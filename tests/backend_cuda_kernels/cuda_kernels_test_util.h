// Helpers for the tests of dlbench's own CUDA kernels: a fixture that skips without a GPU, device buffers
// placed at a chosen byte offset (to reach the unaligned, element-by-element paths), and host buffers of
// any dtype read and written as doubles.
#pragma once

#ifdef DLBENCH_WITH_CUDA

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/kernel_check.h"
#include "backend/cuda/kernels.h"
#include "backend/reference/reference_common.h"
#include "core/tensor.h"

namespace dlbench::testing {

// Skips every test of a fixture deriving from it where no CUDA GPU is present (CI), and says why.
class CudaKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess) {
      (void)cudaGetLastError();
      GTEST_SKIP() << "no CUDA GPU: cudaGetDeviceCount failed: " << cudaGetErrorString(error);
    }
    if (count == 0) GTEST_SKIP() << "no CUDA GPU: cudaGetDeviceCount returned 0";
    // A blocking stream: the plain cudaMemcpy calls of DeviceBuffer (legacy default stream) are ordered
    // with the kernels on it. A pageable-memory upload may return before its DMA lands, so a non-blocking
    // stream could read stale data.
    DLB_KERNEL_CHECK(cudaStreamCreate(&stream_));
  }
  void TearDown() override {
    if (stream_) {
      EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      EXPECT_EQ(cudaStreamDestroy(stream_), cudaSuccess);
    }
  }
  void sync() { DLB_KERNEL_CHECK(cudaStreamSynchronize(stream_)); }

  cudaStream_t stream_ = nullptr;
};

// Device memory whose usable part starts `offset_bytes` past a 256-byte aligned allocation.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes, size_t offset_bytes = 0) : bytes_(bytes) {
    DLB_KERNEL_CHECK(cudaMalloc(&base_, bytes + offset_bytes + 64));
    ptr_ = static_cast<char*>(base_) + offset_bytes;
  }
  ~DeviceBuffer() { cudaFree(base_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(ptr_);
  }
  void upload(const void* host, size_t bytes) {
    DLB_KERNEL_CHECK(cudaMemcpy(ptr_, host, std::min(bytes, bytes_), cudaMemcpyHostToDevice));
  }
  void upload(const HostBuffer& host) { upload(host.tensor().data(), host.tensor().bytes()); }
  void download(void* host, size_t bytes) const {
    DLB_KERNEL_CHECK(cudaMemcpy(host, ptr_, std::min(bytes, bytes_), cudaMemcpyDeviceToHost));
  }
  void download(HostBuffer& host) const { download(host.tensor().data(), host.tensor().bytes()); }

 private:
  void* base_ = nullptr;
  char* ptr_ = nullptr;
  size_t bytes_;
};

inline double get(const HostBuffer& b, int64_t i) { return reference::load_element(b.tensor(), i); }
inline void set(HostBuffer& b, int64_t i, double v) { reference::store_element(b.tensor(), i, v); }
// `value` rounded to the dtype (round to nearest even, straight from double).
inline double rounded(double value, DType dtype) {
  HostBuffer b({1}, dtype);
  set(b, 0, value);
  return get(b, 0);
}

// n values uniform in [lo, hi), each already rounded to `dtype` (so they are exact inputs for any dtype).
inline HostBuffer random_values(int64_t n, DType dtype, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  HostBuffer b({n}, dtype);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < n; ++i) set(b, i, dist(rng));
  return b;
}

// Relative error of a dtype's arithmetic: one rounding in f32 arithmetic, then one to the dtype.
inline double tolerance(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return 1e-3;
    case DType::bf16:
      return 8e-3;
    case DType::f64:
      return 1e-12;
    default:
      return 2e-7;
  }
}

// max |actual - expected| / max(max |expected|, floor), +inf on NaN in one but not the other.
inline double max_relative_error(const std::vector<double>& actual, const std::vector<double>& expected,
                                 double floor = 1e-6) {
  double diff = 0, scale = floor;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double a = actual[i], b = expected[i];
    if (std::isnan(a) != std::isnan(b)) return INFINITY;
    if (std::isnan(a) || (std::isinf(a) && a == b)) continue;
    diff = std::max(diff, std::abs(a - b));
    scale = std::max(scale, std::abs(b));
  }
  return diff / scale;
}

inline std::vector<double> values(const HostBuffer& b) {
  std::vector<double> v(static_cast<size_t>(b.numel()));
  for (int64_t i = 0; i < b.numel(); ++i) v[static_cast<size_t>(i)] = get(b, i);
  return v;
}

// Sizes that hit: a single element, less than one vector, odd counts with vector tails, and a large
// count over many grid strides.
inline const std::vector<int64_t>& odd_sizes() {
  static const std::vector<int64_t> sizes = {1, 7, 8, 1023, 65537, 1 << 20 | 3};
  return sizes;
}

inline const std::vector<DType>& float_dtypes() {
  static const std::vector<DType> dtypes = {DType::f32, DType::f16, DType::bf16, DType::f64};
  return dtypes;
}

}  // namespace dlbench::testing

#endif  // DLBENCH_WITH_CUDA
