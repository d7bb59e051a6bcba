// Batch normalisation in our own OpenMP loops (no oneDNN primitive).
//
// Why not oneDNN's batch norm (2.6, measured on the project's 2-core Zen1, one thread, process CPU time,
// ms forward / backward, oneDNN -> these loops):
//   NCHW 16x256x56x56, no fusion   47.8 / 63.4  ->  13.4 / 15.4   (oneDNN has only its generic ncsp kernel)
//   NCHW 16x256x56x56, add_relu    57.5 / 75.9  ->  14.4 / 20.5   (oneDNN + our add/ReLU/mask passes)
//   NHWC 16x256x56x56, no fusion   24.0 / 38.1  ->  14.8 / 19.0
//   NHWC 16x256x56x56, add_relu    33.8 / 51.4  ->  17.3 / 25.8
//   NHWC 128x16x28x28, no fusion    3.5 /  3.8  ->   1.9 /  2.6
// At 2 threads on the shared machine (other processes running), single oneDNN calls on 16x256x56x56 NCHW
// took ~1 s where these loops took 16-23 ms in the same conditions. oneDNN's batch norm also has no
// residual input, so add_relu and the ReLU mask of the backward cost it extra passes. These loops make
// exactly two passes each way, fuse the residual add, the ReLU and its mask, and use plain OpenMP work
// sharing.
//
// Forward training: pass 1 gathers per-channel sums of (x - K) and (x - K)^2, K = the channel's first
// value (a shift that keeps the one-pass variance accurate), summed in float along a contiguous run and in
// double across runs; pass 2 writes y = act(((x - K) - (mean - K)) * gamma*inv_std + beta [+ residual]).
// Running stats use the unbiased variance (x M/(M-1), M = N*H*W), PyTorch's convention.
// Backward: g = dy masked by y > 0 for the ReLU fusions (for add_relu it is also dresidual); pass 1 gathers
// dbeta = sum g and dgamma = sum g * xhat; pass 2 writes dx = gamma*inv_std*(g - dbeta/M - xhat*dgamma/M).
// NCHW: threads own whole channels (each channel's planes are contiguous runs). NHWC: threads own blocks of
// rows (a row is C contiguous channels) with per-thread partial sums, reduced in thread order, so results
// do not depend on scheduling (they do on the thread count).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/onednn/onednn_common.h"

namespace dlbench {
namespace onednn {
namespace {

class OneDnnBatchNormPlan final : public BatchNormPlan {
 public:
  explicit OneDnnBatchNormPlan(const BatchNormGeometry& g, int threads) : BatchNormPlan(g), threads(threads) {
    const size_t c = static_cast<size_t>(g.channels);
    WorkspaceLayout layout;
    coef_offset = layout.reserve(5 * c * sizeof(float));  // see coefficient slots below
    if (g.layout == Layout::nhwc) {
      float_partial_offset = layout.reserve(static_cast<size_t>(threads) * 2 * c * sizeof(float));
      double_partial_offset = layout.reserve(static_cast<size_t>(threads) * 2 * c * sizeof(double));
    }
    total_bytes = layout.total();
  }
  size_t workspace_bytes() const override { return total_bytes; }

