// The oneDNN backend: construction, memory, GEMM (dnnl_sgemm) and the OpenMP loops for everything that
// oneDNN primitives would not make faster (elementwise ops, bias, casts, the SGD update). The loss is in
// onednn_loss.cc, the transformer ops in a file each.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backend/onednn/onednn_common.h"
#include "backend/reference/reference_common.h"

namespace dlbench {
namespace onednn {
namespace {

void check_same_count(const Tensor& a, const Tensor& b, const char* op) {
  DLB_CHECK(a.numel() == b.numel(), "{}: {} and {} differ in element count", op, a.describe(), b.describe());
}

// Rare dtypes (FP16/BF16 casts, i32 flags) go element by element through the reference backend's
// conversions (round to nearest even, straight from double).
double load_as_double(const Tensor& t, int64_t i) { return reference::load_element(t, i); }
void store_from_double(Tensor& t, int64_t i, double v) { reference::store_element(t, i, v); }

}  // namespace

OneDnnBackend::OneDnnBackend(int threads)
    : threads_(threads > 0 ? threads : omp_get_num_procs()),
      engine_(dnnl::engine::kind::cpu, 0),
      stream_(engine_) {
  omp_set_num_threads(threads_);
}

// ---- memory ----

void* OneDnnBackend::allocate(size_t bytes) {
  void* p = std::aligned_alloc(kOnednnAlignment, align_up(std::max<size_t>(bytes, 1), kOnednnAlignment));
  DLB_CHECK(p != nullptr, "onednn backend: out of memory allocating {} bytes", bytes);
  return p;
}
void OneDnnBackend::deallocate(void* ptr) { std::free(ptr); }
void OneDnnBackend::copy_to_device(void* dst, const void* host_src, size_t bytes) {
  if (bytes) std::memcpy(dst, host_src, bytes);
}
void OneDnnBackend::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(host_dst, src, bytes);
}
void OneDnnBackend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memmove(dst, src, bytes);
}
void OneDnnBackend::synchronize() { stream_.wait(); }

// ---- ReLU ----

void OneDnnBackend::relu_forward(const Tensor& x, Tensor& y) {
  check_f32(x, "relu_forward");
  check_f32(y, "relu_forward");
  check_same_count(x, y, "relu_forward");
  const float* in = x.ptr<float>();
  float* out = y.ptr<float>();
  const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) num_threads(threads_) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;
}

void OneDnnBackend::relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  check_f32(y, "relu_backward");
  check_f32(dy, "relu_backward");
  check_f32(dx, "relu_backward");
  check_same_count(y, dy, "relu_backward");
  check_same_count(y, dx, "relu_backward");
  const float* yp = y.ptr<float>();
  const float* dyp = dy.ptr<float>();
  float* dxp = dx.ptr<float>();
  const int64_t n = y.numel();
#pragma omp parallel for simd schedule(static) num_threads(threads_) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) dxp[i] = yp[i] > 0.f ? dyp[i] : 0.f;
}

// ---- dense algebra ----

void OneDnnBackend::gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
                         const Tensor& a, const Tensor& b, float beta, Tensor& c) {
  check_f32(a, "gemm");
  check_f32(b, "gemm");
  check_f32(c, "gemm");
  DLB_CHECK(a.numel() == m * k && b.numel() == k * n && c.numel() == m * n,
            "gemm m={} n={} k={}: a {} b {} c {}", m, n, k, a.describe(), b.describe(), c.describe());
  if (m == 0 || n == 0) return;
  const bool at = ta == Transpose::yes, bt = tb == Transpose::yes;
  const dnnl::status status = dnnl::sgemm(at ? 'T' : 'N', bt ? 'T' : 'N', m, n, k, alpha, a.ptr<float>(),
                                          at ? m : k, b.ptr<float>(), bt ? k : n, beta, c.ptr<float>(), n);
  DLB_CHECK(status == dnnl::status::success, "dnnl_sgemm failed with status {}", static_cast<int>(status));
}

