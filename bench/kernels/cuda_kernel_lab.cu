// The CUDA kernel lab: every launcher of backend/cuda/kernels.h checked and timed on the GPU in one table.
// Not a test (tests/backend_cuda_kernels is); this is where to see whether a kernel is near the memory
// bandwidth ceiling.
//
// For each kernel and dtype (f32, f16, bf16):
//   * validation: the kernel on random data (about 1M elements, odd sizes) against a CPU reference computed
//     in double beside it; max relative error = max |gpu - cpu| / max |cpu|, next to the tolerance;
//   * timing: the median of --reps launches, each between two CUDA events, on buffers far larger than the
//     L2 (--melems million elements, 64 by default); GB/s = bytes the kernel must read and write / median
//     time, and the share of the device-to-device copy rate measured at start (cudaMemcpyAsync, bytes
//     read + written; about 4.3 TB/s on an H200).
// Shapes marked "small" are the sizes a training step really uses (a batch of 256 logits, ResNet-20's
// parameters): launch latency, not bandwidth, is what they show. The FP8 quantization runs at the shapes
// of gpt2-large's dense operands at batch 16 x 1024 (16,384 rows of 1,280 and 5,120 BF16 values), each
// way a dense op asks for it, and the summing of its column partials (the bias gradient). The layer norm
// runs at gpt2-large's [16,384, 1,280], and GPT-2's loss with its gradient at 16,384 rows of 50,304.
// The bias gradient of gpt2-large's dense outputs (16,384 rows of 3,840, 1,280 and 5,120): dlbench's
// bias_backward, which the BF16 dense layers run after their weight GEMMs. AdamW's update over gpt2-large's
// 774M parameters with BF16 copies, as a BF16 run's step ends.
//
//   cuda_kernel_lab [--reps N] [--melems M] [--only gpt]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/kernel_check.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/reference/half_float.h"
#include "core/fp8.h"

using namespace dlbench;