  int threads;
  size_t coef_offset = 0, float_partial_offset = 0, double_partial_offset = 0, total_bytes = 0;
};

const OneDnnBatchNormPlan& as_onednn(const BatchNormPlan& plan) {
  auto* p = dynamic_cast<const OneDnnBatchNormPlan*>(&plan);
  DLB_CHECK(p != nullptr, "batch-norm plan was not made by the onednn backend");
  return *p;
}

void check_data(const Tensor& t, const BatchNormGeometry& g, const char* what) {
  check_f32(t, what);
  DLB_CHECK(t.rank() == 4 && t.dim(0) == g.batch && t.dim(1) == g.channels && t.dim(2) == g.h &&
                t.dim(3) == g.w && t.layout() == g.layout,
            "{}: tensor {} does not match the plan's [{}, {}, {}, {}] {}", what, t.describe(), g.batch,
            g.channels, g.h, g.w, layout_name(g.layout));
}

void check_stat(const Tensor& t, const BatchNormGeometry& g, const char* what) {
  check_f32(t, what);
  DLB_CHECK(t.numel() == g.channels, "{}: {} should hold {} values", what, t.describe(), g.channels);
}

// y = act(((x - k) - dm) * scale + beta [+ r]), mean = k + dm, over a contiguous run whose channel
// coefficients are given per element (NHWC: arrays over C) or as scalars (NCHW: one channel per run).
// k is a value of the channel (exact in float, and x - k is exact for x near k), dm the small remainder
// of the mean: y stays accurate when |mean| >> std, where x * scale + shift would cancel two large terms
// and even x - float(mean) would carry the mean's rounding.
template <BatchNormFusion F>
inline void normalize_run(const float* x, const float* r, float* y, int64_t n, const float* k,
                          const float* dm, const float* scale, const float* beta) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    float v = ((x[i] - k[i]) - dm[i]) * scale[i] + beta[i];
    if constexpr (F == BatchNormFusion::add_relu) v += r[i];
    if constexpr (F != BatchNormFusion::none) v = v > 0.f ? v : 0.f;
    y[i] = v;
  }
}
template <BatchNormFusion F>
inline void normalize_run(const float* x, const float* r, float* y, int64_t n, float k, float dm, float scale,
                          float beta) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    float v = ((x[i] - k) - dm) * scale + beta;
    if constexpr (F == BatchNormFusion::add_relu) v += r[i];
    if constexpr (F != BatchNormFusion::none) v = v > 0.f ? v : 0.f;
    y[i] = v;
  }
}

// Everything the loops need, resolved once per call.
struct BnArgs {
  int64_t n, c, hw, m;  // m = n * hw, the count per channel
  const float *x, *r, *y, *dy, *gamma, *beta;
  float *out, *dout_residual;
  float eps;
};

// ---- NCHW ----

template <BatchNormFusion F>
void forward_training_nchw(const BnArgs& a, float* mean_out, float* inv_std_out, float* var_out,
                           int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t c = 0; c < a.c; ++c) {
    const float k = a.x[c * a.hw];
    double s = 0, s2 = 0;
    for (int64_t n = 0; n < a.n; ++n) {
      const float* p = a.x + (n * a.c + c) * a.hw;
      float ps = 0, ps2 = 0;
#pragma omp simd reduction(+ : ps, ps2)
      for (int64_t i = 0; i < a.hw; ++i) {
        const float d = p[i] - k;
        ps += d;
        ps2 += d * d;
      }
      s += ps;
      s2 += ps2;
    }
    const double dm = s / static_cast<double>(a.m);
    const double var = std::max(s2 / static_cast<double>(a.m) - dm * dm, 0.0);
    const double mean = k + dm;
    const float inv = static_cast<float>(1.0 / std::sqrt(var + a.eps));
    const float scale = a.gamma[c] * inv, dm_f = static_cast<float>(dm);
    for (int64_t n = 0; n < a.n; ++n) {
      const int64_t off = (n * a.c + c) * a.hw;
      normalize_run<F>(a.x + off, a.r ? a.r + off : nullptr, a.out + off, a.hw, k, dm_f, scale, a.beta[c]);
    }
    mean_out[c] = static_cast<float>(mean);
    inv_std_out[c] = inv;
    var_out[c] = static_cast<float>(var);
  }
}

template <BatchNormFusion F>
void backward_nchw(const BnArgs& a, const float* mean, const float* inv_std, float* dx, float* dgamma,
                   float* dbeta, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t c = 0; c < a.c; ++c) {
    const float mu = mean[c], inv = inv_std[c];
    double sg = 0, sgx = 0;
    for (int64_t n = 0; n < a.n; ++n) {
      const int64_t off = (n * a.c + c) * a.hw;
      const float *x = a.x + off, *dy = a.dy + off, *y = a.y + off;
      float* dres = a.dout_residual ? a.dout_residual + off : nullptr;
      float ps = 0, psx = 0;
#pragma omp simd reduction(+ : ps, psx)
      for (int64_t i = 0; i < a.hw; ++i) {
        float g = dy[i];
        if constexpr (F != BatchNormFusion::none) g = y[i] > 0.f ? g : 0.f;
        if constexpr (F == BatchNormFusion::add_relu) dres[i] = g;
        ps += g;
        psx += g * (x[i] - mu);
      }
      sg += ps;
      sgx += psx;
    }
    const float db = static_cast<float>(sg), dg = static_cast<float>(sgx) * inv;
    dgamma[c] = dg;
    dbeta[c] = db;
    // dx = k1 * g + kx * (x - mean) + k0
    const float k1 = a.gamma[c] * inv, inv_m = 1.f / static_cast<float>(a.m);
    const float kx = -k1 * inv * dg * inv_m, k0 = -k1 * db * inv_m;
    for (int64_t n = 0; n < a.n; ++n) {
      const int64_t off = (n * a.c + c) * a.hw;
      const float *x = a.x + off, *dy = a.dy + off, *y = a.y + off;
      const float* dres = a.dout_residual ? a.dout_residual + off : nullptr;
      float* d = dx + off;
#pragma omp simd
      for (int64_t i = 0; i < a.hw; ++i) {
        float g;
        if constexpr (F == BatchNormFusion::add_relu) {
          g = dres[i];
        } else if constexpr (F == BatchNormFusion::relu) {
          g = y[i] > 0.f ? dy[i] : 0.f;
        } else {
          g = dy[i];
        }
        d[i] = k1 * g + kx * (x[i] - mu) + k0;
      }
    }
  }
}