void OneDnnBackend::add_bias(Tensor& y, const Tensor& bias) {
  check_f32(y, "add_bias");
  check_f32(bias, "add_bias");
  const int64_t features = bias.numel();
  DLB_CHECK(features > 0 && y.numel() % features == 0 && y.dim(y.rank() - 1) == features,
            "add_bias: y {} and bias {}", y.describe(), bias.describe());
  const int64_t rows = y.numel() / features;
  float* yp = y.ptr<float>();
  const float* bp = bias.ptr<float>();
#pragma omp parallel for schedule(static) num_threads(threads_) if (y.numel() > kParallelThreshold)
  for (int64_t r = 0; r < rows; ++r) {
    float* row = yp + r * features;
#pragma omp simd
    for (int64_t f = 0; f < features; ++f) row[f] += bp[f];
  }
}

void OneDnnBackend::bias_backward(const Tensor& dy, Tensor& dbias, Accumulate accumulate) {
  const int64_t features = dbias.numel();
  DLB_CHECK(features > 0 && dy.numel() % features == 0 && dy.dim(dy.rank() - 1) == features,
            "bias_backward: dy {} and dbias {}", dy.describe(), dbias.describe());
  bias_backward_columns(dy.reshaped({dy.numel() / features, features}), 0, dbias, accumulate);
}

void OneDnnBackend::bias_backward_columns(const Tensor& dy, int64_t first_column, Tensor& dbias,
                                          Accumulate accumulate) {
  const char* op = "bias_backward_columns";
  check_f32(dy, op);
  check_f32(dbias, op);
  DLB_CHECK(
      dy.rank() == 2 && dbias.rank() == 1 && first_column >= 0 && first_column + dbias.dim(0) <= dy.dim(1),
      "{}: dbias {} is no column range of dy {} from column {}", op, dbias.describe(), dy.describe(),
      first_column);
  const int64_t features = dbias.dim(0), rows = dy.dim(0), stride = dy.dim(1);
  const float* dyp = dy.ptr<float>() + first_column;
  float* db = dbias.ptr<float>();
  const bool add = accumulate == Accumulate::add;
  // Rows are summed in a fixed order per feature, so the result does not depend on the thread count.
  constexpr int64_t kBlock = 64;
#pragma omp parallel for schedule(static) num_threads(threads_) if (rows * features > kParallelThreshold)
  for (int64_t f0 = 0; f0 < features; f0 += kBlock) {
    const int64_t f1 = std::min(features, f0 + kBlock);
    float sum[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = dyp + r * stride;
#pragma omp simd
      for (int64_t f = f0; f < f1; ++f) sum[f - f0] += row[f];
    }
    for (int64_t f = f0; f < f1; ++f) db[f] = add ? db[f] + sum[f - f0] : sum[f - f0];
  }
}

// ---- elementwise and utilities ----

void OneDnnBackend::fill(Tensor& x, double value) {
  const int64_t n = x.numel();
  if (x.dtype() == DType::f32) {
    float* p = x.ptr<float>();
    const float v = static_cast<float>(value);
#pragma omp parallel for simd schedule(static) num_threads(threads_) if (n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) p[i] = v;
    return;
  }
  for (int64_t i = 0; i < n; ++i) store_from_double(x, i, value);  // rare dtypes: flags, counters
}

void OneDnnBackend::add(const Tensor& a, const Tensor& b, Tensor& y) {
  check_f32(a, "add");
  check_f32(b, "add");
  check_f32(y, "add");
  check_same_count(a, b, "add");
  check_same_count(a, y, "add");
  DLB_CHECK(a.rank() != 4 || (a.layout() == b.layout() && a.layout() == y.layout()),
            "add: layouts differ: {} {} {}", a.describe(), b.describe(), y.describe());
  const float* ap = a.ptr<float>();
  const float* bp = b.ptr<float>();
  float* yp = y.ptr<float>();
  const int64_t n = a.numel();
#pragma omp parallel for simd schedule(static) num_threads(threads_) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) yp[i] = ap[i] + bp[i];
}

void OneDnnBackend::scale(Tensor& x, double alpha) {
  check_f32(x, "scale");
  float* p = x.ptr<float>();
  const float a = static_cast<float>(alpha);
  const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) num_threads(threads_) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) p[i] *= a;
}

