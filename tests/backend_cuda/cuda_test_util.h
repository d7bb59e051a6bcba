// Helpers of the CUDA backend's tests: device tensors owned through the backend, host data rounded to
// a dtype (through the reference backend's round-to-nearest-even casts), tolerances per dtype.
//
// A test of an op in dtype D draws f32 data, rounds it to D (so both sides see the same values), runs the
// op on the GPU in D and the reference in f32 on the rounded values (f64 in f64), and compares after
// converting the GPU's result to f32: max |a - b| / max |reference| (NaN never passes).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda_options.h"
#include "core/status.h"
#include "core/tensor.h"
#include "test_util.h"

namespace dlbench::cuda_testing {

using testing::fill_uniform;
using testing::relative_error;

inline constexpr Device kGpu{DeviceKind::cuda, 0};

// One backend per distinct CudaOptions for the whole test binary (creating cuDNN and cuBLAS handles is
// slow); never destroyed, so that nothing touches CUDA after the runtime has shut down at exit.
inline Backend& shared_gpu(const CudaOptions& options) {
  static std::vector<std::pair<CudaOptions, Backend*>> backends;
  for (const auto& [o, b] : backends)
    if (o == options) return *b;
  backends.emplace_back(options, make_cuda_backend(0, options).release());
  return *backends.back().second;
}
// The default options, TF32 allowed or not.
inline Backend& shared_gpu(bool allow_tf32 = false) {
  CudaOptions options;
  options.allow_tf32 = allow_tf32;
  return shared_gpu(options);
}
// `options` with TF32 allowed or not.
inline CudaOptions with_tf32(CudaOptions options, bool allow_tf32) {
  options.allow_tf32 = allow_tf32;
  return options;
}

// The dtype the reference computes in for a GPU dtype: f64 stays f64, the rest run in f32.
inline DType reference_dtype(DType d) { return d == DType::f64 ? DType::f64 : DType::f32; }

// Relative tolerance of a GPU result in `dtype` against the reference (scaled by `factor` for ops that sum
// long series in another order).
inline double tolerance(DType dtype, bool tf32 = false, double factor = 1.0) {
  switch (dtype) {
    case DType::f32:
      return (tf32 ? 1e-3 : 1e-5) * factor;
    case DType::f64:
      return 1e-12 * factor;
    case DType::f16:
      return 2e-3 * factor;
    case DType::bf16:
      return 1e-2 * factor;
    default:
      return 0;
  }
}

inline HostBuffer copy_of(const HostBuffer& src) {
  HostBuffer b(src.tensor().dims(), src.tensor().dtype(), src.tensor().layout());
  std::memcpy(b.tensor().data(), src.tensor().data(), src.tensor().bytes());
  return b;
}

// Host data in `dtype` (f32/f64 filled uniformly, f16/bf16 rounded from f32 draws).
inline HostBuffer random_host(Backend& ref, std::vector<int64_t> dims, DType dtype, uint64_t seed,
                              Layout layout = Layout::nchw, double lo = -1.0, double hi = 1.0) {
  HostBuffer wide(dims, reference_dtype(dtype), layout);
  fill_uniform(wide.tensor(), seed, lo, hi);
  if (dtype == reference_dtype(dtype)) return wide;
  HostBuffer narrow(std::move(dims), dtype, layout);
  ref.cast(wide.tensor(), narrow.tensor());
  return narrow;
}

// A host buffer converted to `dtype` (the reference's casts; same dims and layout).
inline HostBuffer converted(Backend& ref, const HostBuffer& src, DType dtype) {
  HostBuffer out(src.tensor().dims(), dtype, src.tensor().layout());
  ref.cast(src.tensor(), out.tensor());
  return out;
}

// x's per-channel sums and sums of squares ([2, C] FP64, computed in double), as a convolution hands them to
// the batch norm after it (Backend::conv_forward_with_statistics). NCHW or NHWC.
inline HostBuffer channel_sums(Backend& ref, const HostBuffer& x) {
  const Tensor& t = x.tensor();
  const HostBuffer wide = converted(ref, x, DType::f64);
  const int64_t n = t.n(), c = t.c(), h = t.h(), w = t.w();
  HostBuffer out({2, c}, DType::f64);
  double* sums = out.tensor().ptr<double>();
  std::fill(sums, sums + 2 * c, 0.0);
  for (int64_t i = 0; i < n * c * h * w; ++i) {
    // The element's channel: NHWC keeps channels innermost, NCHW planes of h * w.
    const int64_t channel = t.layout() == Layout::nhwc ? i % c : (i / (h * w)) % c;
    const double v = wide.tensor().ptr<double>()[i];
    sums[channel] += v;
    sums[c + channel] += v * v;
  }
  return out;
}

// Device memory of one tensor, allocated and freed through the backend.
class DeviceTensor {
 public:
  DeviceTensor(Backend& gpu, std::vector<int64_t> dims, DType dtype, Layout layout = Layout::nchw)
      : gpu_(&gpu), tensor_(nullptr, std::move(dims), dtype, layout, kGpu) {
    tensor_.set_data(gpu.allocate(tensor_.bytes()));
  }
  // A device copy of a host buffer (same dtype, dims and layout).
  DeviceTensor(Backend& gpu, const HostBuffer& host)
      : DeviceTensor(gpu, host.tensor().dims(), host.tensor().dtype(), host.tensor().layout()) {
    upload(host);
  }
  ~DeviceTensor() {
    if (tensor_.data()) gpu_->deallocate(tensor_.data());
  }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  Tensor& tensor() { return tensor_; }
  const Tensor& tensor() const { return tensor_; }
  Tensor* ptr() { return &tensor_; }
  void upload(const HostBuffer& host) {
    EXPECT_EQ(host.tensor().bytes(), tensor_.bytes());
    gpu_->copy_to_device(tensor_.data(), host.tensor().data(), tensor_.bytes());
  }
  // The contents, in the tensor's own dtype.
  HostBuffer download() const {
    HostBuffer host(tensor_.dims(), tensor_.dtype(), tensor_.layout());
    gpu_->copy_to_host(host.tensor().data(), tensor_.data(), tensor_.bytes());
    return host;
  }

 private:
  Backend* gpu_;
  Tensor tensor_;
};

// Device scratch of at least `bytes` bytes (a plan's workspace_bytes()).
inline std::unique_ptr<DeviceTensor> workspace(Backend& gpu, size_t bytes) {
  return std::make_unique<DeviceTensor>(gpu, std::vector<int64_t>{static_cast<int64_t>(bytes / 4 + 1)},
                                        DType::i32);
}

// The GPU tensor's contents as the reference's dtype (f32 or f64), for comparisons.
inline HostBuffer download_wide(Backend& ref, const DeviceTensor& t) {
  HostBuffer raw = t.download();
  const DType wide = reference_dtype(t.tensor().dtype());
  if (raw.tensor().dtype() == wide) return raw;
  return converted(ref, raw, wide);
}

// Compares and prints the error, so that a run's log shows how close each result came.
inline void expect_close(const char* what, const Tensor& actual, const Tensor& expected, double tol) {
  const double err = relative_error(actual, expected);
  EXPECT_LE(err, tol) << what;
  std::printf("    %-34s rel err %.3g (tol %.3g)\n", what, err, tol);
}

// Whether two host buffers hold the same bytes.
inline bool same_bits(const HostBuffer& a, const HostBuffer& b) {
  return a.tensor().bytes() == b.tensor().bytes() &&
         std::memcmp(a.tensor().data(), b.tensor().data(), a.tensor().bytes()) == 0;
}

}  // namespace dlbench::cuda_testing