// ---- NHWC ----

// Rows [begin, end) of thread t out of `threads` over `rows`.
inline void row_range(int64_t rows, int t, int threads, int64_t& begin, int64_t& end) {
  const int64_t base = rows / threads, extra = rows % threads;
  begin = t * base + std::min<int64_t>(t, extra);
  end = begin + base + (t < extra ? 1 : 0);
}

// Rows summed in float before they are added into the double partials.
constexpr int64_t kFloatRun = 64;

template <BatchNormFusion F>
void forward_training_nhwc(const BnArgs& a, float* mean_out, float* inv_std_out, float* var_out, float* coef,
                           float* fpart, double* dpart, int threads) {
  const int64_t C = a.c, rows = a.m;
  float* scale = coef;
  float* dm_f = coef + C;
  const float* k = a.x;  // the first row: the per-channel shift
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t r0, r1;
    row_range(rows, t, nt, r0, r1);
    float* fs = fpart + 2 * C * t;
    float* fs2 = fs + C;
    double* ds = dpart + 2 * C * t;
    double* ds2 = ds + C;
    std::fill(ds, ds + 2 * C, 0.0);
    for (int64_t rb = r0; rb < r1; rb += kFloatRun) {
      std::fill(fs, fs + 2 * C, 0.f);
      const int64_t re = std::min(r1, rb + kFloatRun);
      for (int64_t r = rb; r < re; ++r) {
        const float* x = a.x + r * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          const float d = x[c] - k[c];
          fs[c] += d;
          fs2[c] += d * d;
        }
      }
      for (int64_t c = 0; c < C; ++c) {
        ds[c] += fs[c];
        ds2[c] += fs2[c];
      }
    }
#pragma omp barrier
#pragma omp for schedule(static)
    for (int64_t c = 0; c < C; ++c) {
      double s = 0, s2 = 0;
      for (int u = 0; u < nt; ++u) {
        s += dpart[2 * C * u + c];
        s2 += dpart[2 * C * u + C + c];
      }
      const double dm = s / static_cast<double>(rows);
      const double var = std::max(s2 / static_cast<double>(rows) - dm * dm, 0.0);
      const double mean = k[c] + dm;
      const float inv = static_cast<float>(1.0 / std::sqrt(var + a.eps));
      scale[c] = a.gamma[c] * inv;
      dm_f[c] = static_cast<float>(dm);
      mean_out[c] = static_cast<float>(mean);
      inv_std_out[c] = inv;
      var_out[c] = static_cast<float>(var);
    }
    // The implicit barrier of the loop above publishes the coefficients.
    for (int64_t r = r0; r < r1; ++r) {
      normalize_run<F>(a.x + r * C, a.r ? a.r + r * C : nullptr, a.out + r * C, C, k, dm_f, scale, a.beta);
    }
  }
}