void OneDnnBackend::cast(const Tensor& src, Tensor& dst) {
  check_same_count(src, dst, "cast");
  DLB_CHECK(src.dtype() != DType::i32 && dst.dtype() != DType::i32, "cast is between float dtypes: {} -> {}",
            src.describe(), dst.describe());
  DLB_CHECK(src.rank() != 4 || src.layout() == dst.layout(), "cast: layouts differ: {} -> {}", src.describe(),
            dst.describe());
  const int64_t n = src.numel();
  if (src.dtype() == dst.dtype()) {
    copy(dst.data(), src.data(), src.bytes());
    return;
  }
#pragma omp parallel for schedule(static) num_threads(threads_) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) store_from_double(dst, i, load_as_double(src, i));
}

void OneDnnBackend::check_finite(const Tensor& x, Tensor& flag) {
  DLB_CHECK(flag.dtype() == DType::i32 && flag.numel() >= 1, "check_finite: flag must be i32 [1], got {}",
            flag.describe());
  const int64_t n = x.numel();
  uint32_t bad = 0;
  if (x.dtype() == DType::f32) {
    // Inf and NaN are exactly the values whose exponent bits are all ones; an integer test vectorises.
    const uint32_t* bits = x.ptr<uint32_t>();
#pragma omp parallel for simd schedule(static) num_threads(threads_) \
    reduction(|                                                      \
              : bad) if (n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) bad |= static_cast<uint32_t>((bits[i] & 0x7f800000u) == 0x7f800000u);
  } else {
    DLB_CHECK(x.dtype() != DType::i32, "check_finite needs a float tensor, got {}", x.describe());
    for (int64_t i = 0; i < n; ++i) bad |= static_cast<uint32_t>(!std::isfinite(load_as_double(x, i)));
  }
  if (bad) flag.ptr<int32_t>()[0] = 1;
}

// ---- optimizer ----

void OneDnnBackend::sgd_update(Tensor& params, const Tensor& grads, Tensor& momentum_buffer,
                               std::span<const ParamSegment> segments, const SgdStep& step,
                               const StepScalars* scalars, const ComputeCopies& copies) {
  DLB_CHECK(!copies.any(), "sgd_update: the oneDNN backend trains in FP32 and keeps no compute copies");
  check_f32(params, "sgd_update params");
  check_f32(grads, "sgd_update grads");
  check_f32(momentum_buffer, "sgd_update momentum");
  check_same_count(params, grads, "sgd_update");
  check_same_count(params, momentum_buffer, "sgd_update");
  float* p = params.ptr<float>();
  const float* g = grads.ptr<float>();
  float* v = momentum_buffer.ptr<float>();
  if (scalars && scalars->overflow) return;  // an overflowed step is skipped
  const float lr = scalars ? scalars->lr : step.lr, mu = step.momentum;
  const float gs = scalars ? step.grad_scale / scalars->loss_scale : step.grad_scale;
  for (const ParamSegment& seg : segments) {
    DLB_CHECK(seg.offset >= 0 && seg.count >= 0 && seg.offset + seg.count <= params.numel(),
              "sgd_update: segment [{}, +{}) outside {} parameters", seg.offset, seg.count, params.numel());
    const float wd = seg.weight_decay ? step.weight_decay : 0.f;
    const int64_t begin = seg.offset, end = seg.offset + seg.count;
    if (step.nesterov) {
#pragma omp parallel for simd schedule(static) num_threads(threads_) if (seg.count > kParallelThreshold)
      for (int64_t i = begin; i < end; ++i) {
        const float gi = g[i] * gs + wd * p[i];
        const float vi = mu * v[i] + gi;
        v[i] = vi;
        p[i] -= lr * (gi + mu * vi);
      }
    } else {
#pragma omp parallel for simd schedule(static) num_threads(threads_) if (seg.count > kParallelThreshold)
      for (int64_t i = begin; i < end; ++i) {
        const float vi = mu * v[i] + (g[i] * gs + wd * p[i]);
        v[i] = vi;
        p[i] -= lr * vi;
      }
    }
  }
}

void OneDnnBackend::update_loss_scale(StepScalars* scalars) {
  DLB_CHECK(scalars, "update_loss_scale: no scalars");
  advance_loss_scale(*scalars);
}

}  // namespace onednn

std::unique_ptr<Backend> make_onednn_backend(int threads) {
  return std::make_unique<onednn::OneDnnBackend>(threads);
}

}  // namespace dlbench