namespace {

// ---- host data in any dtype, as doubles ----

double load(const unsigned char* p, DType d, size_t i) {
  switch (d) {
    case DType::f32: {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case DType::f64: {
      double v;
      std::memcpy(&v, p + 8 * i, 8);
      return v;
    }
    case DType::f16:
    case DType::bf16: {
      uint16_t bits;
      std::memcpy(&bits, p + 2 * i, 2);
      return d == DType::f16 ? f16_to_double(bits) : bf16_to_double(bits);
    }
    case DType::i32: {
      int32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
  }
  return 0;
}

void store(unsigned char* p, DType d, size_t i, double v) {
  switch (d) {
    case DType::f32: {
      const float f = static_cast<float>(v);
      std::memcpy(p + 4 * i, &f, 4);
      return;
    }
    case DType::f64:
      std::memcpy(p + 8 * i, &v, 8);
      return;
    case DType::f16:
    case DType::bf16: {
      const uint16_t bits = d == DType::f16 ? f16_from_double(v) : bf16_from_double(v);
      std::memcpy(p + 2 * i, &bits, 2);
      return;
    }
    case DType::i32: {
      const int32_t x = static_cast<int32_t>(v);
      std::memcpy(p + 4 * i, &x, 4);
      return;
    }
  }
}

double rounded(double v, DType d) {
  unsigned char buf[8];
  store(buf, d, 0, v);
  return load(buf, d, 0);
}

class DeviceMem {
 public:
  explicit DeviceMem(size_t bytes) : bytes_(bytes) {
    DLB_KERNEL_CHECK(cudaMalloc(&ptr_, std::max<size_t>(bytes, 256)));
  }
  ~DeviceMem() { cudaFree(ptr_); }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

// n values uniform in [lo, hi), rounded to d (exact inputs for every dtype).
std::vector<double> random_values(size_t n, DType d, uint64_t seed, double lo = -1, double hi = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = rounded(dist(rng), d);
  return v;
}

void upload(void* dst, const std::vector<double>& v, DType d) {
  std::vector<unsigned char> bytes(v.size() * dtype_size(d));
  for (size_t i = 0; i < v.size(); ++i) store(bytes.data(), d, i, v[i]);
  DLB_KERNEL_CHECK(cudaMemcpy(dst, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
}

std::vector<double> download(const void* src, size_t n, DType d) {
  std::vector<unsigned char> bytes(n * dtype_size(d));
  DLB_KERNEL_CHECK(cudaMemcpy(bytes.data(), src, bytes.size(), cudaMemcpyDeviceToHost));
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = load(bytes.data(), d, i);
  return v;
}

double max_rel_err(const std::vector<double>& gpu, const std::vector<double>& cpu) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (std::isnan(gpu[i]) != std::isnan(cpu[i])) return INFINITY;
    if (std::isnan(cpu[i]) || (std::isinf(cpu[i]) && gpu[i] == cpu[i])) continue;
    diff = std::max(diff, std::abs(gpu[i] - cpu[i]));
    scale = std::max(scale, std::abs(cpu[i]));
  }
  return diff / scale;
}

double tolerance(DType d) { return d == DType::f16 ? 1e-3 : d == DType::bf16 ? 8e-3 : 1e-6; }

// ---- the lab ----

struct Row {
  std::string kernel, dtype, shape;
  double error, tolerance;  // error < 0: not validated at this shape
  double median_us, bytes;
};

class Lab {
 public:
  Lab(int reps, int64_t elements) : reps_(reps), elements_(elements) {
    // Blocking: the lab's plain cudaMemcpy calls (legacy default stream) are ordered with its kernels.
    DLB_KERNEL_CHECK(cudaStreamCreate(&stream_));
  }
  ~Lab() { cudaStreamDestroy(stream_); }
  cudaStream_t stream() const { return stream_; }
  int64_t elements() const { return elements_; }
  void sync() { DLB_KERNEL_CHECK(cudaStreamSynchronize(stream_)); }

  // Median microseconds of one launch, each timed between its own pair of events, after 3 warm-ups.
  template <typename Launch>
  double median_us(Launch&& launch) {
    for (int i = 0; i < 3; ++i) launch();
    std::vector<cudaEvent_t> start(reps_), stop(reps_);
    for (int i = 0; i < reps_; ++i) {
      DLB_KERNEL_CHECK(cudaEventCreate(&start[i]));
      DLB_KERNEL_CHECK(cudaEventCreate(&stop[i]));
    }
    for (int i = 0; i < reps_; ++i) {
      DLB_KERNEL_CHECK(cudaEventRecord(start[i], stream_));
      launch();
      DLB_KERNEL_CHECK(cudaEventRecord(stop[i], stream_));
    }
    DLB_KERNEL_CHECK(cudaGetLastError());
    sync();
    std::vector<float> ms(reps_);
    for (int i = 0; i < reps_; ++i) {
      DLB_KERNEL_CHECK(cudaEventElapsedTime(&ms[i], start[i], stop[i]));
      cudaEventDestroy(start[i]);
      cudaEventDestroy(stop[i]);
    }
    std::sort(ms.begin(), ms.end());
    return 1e3 * ms[ms.size() / 2];
  }

  void add(Row row) { rows_.push_back(std::move(row)); }
  void set_ceiling(double gbs) { ceiling_gbs_ = gbs; }

  int print() const {
    std::printf("\n%-22s %-9s %-22s %11s %9s %4s %11s %9s %7s\n", "kernel", "dtype", "shape", "max_rel_err",
                "tolerance", "ok", "median_us", "GB/s", "%copy");
    int failures = 0;
    for (const Row& r : rows_) {
      const double gbs = r.bytes / (r.median_us * 1e3);
      const bool ok = r.error < 0 || r.error <= r.tolerance;
      failures += !ok;
      char err[32] = "-", tol[32] = "-";
      if (r.error >= 0) {
        std::snprintf(err, sizeof(err), "%.2e", r.error);
        std::snprintf(tol, sizeof(tol), "%.0e", r.tolerance);
      }
      std::printf("%-22s %-9s %-22s %11s %9s %4s %11.2f %9.1f %6.1f%%\n", r.kernel.c_str(), r.dtype.c_str(),
                  r.shape.c_str(), err, tol, ok ? "yes" : "NO", r.median_us, gbs, 100 * gbs / ceiling_gbs_);
    }
    std::printf(
        "\n%%copy: against the device-to-device copy rate measured above (%.0f GB/s). %d validation "
        "failure(s).\n",
        ceiling_gbs_, failures);
    return failures;
  }

 private:
  cudaStream_t stream_ = nullptr;
  int reps_;
  int64_t elements_;
  double ceiling_gbs_ = 1;
  std::vector<Row> rows_;
};

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr int64_t kCheckElements = (1 << 20) + 3;  // validation size: odd, so the vector tails run
std::string mega(int64_t n) { return std::to_string(n >> 20) + "M"; }

// ---- copy ceiling ----

double measure_copy(Lab& lab) {
  const size_t bytes = static_cast<size_t>(lab.elements()) * 4 * 2;  // 512 MB by default
  DeviceMem a(bytes), b(bytes);
  DLB_KERNEL_CHECK(cudaMemset(a.get(), 0, bytes));
  const double us = lab.median_us([&] {
    DLB_KERNEL_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, lab.stream()));
  });
  const double gbs = 2.0 * bytes / (us * 1e3);
  lab.add({"memcpy d2d (ceiling)", "bytes", std::to_string(bytes >> 20) + " MiB", -1, 0, us, 2.0 * bytes});
  return gbs;
}

// ---- elementwise family: CPU reference beside each ----

void lab_elementwise(Lab& lab, DType d) {
  const std::string dt = dtype_name(d);
  const size_t s = dtype_size(d);
  const int64_t nc = kCheckElements, nb = lab.elements();
  DeviceMem a(nb * s), b(nb * s), y(nb * s);
  const std::vector<double> va = random_values(nc, d, 1), vb = random_values(nc, d, 2);
  auto check = [&](const std::vector<double>& expected) {
    return max_rel_err(download(y.get(), nc, d), expected);
  };
  std::vector<double> expected(nc);

  // fill
  cuda::fill(y.get(), d, nc, 1.3, lab.stream());
  std::fill(expected.begin(), expected.end(), rounded(1.3, d));
  double err = check(expected);
  double us = lab.median_us([&] { cuda::fill(y.get(), d, nb, 1.3, lab.stream()); });
  lab.add({"fill", dt, mega(nb), err, 0, us, double(nb * s)});

  // add
  upload(a.get(), va, d);
  upload(b.get(), vb, d);
  cuda::add(a.get(), b.get(), y.get(), d, nc, lab.stream());
  for (int64_t i = 0; i < nc; ++i) expected[i] = rounded(va[i] + vb[i], d);
  err = check(expected);
  us = lab.median_us([&] { cuda::add(a.get(), b.get(), y.get(), d, nb, lab.stream()); });
  lab.add({"add", dt, mega(nb), err, tolerance(d), us, double(3 * nb * s)});

  // scale (in place)
  upload(y.get(), va, d);
  cuda::scale(y.get(), d, nc, -0.37, lab.stream());
  for (int64_t i = 0; i < nc; ++i) expected[i] = rounded(-0.37 * va[i], d);
  err = check(expected);
  us = lab.median_us([&] { cuda::scale(y.get(), d, nb, 1.0, lab.stream()); });
  lab.add({"scale", dt, mega(nb), err, tolerance(d), us, double(2 * nb * s)});

  // relu forward / backward
  cuda::relu_forward(a.get(), y.get(), d, nc, lab.stream());
  for (int64_t i = 0; i < nc; ++i) expected[i] = va[i] < 0 ? 0.0 : va[i];
  err = check(expected);
  us = lab.median_us([&] { cuda::relu_forward(a.get(), y.get(), d, nb, lab.stream()); });
  lab.add({"relu_forward", dt, mega(nb), err, 0, us, double(2 * nb * s)});

  cuda::relu_backward(a.get(), b.get(), y.get(), d, nc, lab.stream());
  for (int64_t i = 0; i < nc; ++i) expected[i] = va[i] > 0 ? vb[i] : 0.0;
  err = check(expected);
  us = lab.median_us([&] { cuda::relu_backward(a.get(), b.get(), y.get(), d, nb, lab.stream()); });
  lab.add({"relu_backward", dt, mega(nb), err, 0, us, double(3 * nb * s)});

  // check_finite: all finite (the common case) is timed; one NaN in the tail must set the flag
  DeviceMem flag(4);
  std::vector<double> with_nan = va;
  with_nan[nc - 1] = NAN;
  upload(a.get(), with_nan, d);
  DLB_KERNEL_CHECK(cudaMemset(flag.get(), 0, 4));
  cuda::check_finite(a.get(), d, nc - 1, flag.as<int32_t>(), lab.stream());
  const double clean = download(flag.get(), 1, DType::i32)[0];
  cuda::check_finite(a.get(), d, nc, flag.as<int32_t>(), lab.stream());
  const double dirty = download(flag.get(), 1, DType::i32)[0];
  err = (clean == 0 && dirty == 1) ? 0 : 1;
  DLB_KERNEL_CHECK(cudaMemset(a.get(), 0, nb * s));
  us = lab.median_us([&] { cuda::check_finite(a.get(), d, nb, flag.as<int32_t>(), lab.stream()); });
  lab.add({"check_finite", dt, mega(nb), err, 0, us, double(nb * s)});
}

void lab_cast(Lab& lab, DType from, DType to) {
  const int64_t nc = kCheckElements, nb = lab.elements();
  DeviceMem src(nb * dtype_size(from)), dst(nb * dtype_size(to));
  // Magnitudes across the f16 range and beyond (overflow to inf, subnormals).
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> mant(-1, 1);
  std::uniform_int_distribution<int> expo(-26, 18);
  std::vector<double> v(nc), expected(nc);
  for (int64_t i = 0; i < nc; ++i) v[i] = rounded(std::ldexp(mant(rng), expo(rng)), from);
  upload(src.get(), v, from);
  cuda::cast(src.get(), from, dst.get(), to, nc, lab.stream());
  for (int64_t i = 0; i < nc; ++i) expected[i] = rounded(v[i], to);
  const double err = max_rel_err(download(dst.get(), nc, to), expected);
  const double us = lab.median_us([&] { cuda::cast(src.get(), from, dst.get(), to, nb, lab.stream()); });
  lab.add({"cast", std::string(dtype_name(from)) + ">" + dtype_name(to), mega(nb), err, 0, us,
           double(nb * (dtype_size(from) + dtype_size(to)))});
}

// ---- bias ----

void lab_bias(Lab& lab, DType d, int64_t rows, int64_t cols, bool small) {
  const std::string dt = dtype_name(d);
  const size_t s = dtype_size(d);
  const std::string shape = std::to_string(rows) + "x" + std::to_string(cols) + (small ? " small" : "");
  const int64_t check_rows = std::min<int64_t>(rows, 1023);  // odd row count for validation
  const int64_t n = rows * cols, nc = check_rows * cols;
  DeviceMem y(n * s), bias(cols * 4), dbias(cols * 4), work(cuda::bias_backward_scratch_bytes(rows, cols, d));
  const std::vector<double> vy = random_values(nc, d, 4), vb = random_values(cols, DType::f32, 5);
  upload(y.get(), vy, d);
  upload(bias.get(), vb, DType::f32);

  cuda::add_bias(y.get(), d, bias.get(), DType::f32, check_rows, cols, lab.stream());
  std::vector<double> expected(nc);
  for (int64_t i = 0; i < nc; ++i) expected[i] = rounded(vy[i] + vb[i % cols], d);
  double err = max_rel_err(download(y.get(), nc, d), expected);
  double us =
      lab.median_us([&] { cuda::add_bias(y.get(), d, bias.get(), DType::f32, rows, cols, lab.stream()); });
  lab.add({"add_bias (f32 bias)", dt, shape, err, tolerance(d), us, double(2 * n * s + cols * 4)});

  upload(y.get(), vy, d);
  cuda::bias_backward(y.get(), d, dbias.get(), DType::f32, check_rows, cols, false, work.get(), lab.stream());
  std::vector<double> sums(cols, 0.0);
  for (int64_t i = 0; i < nc; ++i) sums[i % cols] += vy[i];
  for (double& x : sums) x = rounded(x, DType::f32);
  err = max_rel_err(download(dbias.get(), cols, DType::f32), sums);
  us = lab.median_us([&] {
    cuda::bias_backward(y.get(), d, dbias.get(), DType::f32, rows, cols, false, work.get(), lab.stream());
  });
  lab.add({"bias_backward (f32 db)", dt, shape, err, 1e-5, us, double(n * s + cols * 4)});
  if (small || cols % 3 != 0) return;
  // c_attn's bias gradient as attention makes it (Fusion::attention_qkv_bias): q's third of qkv alone.
  const int64_t third = cols / 3;
  cuda::bias_backward_columns(y.get(), d, cols, dbias.get(), DType::f32, check_rows, third, false, work.get(),
                              lab.stream());
  err = max_rel_err(download(dbias.get(), third, DType::f32),
                    std::vector<double>(sums.begin(), sums.begin() + third));
  us = lab.median_us([&] {
    cuda::bias_backward_columns(y.get(), d, cols, dbias.get(), DType::f32, rows, third, false, work.get(),
                                lab.stream());
  });
  lab.add(
      {"bias_backward_columns (q third)", dt, shape, err, 1e-5, us, double(rows * third * s + third * 4)});
}

// ---- softmax cross-entropy ----

void cpu_softmax_xent(const std::vector<double>& x, const std::vector<int32_t>& labels, int64_t n, int64_t k,
                      double s, std::vector<double>& probs, double& loss) {
  probs.resize(n * k);
  double total = 0;
  for (int64_t r = 0; r < n; ++r) {
    const double* row = &x[r * k];
    const double m = *std::max_element(row, row + k);
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += std::exp(row[j] - m);
    const double lse = m + std::log(sum);
    for (int64_t j = 0; j < k; ++j) {
      probs[r * k + j] = std::exp(row[j] - lse);
      total -= ((1 - s) * (j == labels[r]) + s / k) * (row[j] - lse);
    }
  }
  loss = total / n;
}

void lab_softmax(Lab& lab, DType d, int64_t n, int64_t k, bool small) {
  const std::string dt = dtype_name(d);
  const size_t s = dtype_size(d);
  const std::string shape = std::to_string(n) + "x" + std::to_string(k) + (small ? " small" : "");
  const float smoothing = 0.1f;
  const int64_t nc = std::min<int64_t>(n, 1023);
  DeviceMem logits(n * k * s), labels(n * 4), probs(n * k * 4), loss(4), dlogits(n * k * s);
  const std::vector<double> vx = random_values(nc * k, d, 6, -8, 8);
  std::vector<int32_t> vl(n);
  std::mt19937 rng(7);
  for (int32_t& l : vl) l = static_cast<int32_t>(rng() % k);
  upload(logits.get(), vx, d);
  DLB_KERNEL_CHECK(cudaMemcpy(labels.get(), vl.data(), n * 4, cudaMemcpyHostToDevice));

  cuda::softmax_cross_entropy_forward(logits.get(), d, labels.as<int32_t>(), nc, k, smoothing,
                                      probs.as<float>(), loss.as<float>(), lab.stream());
  std::vector<double> expected;
  double expected_loss;
  cpu_softmax_xent(vx, vl, nc, k, smoothing, expected, expected_loss);
  const std::vector<double> got = download(probs.get(), nc * k, DType::f32);
  const double got_loss = download(loss.get(), 1, DType::f32)[0];
  double err =
      std::max(max_rel_err(got, expected), std::abs(got_loss - expected_loss) / std::abs(expected_loss));
  double us = lab.median_us([&] {
    cuda::softmax_cross_entropy_forward(logits.get(), d, labels.as<int32_t>(), n, k, smoothing,
                                        probs.as<float>(), loss.as<float>(), lab.stream());
  });
  lab.add({"softmax_xent_forward", dt, shape, err, 2e-5, us, double(n * k * (s + 4) + n * 4)});

  // backward, from the CPU probabilities
  upload(probs.get(), expected, DType::f32);
  const float scale = 128.f;
  cuda::softmax_cross_entropy_backward(probs.as<float>(), labels.as<int32_t>(), nc, k, smoothing, scale,
                                       nullptr, dlogits.get(), d, lab.stream());
  std::vector<double> grad(nc * k);
  for (int64_t r = 0; r < nc; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const double p = rounded(expected[r * k + j], DType::f32);
      grad[r * k + j] =
          rounded(scale * (p - ((1 - double(smoothing)) * (j == vl[r]) + smoothing / double(k))) / nc, d);
    }
  err = max_rel_err(download(dlogits.get(), nc * k, d), grad);
  us = lab.median_us([&] {
    cuda::softmax_cross_entropy_backward(probs.as<float>(), labels.as<int32_t>(), n, k, smoothing, scale,
                                         nullptr, dlogits.get(), d, lab.stream());
  });
  lab.add({"softmax_xent_backward", dt, shape, err, std::max(tolerance(d), 1e-6), us,
           double(n * k * (4 + s) + n * 4)});
}

// ---- SGD ----

// A ResNet-50-like parameter layout (53 conv/dense weights that decay, 106 BN vectors and a bias that do
// not), scaled to about `target` floats.
std::vector<ParamSegment> resnet_like_segments(int64_t target) {
  const int64_t weights[] = {9408,   4096,   36864,  16384,  16384,   147456,  65536,
                             131072, 589824, 262144, 524288, 2359296, 1048576, 2097152};
  const int64_t channels[] = {64, 64, 256, 128, 512, 256, 1024, 512, 2048};
  std::vector<ParamSegment> segs;
  int64_t offset = 0;
  for (int i = 0; i < 53; ++i) {
    const int64_t w = std::max<int64_t>(1, weights[i % 14] * target / 25'500'000);
    segs.push_back({offset, w, true});
    offset += w;
    const int64_t c = channels[i % 9];
    for (int j = 0; j < 2; ++j) {
      segs.push_back({offset, c, false});
      offset += c;
    }
  }
  segs.push_back({offset, 1000, false});
  return segs;
}

void cpu_sgd(std::vector<float>& p, const std::vector<float>& g, std::vector<float>& v,
             const std::vector<ParamSegment>& segs, const SgdStep& st) {
  for (const ParamSegment& s : segs) {
    const double wd = s.weight_decay ? st.weight_decay : 0.0;
    for (int64_t i = s.offset; i < s.offset + s.count; ++i) {
      const double gi = double(g[i]) * st.grad_scale + wd * double(p[i]);
      const double vel = double(st.momentum) * double(v[i]) + gi;
      const double upd = st.nesterov ? gi + double(st.momentum) * vel : vel;
      v[i] = static_cast<float>(vel);
      p[i] = static_cast<float>(double(p[i]) - double(st.lr) * upd);
    }
  }
}

void lab_sgd(Lab& lab, int64_t target, bool small) {
  const std::vector<ParamSegment> segs = resnet_like_segments(target);
  const int64_t total = segs.back().offset + segs.back().count;
  const std::string shape =
      std::to_string(segs.size()) + " segs " + std::to_string(total) + (small ? " small" : "");
  DeviceMem p(total * 4), g(total * 4), v(total * 4), dsegs(segs.size() * sizeof(ParamSegment));
  DLB_KERNEL_CHECK(
      cudaMemcpy(dsegs.get(), segs.data(), segs.size() * sizeof(ParamSegment), cudaMemcpyHostToDevice));
  std::vector<float> hp(total), hg(total), hv(total);
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (int64_t i = 0; i < total; ++i) hp[i] = dist(rng), hg[i] = dist(rng), hv[i] = 0.1f * dist(rng);
  DLB_KERNEL_CHECK(cudaMemcpy(p.get(), hp.data(), total * 4, cudaMemcpyHostToDevice));
  DLB_KERNEL_CHECK(cudaMemcpy(g.get(), hg.data(), total * 4, cudaMemcpyHostToDevice));
  DLB_KERNEL_CHECK(cudaMemcpy(v.get(), hv.data(), total * 4, cudaMemcpyHostToDevice));
  SgdStep step;
  step.lr = 0.1f, step.momentum = 0.9f, step.weight_decay = 5e-4f, step.nesterov = true,
  step.grad_scale = 1.f / 256;
  cuda::sgd_update(p.as<float>(), g.as<float>(), v.as<float>(), dsegs.as<ParamSegment>(), int(segs.size()),
                   step, nullptr, cuda::UpdateCopies{}, lab.stream());
  cpu_sgd(hp, hg, hv, segs, step);
  std::vector<double> expected(hp.begin(), hp.end()), expected_v(hv.begin(), hv.end());
  const double err = std::max(max_rel_err(download(p.get(), total, DType::f32), expected),
                              max_rel_err(download(v.get(), total, DType::f32), expected_v));
  step.lr = 0;  // timed launches leave the parameters as they are
  const double us = lab.median_us([&] {
    cuda::sgd_update(p.as<float>(), g.as<float>(), v.as<float>(), dsegs.as<ParamSegment>(), int(segs.size()),
                     step, nullptr, cuda::UpdateCopies{}, lab.stream());
  });
  lab.add({"sgd_update (nesterov)", "f32", shape, err, 1e-6, us, double(total) * 20});
}

// AdamW over gpt2-large's 774M parameters as a BF16 run has them: f32 master weights, moments and
// gradients, the update reading the BF16 gradients and writing the BF16 weights (UpdateCopies), with
// clipping. Its bytes: 12 read and 12 written of f32 state, 2 read and 2 written of BF16 a parameter.
// Timing only (tests/backend_cuda checks the update against the reference): how near the copy rate its
// f64 arithmetic per element lets it run. The state is random and nonzero, as in a run: on zeroed
// buffers (a first draft of this row) it ran at 63.5% of the copy rate on an H100, while in gpt2-large's
// step an f32 version saved 0.24 of the 3.8 ms that figure promised: f64's division and square root
// take slower paths on zeros.
void lab_adamw(Lab& lab, int64_t total) {
  // Transformer-like segments: a matrix that decays, then its bias that does not, over and over.
  std::vector<ParamSegment> segs;
  for (int64_t offset = 0; offset < total;) {
    const int64_t w = std::min<int64_t>(1280 * 3840, total - offset);
    segs.push_back({offset, w, true});
    offset += w;
    const int64_t b = std::min<int64_t>(3840, total - offset);
    if (b > 0) segs.push_back({offset, b, false});
    offset += b;
  }
  DeviceMem p(total * 4), g(total * 4), m(total * 4), v(total * 4), p16(total * 2), g16(total * 2), norm(4),
      dsegs(segs.size() * sizeof(ParamSegment));
  DLB_KERNEL_CHECK(
      cudaMemcpy(dsegs.get(), segs.data(), segs.size() * sizeof(ParamSegment), cudaMemcpyHostToDevice));
  // A run's state: weights, moments and gradients random and nonzero (second moments positive), a block
  // of 1M values repeated.
  const auto fill = [&](const DeviceMem& d, DType dtype, uint64_t seed, double lo, double hi) {
    const int64_t block = int64_t(1) << 20;
    const std::vector<double> values = random_values(block, dtype, seed, lo, hi);
    for (int64_t at = 0; at < total; at += block) {
      const int64_t n = std::min(block, total - at);
      upload(static_cast<unsigned char*>(d.get()) + at * int64_t(dtype_size(dtype)),
             std::vector<double>(values.begin(), values.begin() + n), dtype);
    }
  };
  fill(p, DType::f32, 31, -0.1, 0.1);
  fill(m, DType::f32, 32, -1e-3, 1e-3);
  fill(v, DType::f32, 33, 1e-8, 1e-6);
  fill(g, DType::f32, 34, -1e-2, 1e-2);
  fill(g16, DType::bf16, 34, -1e-2, 1e-2);
  fill(p16, DType::bf16, 31, -0.1, 0.1);
  const float norm_squared = 4.f;
  DLB_KERNEL_CHECK(cudaMemcpy(norm.get(), &norm_squared, 4, cudaMemcpyHostToDevice));
  AdamWStep step;
  step.lr = 0;  // timed launches leave the parameters as they are
  step.max_grad_norm = 1.f;
  step.grad_norm_squared = norm.as<float>();
  cuda::UpdateCopies copies;
  copies.parameters = p16.get(), copies.gradients = g16.get(), copies.count = total,
  copies.dtype = DType::bf16;
  const double us = lab.median_us([&] {
    cuda::adamw_update(p.as<float>(), g.as<float>(), m.as<float>(), v.as<float>(), dsegs.as<ParamSegment>(),
                       int(segs.size()), step, nullptr, copies, lab.stream());
  });
  lab.add({"adamw_update (bf16 copies)", "f32", std::to_string(total) + " params", -1, 0, us,
           double(total) * 28});
  // The gradient norm AdamW clips by: the sum of squares of the BF16 gradients, validated against the
  // same over their FP32 widening (the same bits by construction) and against the host's sum.
  DeviceMem square_scratch(cuda::sum_of_squares_scratch_bytes()), sum16(4), sum32(4);
  cuda::sum_of_squares(g16.get(), DType::bf16, total, sum16.as<float>(), false, square_scratch.get(),
                       lab.stream());
  DLB_KERNEL_CHECK(cudaGetLastError());
  lab.sync();
  const std::vector<double> widened = download(g16.get(), static_cast<size_t>(total), DType::bf16);
  double host = 0;
  for (double x : widened) host += x * x;
  upload(g.get(), widened, DType::f32);
  cuda::sum_of_squares(g.get(), DType::f32, total, sum32.as<float>(), false, square_scratch.get(),
                       lab.stream());
  DLB_KERNEL_CHECK(cudaGetLastError());
  lab.sync();
  const double of16 = download(sum16.get(), 1, DType::f32)[0], of32 = download(sum32.get(), 1, DType::f32)[0];
  const double err = of16 != of32 ? 1.0 : std::abs(of16 - host) / host;
  const double norm_us = lab.median_us([&] {
    cuda::sum_of_squares(g16.get(), DType::bf16, total, sum16.as<float>(), false, square_scratch.get(),
                         lab.stream());
  });
  lab.add({"sum_of_squares (gradient norm)", "bf16", std::to_string(total) + " params", err, 1e-6, norm_us,
           double(total) * 2});
}

// ---- FP8 quantization (a GEMM operand's codes, transposed codes, amax, column sums) ----

void lab_fp8_quantize(Lab& lab, int64_t rows, int64_t cols) {
  const DType d = DType::bf16;
  const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
  const int64_t n = rows * cols;
  const int64_t partial_rows = cuda::fp8_column_partial_rows(rows);
  DeviceMem x(n * 2), q(n), qt(n), scale(4), amax(4), partials(partial_rows * cols * 4), sums(cols * 4);
  const std::vector<double> vx = random_values(n, d, 11, -3, 3);
  upload(x.get(), vx, d);
  const float s = 64.f;  // |x| < 3: within E4M3's 448
  DLB_KERNEL_CHECK(cudaMemcpy(scale.get(), &s, 4, cudaMemcpyHostToDevice));
  DLB_KERNEL_CHECK(cudaMemset(amax.get(), 0, 4));
  auto* qp = static_cast<uint8_t*>(q.get());
  auto* qtp = static_cast<uint8_t*>(qt.get());
  auto* sp = static_cast<const float*>(scale.get());
  auto* ap = static_cast<float*>(amax.get());
  auto* pp = static_cast<float*>(partials.get());

  // Validation: both layouts' codes as the host rounds, the amax, the column sums.
  const int64_t written = cuda::quantize_fp8_summing_columns(x.get(), d, rows, cols, Fp8Format::e4m3, sp, qp,
                                                             qtp, ap, pp, lab.stream());
  cuda::sum_column_partials(pp, written, cols, sums.get(), DType::f32, false, lab.stream());
  lab.sync();
  std::vector<uint8_t> codes(n), codes_t(n);
  DLB_KERNEL_CHECK(cudaMemcpy(codes.data(), qp, n, cudaMemcpyDeviceToHost));
  DLB_KERNEL_CHECK(cudaMemcpy(codes_t.data(), qtp, n, cudaMemcpyDeviceToHost));
  float gpu_amax = 0;
  DLB_KERNEL_CHECK(cudaMemcpy(&gpu_amax, ap, 4, cudaMemcpyDeviceToHost));
  int64_t wrong = 0;
  double host_amax = 0;
  std::vector<double> column_sums(cols, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double v = vx[r * cols + c];
      host_amax = std::max(host_amax, std::fabs(v));
      column_sums[c] += v;
      const uint8_t code = float_to_fp8(static_cast<float>(v) * s, Fp8Format::e4m3);
      wrong += codes[r * cols + c] != code || codes_t[c * rows + r] != code;
    }
  const double code_error = double(wrong) + std::fabs(gpu_amax - host_amax);  // both exact: 0
  const double sum_error = max_rel_err(download(sums.get(), cols, DType::f32), column_sums);

  // A forward operand: codes only (read 2 bytes, write 1).
  double us = lab.median_us([&] {
    cuda::quantize_fp8(x.get(), d, rows, cols, Fp8Format::e4m3, sp, qp, nullptr, ap, lab.stream());
  });
  lab.add({"quantize_fp8 q", "bf16", shape, code_error, 0, us, double(3 * n)});
  // x^T or W^T in the backward: transposed codes only.
  us = lab.median_us([&] {
    cuda::quantize_fp8(x.get(), d, rows, cols, Fp8Format::e4m3, sp, nullptr, qtp, nullptr, lab.stream());
  });
  lab.add({"quantize_fp8 q^T", "bf16", shape, -1, 0, us, double(3 * n)});
  // x in a forward that keeps x^T's codes for the backward: both layouts.
  us = lab.median_us(
      [&] { cuda::quantize_fp8(x.get(), d, rows, cols, Fp8Format::e4m3, sp, qp, qtp, ap, lab.stream()); });
  lab.add({"quantize_fp8 q,q^T", "bf16", shape, -1, 0, us, double(4 * n)});
  // dy in the backward: both layouts and the column partials, then their sum.
  us = lab.median_us([&] {
    cuda::quantize_fp8_summing_columns(x.get(), d, rows, cols, Fp8Format::e5m2, sp, qp, qtp, ap, pp,
                                       lab.stream());
  });
  lab.add({"quantize_fp8 q,q^T,sums", "bf16", shape, -1, 0, us, double(4 * n + written * cols * 4)});
  us = lab.median_us(
      [&] { cuda::sum_column_partials(pp, written, cols, sums.get(), DType::f32, false, lab.stream()); });
  lab.add({"sum_column_partials", "f32", std::to_string(written) + "x" + std::to_string(cols), sum_error,
           1e-5, us, double(written * cols * 4 + cols * 4)});
}

// ---- layer norm at a GPT-2 block's shape ----

// A GPT-2 layer norm (rows x C, bf16): forward, and the backward with dx added to the residual's gradient,
// as in a block; then the same summing dx as written for the projection before it (dx_sums), against
// that projection's own bias pass over dx, which the sums replace.
void lab_layernorm(Lab& lab, int64_t rows, int64_t C) {
  const int64_t n = rows * C;
  const std::string shape = std::to_string(rows) + "x" + std::to_string(C);
  const DType d = DType::bf16;
  DeviceMem x(n * 2), y(n * 2), dy(n * 2), dx(n * 2), weight(C * 2), bias(C * 2), mean(rows * 4),
      rstd(rows * 4), dweight(C * 2), dbias(C * 2), dx_sums(C * 2), pass_sums(C * 2),
      scratch(cuda::layernorm_backward_scratch_bytes(rows, C));
  upload(x.get(), random_values(n, d, 31, -2, 2), d);
  upload(dy.get(), random_values(n, d, 32), d);
  upload(dx.get(), random_values(n, d, 33), d);
  upload(weight.get(), random_values(C, d, 34, 0.5, 1.5), d);
  upload(bias.get(), random_values(C, d, 35), d);
  auto* mp = static_cast<float*>(mean.get());
  auto* rp = static_cast<float*>(rstd.get());
  double us = lab.median_us([&] {
    cuda::layernorm_forward(x.get(), weight.get(), bias.get(), 1e-5f, y.get(), mp, rp, rows, C, d,
                            lab.stream());
  });
  lab.add({"layernorm_forward", "bf16", shape, -1, 0, us, double(4 * n + 8 * rows)});
  // In FP8, the reader's pass over y that makes its codes both ways, against the layer norm that makes
  // them itself (layernorm_forward_fp8; the same codes: the CUDA tests).
  DeviceMem codes(n), codes_t(n), code_scale(4), amax(4);
  const float two = 2.f;
  DLB_KERNEL_CHECK(cudaMemcpy(code_scale.get(), &two, sizeof two, cudaMemcpyHostToDevice));
  auto* sp = static_cast<float*>(code_scale.get());
  auto* ap = static_cast<float*>(amax.get());
  auto* cp = static_cast<uint8_t*>(codes.get());
  auto* ctp = static_cast<uint8_t*>(codes_t.get());
  us = lab.median_us([&] {
    cuda::layernorm_forward(x.get(), weight.get(), bias.get(), 1e-5f, y.get(), mp, rp, rows, C, d,
                            lab.stream());
    cuda::quantize_fp8(y.get(), d, rows, C, Fp8Format::e4m3, sp, cp, ctp, ap, lab.stream());
  });
  lab.add({"layernorm_forward + quantize_fp8 q,q^T", "bf16", shape, -1, 0, us, double(4 * n + 4 * n)});
  us = lab.median_us([&] {
    cuda::layernorm_forward_fp8(x.get(), weight.get(), bias.get(), 1e-5f, sp, cp, ctp, ap, mp, rp, rows, C, d,
                                lab.stream());
  });
  lab.add({"layernorm_forward_fp8 q,q^T", "bf16", shape, -1, 0, us, double(2 * n + 2 * n + 8 * rows)});
  // The adds drift dx from launch to launch, which changes no access. (Validated by the CUDA tests.)
  auto backward = [&](void* sums) {
    cuda::layernorm_backward(x.get(), weight.get(), mp, rp, dy.get(), dx.get(), dweight.get(), dbias.get(),
                             sums, rows, C, d, false, true, scratch.get(), lab.stream());
  };
  us = lab.median_us([&] { backward(nullptr); });
  lab.add({"layernorm_backward", "bf16", shape + " dx+=", -1, 0, us, double(8 * n)});
  // One launch, then the bias pass over the dx it wrote: the sums must agree (within bf16's rounding of
  // two orders of summation).
  backward(dx_sums.get());
  cuda::bias_backward(dx.get(), d, pass_sums.get(), d, rows, C, false, scratch.get(), lab.stream());
  DLB_KERNEL_CHECK(cudaGetLastError());
  lab.sync();
  const std::vector<double> fused = download(dx_sums.get(), C, d), pass = download(pass_sums.get(), C, d);
  double scale = 0, err = 0;
  for (int64_t c = 0; c < C; ++c) scale = std::max(scale, std::abs(pass[c]));
  for (int64_t c = 0; c < C; ++c) err = std::max(err, std::abs(fused[c] - pass[c]) / std::max(scale, 1e-30));
  us = lab.median_us([&] { backward(dx_sums.get()); });
  lab.add({"layernorm_backward + dx sums", "bf16", shape + " dx+=", err, 2e-2, us, double(8 * n)});
  us = lab.median_us([&] {
    cuda::bias_backward(dx.get(), d, pass_sums.get(), d, rows, C, false, scratch.get(), lab.stream());
  });
  lab.add({"bias_backward (the pass it replaces)", "bf16", shape, -1, 0, us, double(2 * n)});
}

// GPT-2's loss as the language model runs it (softmax_cross_entropy_fused, bf16): 16,384 rows of 50,257
// classes padded to 50,304, each row's loss and its gradient written over the logits: one read and one
// write of them at best. (Validated by the CUDA tests; each launch runs on the last one's gradient, which
// changes no access.)
void lab_gpt_loss(Lab& lab, int64_t rows) {
  constexpr int64_t kClasses = 50257, kPadded = 50304;
  const DType d = DType::bf16;
  DeviceMem logits(rows * kPadded * 2), labels(rows * 4), row_loss(rows * 4), loss(4);
  // 64 random rows, repeated: the whole [rows, 50,304] from the host would be 6.6 GB of doubles.
  constexpr int64_t kPattern = 64;
  upload(logits.get(), random_values(kPattern * kPadded, d, 51, -8, 8), d);
  auto* bytes = static_cast<unsigned char*>(logits.get());
  for (int64_t r = kPattern; r < rows; r += kPattern)
    DLB_KERNEL_CHECK(cudaMemcpy(bytes + r * kPadded * 2, bytes, std::min(kPattern, rows - r) * kPadded * 2,
                                cudaMemcpyDeviceToDevice));
  std::vector<int32_t> host_labels(static_cast<size_t>(rows));
  std::mt19937 rng(52);
  for (int32_t& l : host_labels) l = static_cast<int32_t>(rng() % kClasses);
  DLB_KERNEL_CHECK(cudaMemcpy(labels.get(), host_labels.data(), rows * 4, cudaMemcpyHostToDevice));
  const double us = lab.median_us([&] {
    cuda::softmax_cross_entropy_fused(logits.get(), d, labels.as<int32_t>(), rows, kPadded, kClasses, 0.f,
                                      row_loss.as<float>(), loss.get(), true, 1.f / float(rows), nullptr,
                                      lab.stream());
  });
  lab.add({"softmax_xent_fused", "bf16", std::to_string(rows) + "x" + std::to_string(kPadded) + " grad", -1,
           0, us, double(2 * rows * kPadded * 2)});
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 50;
  int64_t melems = 64;
  bool only_gpt = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--melems") && i + 1 < argc) {
      melems = std::max<int64_t>(2, std::atoll(argv[++i]));
    } else if (!std::strcmp(argv[i], "--only") && i + 1 < argc && !std::strcmp(argv[i + 1], "gpt")) {
      only_gpt = true, ++i;
    } else {
      std::fprintf(stderr, "usage: %s [--reps N] [--melems M] [--only gpt]\n", argv[0]);
      return 2;
    }
  }
  try {
    cudaDeviceProp prop{};
    DLB_KERNEL_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, %d SMs, %.0f MB L2; timed buffers: %lld M elements; median of %d launches\n",
                prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1e6, static_cast<long long>(melems),
                reps);
    Lab lab(reps, melems << 20);
    const double ceiling = measure_copy(lab);
    lab.set_ceiling(ceiling);
    std::printf("device-to-device copy: %.0f GB/s (bytes read + written)\n", ceiling);
    // gpt2-large's dense operands at 16 x 1024 tokens: the residual stream's width and the MLP's.
    lab_fp8_quantize(lab, 16384, 1280);
    lab_fp8_quantize(lab, 16384, 5120);
    lab_fp8_quantize(lab, 16384, 3840);
    lab_adamw(lab, 774'030'080);
    lab_layernorm(lab, 16384, 1280);  // gpt2-large, batch 16
    lab_layernorm(lab, 65536, 1024);  // gpt2-medium, batch 64
    lab_layernorm(lab, 32768, 1280);  // gpt2-large, batch 32
    lab_gpt_loss(lab, 16384);
    // A dense layer's bias gradient: c_attn's, c_proj's and c_fc's outputs.
    for (const int64_t cols : {3840, 1280, 5120}) lab_bias(lab, DType::bf16, 16384, cols, false);
    for (const int64_t cols : {3840, 5120}) lab_bias(lab, DType::bf16, 65536, cols, false);  // batch 64
    if (only_gpt) return lab.print() == 0 ? 0 : 1;
    for (DType d : kDtypes) lab_elementwise(lab, d);
    lab_cast(lab, DType::f32, DType::f16);
    lab_cast(lab, DType::f16, DType::f32);
    lab_cast(lab, DType::f32, DType::bf16);
    lab_cast(lab, DType::bf16, DType::f32);
    for (DType d : kDtypes) lab_bias(lab, d, lab.elements() / 1024, 1024, false);
    lab_bias(lab, DType::f32, 256, 1000, true);
    for (DType d : kDtypes) lab_softmax(lab, d, lab.elements() / 1000, 1000, false);
    lab_softmax(lab, DType::f32, 256, 1000, true);
    lab_softmax(lab, DType::f32, 128, 10, true);
    lab_sgd(lab, 25'500'000, false);
    lab_sgd(lab, 270'000, true);
    return lab.print() == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_kernel_lab: %s\n", e.what());
    return 1;
  }
}