template <BatchNormFusion F>
void backward_nhwc(const BnArgs& a, const float* mean, const float* inv_std, float* dx, float* dgamma,
                   float* dbeta, float* coef, float* fpart, double* dpart, int threads) {
  const int64_t C = a.c, rows = a.m;
  float* k1 = coef;
  float* kx = coef + C;
  float* k0 = coef + 2 * C;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t r0, r1;
    row_range(rows, t, nt, r0, r1);
    float* fs = fpart + 2 * C * t;
    float* fsx = fs + C;
    double* ds = dpart + 2 * C * t;
    double* dsx = ds + C;
    std::fill(ds, ds + 2 * C, 0.0);
    for (int64_t rb = r0; rb < r1; rb += kFloatRun) {
      std::fill(fs, fs + 2 * C, 0.f);
      const int64_t re = std::min(r1, rb + kFloatRun);
      for (int64_t r = rb; r < re; ++r) {
        const float *x = a.x + r * C, *dy = a.dy + r * C, *y = a.y + r * C;
        float* dres = a.dout_residual ? a.dout_residual + r * C : nullptr;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          float g = dy[c];
          if constexpr (F != BatchNormFusion::none) g = y[c] > 0.f ? g : 0.f;
          if constexpr (F == BatchNormFusion::add_relu) dres[c] = g;
          fs[c] += g;
          fsx[c] += g * (x[c] - mean[c]);
        }
      }
      for (int64_t c = 0; c < C; ++c) {
        ds[c] += fs[c];
        dsx[c] += fsx[c];
      }
    }
#pragma omp barrier
#pragma omp for schedule(static)
    for (int64_t c = 0; c < C; ++c) {
      double s = 0, sx = 0;
      for (int u = 0; u < nt; ++u) {
        s += dpart[2 * C * u + c];
        sx += dpart[2 * C * u + C + c];
      }
      const float inv = inv_std[c];
      const float db = static_cast<float>(s), dg = static_cast<float>(sx) * inv;
      dgamma[c] = dg;
      dbeta[c] = db;
      const float inv_m = 1.f / static_cast<float>(rows);
      k1[c] = a.gamma[c] * inv;
      kx[c] = -k1[c] * inv * dg * inv_m;
      k0[c] = -k1[c] * db * inv_m;
    }
    for (int64_t r = r0; r < r1; ++r) {
      const float *x = a.x + r * C, *dy = a.dy + r * C, *y = a.y + r * C;
      const float* dres = a.dout_residual ? a.dout_residual + r * C : nullptr;
      float* d = dx + r * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        float g;
        if constexpr (F == BatchNormFusion::add_relu) {
          g = dres[c];
        } else if constexpr (F == BatchNormFusion::relu) {
          g = y[c] > 0.f ? dy[c] : 0.f;
        } else {
          g = dy[c];
        }
        d[c] = k1[c] * g + kx[c] * (x[c] - mean[c]) + k0[c];
      }
    }
  }
}

// ---- inference (either layout): one pass with the running statistics ----

template <BatchNormFusion F>
void forward_inference(const BnArgs& a, Layout layout, const float* mean, const float* scale,
                       const float* zeros, int threads) {
  if (layout == Layout::nchw) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t plane = 0; plane < a.n * a.c; ++plane) {
      const int64_t c = plane % a.c, off = plane * a.hw;
      normalize_run<F>(a.x + off, a.r ? a.r + off : nullptr, a.out + off, a.hw, 0.f, mean[c], scale[c],
                       a.beta[c]);
    }
  } else {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t r = 0; r < a.m; ++r) {
      normalize_run<F>(a.x + r * a.c, a.r ? a.r + r * a.c : nullptr, a.out + r * a.c, a.c, zeros, mean, scale,
                       a.beta);
    }
  }
}

// Calls fn.template operator()<F>() with the fusion as a compile-time constant.
template <typename Fn>
void with_fusion(BatchNormFusion fusion, Fn&& fn) {
  switch (fusion) {
    case BatchNormFusion::none:
      fn.template operator()<BatchNormFusion::none>();
      break;
    case BatchNormFusion::relu:
      fn.template operator()<BatchNormFusion::relu>();
      break;
    case BatchNormFusion::add_relu:
      fn.template operator()<BatchNormFusion::add_relu>();
      break;
  }
}

}  // namespace

std::unique_ptr<BatchNormPlan> OneDnnBackend::plan_batchnorm(const BatchNormGeometry& g) {
  check_f32(g.dtype, "batch norm");
  DLB_CHECK(g.batch > 0 && g.channels > 0 && g.h > 0 && g.w > 0, "bad batch-norm geometry");
  return std::make_unique<OneDnnBatchNormPlan>(g, threads_);
}

void OneDnnBackend::batchnorm_forward_training(const BatchNormPlan& plan, const BatchNormTensors& bn,
                                               const Tensor* residual, Tensor& y, void* workspace) {
  // bn.input_sums are never set here (no oneDNN convolution sums its output): the statistics come from x.
  check_batchnorm_tensors("batchnorm_forward_training", bn, BatchNormPass::training);
  const Tensor &x = *bn.x, &gamma = *bn.gamma, &beta = *bn.beta;
  Tensor &running_mean = *bn.running_mean, &running_var = *bn.running_var;
  Tensor &saved_mean = *bn.saved_mean, &saved_inv_std = *bn.saved_inv_std;
  const auto& p = as_onednn(plan);
  const BatchNormGeometry& g = p.geometry;
  check_data(x, g, "batchnorm_forward_training x");
  check_data(y, g, "batchnorm_forward_training y");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&gamma, &beta, &running_mean, &running_var,
                                                              &saved_mean, &saved_inv_std}) {
    check_stat(*t, g, "batchnorm_forward_training parameters/statistics");
  }
  if (g.fusion == BatchNormFusion::add_relu) {
    DLB_CHECK(residual != nullptr, "batch norm with add_relu needs a residual");
    check_data(*residual, g, "batchnorm_forward_training residual");
  }
  DLB_CHECK(workspace != nullptr, "batch norm needs a workspace of plan.workspace_bytes() = {} bytes",
            p.total_bytes);
  const BnArgs a{g.batch,
                 g.channels,
                 g.h * g.w,
                 g.batch * g.h * g.w,
                 x.ptr<float>(),
                 residual && g.fusion == BatchNormFusion::add_relu ? residual->ptr<float>() : nullptr,
                 nullptr,
                 nullptr,
                 gamma.ptr<float>(),
                 beta.ptr<float>(),
                 y.ptr<float>(),
                 nullptr,
                 static_cast<float>(g.epsilon)};
  // Coefficient slots: [0, 2C) scale and the mean's remainder dm (NHWC), [3C, 4C) the batch variance.
  float* coef = static_cast<float*>(at_offset(workspace, p.coef_offset));
  float* variance = coef + 3 * g.channels;
  with_fusion(g.fusion, [&]<BatchNormFusion F>() {
    if (g.layout == Layout::nchw) {
      forward_training_nchw<F>(a, saved_mean.ptr<float>(), saved_inv_std.ptr<float>(), variance, p.threads);
    } else {
      forward_training_nhwc<F>(a, saved_mean.ptr<float>(), saved_inv_std.ptr<float>(), variance, coef,
                               static_cast<float*>(at_offset(workspace, p.float_partial_offset)),
                               static_cast<double*>(at_offset(workspace, p.double_partial_offset)),
                               p.threads);
    }
  });
  const float unbias = a.m > 1 ? static_cast<float>(a.m) / static_cast<float>(a.m - 1) : 1.f;
  const float m = static_cast<float>(g.momentum);
  const float* mean = saved_mean.ptr<float>();
  float* rmean = running_mean.ptr<float>();
  float* rvar = running_var.ptr<float>();
  for (int64_t c = 0; c < g.channels; ++c) {
    rmean[c] = (1.f - m) * rmean[c] + m * mean[c];
    rvar[c] = (1.f - m) * rvar[c] + m * variance[c] * unbias;
  }
}

void OneDnnBackend::batchnorm_forward_inference(const BatchNormPlan& plan, const BatchNormTensors& bn,
                                                const Tensor* residual, Tensor& y) {
  check_batchnorm_tensors("batchnorm_forward_inference", bn, BatchNormPass::inference);
  const Tensor &x = *bn.x, &gamma = *bn.gamma, &beta = *bn.beta;
  const Tensor &running_mean = *bn.running_mean, &running_var = *bn.running_var;
  const auto& p = as_onednn(plan);
  const BatchNormGeometry& g = p.geometry;
  check_data(x, g, "batchnorm_forward_inference x");
  check_data(y, g, "batchnorm_forward_inference y");
  for (const Tensor* t : {&gamma, &beta, &running_mean, &running_var}) {
    check_stat(*t, g, "batchnorm_forward_inference parameters/statistics");
  }
  if (g.fusion == BatchNormFusion::add_relu) {
    DLB_CHECK(residual != nullptr, "batch norm with add_relu needs a residual");
    check_data(*residual, g, "batchnorm_forward_inference residual");
  }
  // The interface passes no workspace to inference: two [C] arrays are allocated here, a negligible cost
  // next to the pass over the activations.
  std::vector<float> scale(static_cast<size_t>(g.channels)), zeros(static_cast<size_t>(g.channels), 0.f);
  const float eps = static_cast<float>(g.epsilon);
  for (int64_t c = 0; c < g.channels; ++c) {
    scale[c] = gamma.ptr<float>()[c] / std::sqrt(running_var.ptr<float>()[c] + eps);
  }
  const BnArgs a{g.batch,
                 g.channels,
                 g.h * g.w,
                 g.batch * g.h * g.w,
                 x.ptr<float>(),
                 residual && g.fusion == BatchNormFusion::add_relu ? residual->ptr<float>() : nullptr,
                 nullptr,
                 nullptr,
                 gamma.ptr<float>(),
                 beta.ptr<float>(),
                 y.ptr<float>(),
                 nullptr,
                 eps};
  with_fusion(g.fusion, [&]<BatchNormFusion F>() {
    forward_inference<F>(a, g.layout, running_mean.ptr<float>(), scale.data(), zeros.data(), p.threads);
  });
}

void OneDnnBackend::batchnorm_backward(const BatchNormPlan& plan, const BatchNormTensors& bn, const Tensor& y,
                                       const Tensor& dy, Tensor* dresidual, Accumulate accumulate,
                                       void* workspace) {
  check_batchnorm_tensors("batchnorm_backward", bn, BatchNormPass::backward);
  const Tensor &x = *bn.x, &gamma = *bn.gamma, &saved_mean = *bn.saved_mean,
               &saved_inv_std = *bn.saved_inv_std;
  Tensor &dx = *bn.dx, &dgamma = *bn.dgamma, &dbeta = *bn.dbeta;
  const auto& p = as_onednn(plan);
  const BatchNormGeometry& g = p.geometry;
  check_data(x, g, "batchnorm_backward x");
  check_data(dy, g, "batchnorm_backward dy");
  check_data(dx, g, "batchnorm_backward dx");
  if (g.fusion != BatchNormFusion::none) check_data(y, g, "batchnorm_backward y");
  for (const Tensor* t :
       std::initializer_list<const Tensor*>{&gamma, &saved_mean, &saved_inv_std, &dgamma, &dbeta}) {
    check_stat(*t, g, "batchnorm_backward parameters/statistics");
  }
  if (g.fusion == BatchNormFusion::add_relu) {
    DLB_CHECK(dresidual != nullptr, "batch norm with add_relu needs dresidual");
    check_data(*dresidual, g, "batchnorm_backward dresidual");
  }
  DLB_CHECK(workspace != nullptr, "batch norm needs a workspace of plan.workspace_bytes() = {} bytes",
            p.total_bytes);
  const BnArgs a{g.batch,
                 g.channels,
                 g.h * g.w,
                 g.batch * g.h * g.w,
                 x.ptr<float>(),
                 nullptr,
                 g.fusion != BatchNormFusion::none ? y.ptr<float>() : nullptr,
                 dy.ptr<float>(),
                 gamma.ptr<float>(),
                 nullptr,
                 nullptr,
                 g.fusion == BatchNormFusion::add_relu ? dresidual->ptr<float>() : nullptr,
                 static_cast<float>(g.epsilon)};
  float* coef = static_cast<float*>(at_offset(workspace, p.coef_offset));
  const bool add = accumulate == Accumulate::add;
  // Accumulated parameter gradients are computed into the workspace first, then added.
  // Coefficient slots: [0, 3C) the backward's k1, kx, k0 (NHWC), [3C, 5C) dgamma and dbeta to accumulate.
  float* dg = add ? coef + 3 * g.channels : dgamma.ptr<float>();
  float* db = add ? coef + 4 * g.channels : dbeta.ptr<float>();
  with_fusion(g.fusion, [&]<BatchNormFusion F>() {
    if (g.layout == Layout::nchw) {
      backward_nchw<F>(a, saved_mean.ptr<float>(), saved_inv_std.ptr<float>(), dx.ptr<float>(), dg, db,
                       p.threads);
    } else {
      backward_nhwc<F>(a, saved_mean.ptr<float>(), saved_inv_std.ptr<float>(), dx.ptr<float>(), dg, db, coef,
                       static_cast<float*>(at_offset(workspace, p.float_partial_offset)),
                       static_cast<double*>(at_offset(workspace, p.double_partial_offset)), p.threads);
    }
  });
  if (add) {
    float* dgo = dgamma.ptr<float>();
    float* dbo = dbeta.ptr<float>();
    for (int64_t c = 0; c < g.channels; ++c) {
      dgo[c] += dg[c];
      dbo[c] += db[c];
    }
  }
}

}  // namespace onednn
}  // namespace dlbench
