// Pooling. NHWC runs oneDNN's jit primitives; max pooling keeps oneDNN's workspace (the argmax) in the
// caller's `saved` buffer between forward and backward. NCHW runs our own loops: oneDNN 2.6 has only its
// generic simple_nchw kernel there, which took 415 ms (forward) + 160 ms (backward) for ResNet-50's stem
// max pool at batch 16 on one Zen1 core, against 16 + 54 ms for the same pool in NHWC. Ours saves the
// argmax as one byte per output (the position inside the window). Average pooling excludes the padding
// from the divisor in both.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "backend/onednn/onednn_common.h"

namespace dlbench {
namespace onednn {
namespace {

using dnnl::memory;

class OneDnnPoolPlan final : public PoolPlan {
 public:
  explicit OneDnnPoolPlan(const PoolGeometry& g) : PoolPlan(g) {}
  size_t saved_bytes() const override {
    if (own_nchw) return geometry.kind == PoolKind::max ? static_cast<size_t>(out_numel()) : 0;
    return saved_md ? saved_md.get_size() : 0;
  }
  int64_t out_numel() const {
    return geometry.batch * geometry.channels * geometry.out_h() * geometry.out_w();
  }

  bool own_nchw = false;  // our loops instead of the primitives below
  int threads = 1;
  memory::desc src_md, dst_md, saved_md;  // saved_md is empty for average pooling
  dnnl::pooling_forward forward_training, forward_inference;
  dnnl::pooling_backward backward;
};

const OneDnnPoolPlan& as_onednn(const PoolPlan& plan) {
  auto* p = dynamic_cast<const OneDnnPoolPlan*>(&plan);
  DLB_CHECK(p != nullptr, "pool plan was not made by the onednn backend");
  return *p;
}

void check_pool_tensor(const Tensor& t, const memory::dims& dims, Layout layout, const char* what) {
  check_f32(t, what);
  DLB_CHECK(t.rank() == 4 && t.dim(0) == dims[0] && t.dim(1) == dims[1] && t.dim(2) == dims[2] &&
                t.dim(3) == dims[3] && t.layout() == layout,
            "{}: tensor {} does not match the plan's [{}] {}", what, t.describe(), fmt::join(dims, ", "),
            layout_name(layout));
}

// ---- our NCHW loops: one plane (n, c) at a time, planes shared among threads ----

void max_forward_nchw(const PoolGeometry& g, const float* x, float* y, uint8_t* argmax, int threads) {
  const int64_t H = g.in_h, W = g.in_w, P = g.out_h(), Q = g.out_w();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t plane = 0; plane < g.batch * g.channels; ++plane) {
    const float* xp = x + plane * H * W;
    float* yp = y + plane * P * Q;
    uint8_t* ap = argmax ? argmax + plane * P * Q : nullptr;
    for (int64_t p = 0; p < P; ++p) {
      const int64_t h0 = p * g.stride_h - g.pad_h;
      const int64_t kh0 = std::max<int64_t>(0, -h0), kh1 = std::min<int64_t>(g.kernel_h, H - h0);
      for (int64_t q = 0; q < Q; ++q) {
        const int64_t w0 = q * g.stride_w - g.pad_w;
        const int64_t kw0 = std::max<int64_t>(0, -w0), kw1 = std::min<int64_t>(g.kernel_w, W - w0);
        float best = -std::numeric_limits<float>::infinity();
        int64_t at = kh0 * g.kernel_w + kw0;
        for (int64_t kh = kh0; kh < kh1; ++kh) {
          const float* row = xp + (h0 + kh) * W + w0;
          for (int64_t kw = kw0; kw < kw1; ++kw) {
            if (row[kw] > best) {
              best = row[kw];
              at = kh * g.kernel_w + kw;
            }
          }
        }
        yp[p * Q + q] = best;
        if (ap) ap[p * Q + q] = static_cast<uint8_t>(at);
      }
    }
  }
}

void max_backward_nchw(const PoolGeometry& g, const float* dy, const uint8_t* argmax, float* dx,
                       int threads) {
  const int64_t H = g.in_h, W = g.in_w, P = g.out_h(), Q = g.out_w();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t plane = 0; plane < g.batch * g.channels; ++plane) {
    float* dxp = dx + plane * H * W;
    const float* dyp = dy + plane * P * Q;
    const uint8_t* ap = argmax + plane * P * Q;
    std::fill(dxp, dxp + H * W, 0.f);
    for (int64_t p = 0; p < P; ++p) {
      for (int64_t q = 0; q < Q; ++q) {
        const int64_t at = ap[p * Q + q];
        const int64_t h = p * g.stride_h - g.pad_h + at / g.kernel_w,
                      w = q * g.stride_w - g.pad_w + at % g.kernel_w;
        dxp[h * W + w] += dyp[p * Q + q];
      }
    }
  }
}

// Average excluding padding: the divisor counts the window's elements inside the input.
void avg_forward_nchw(const PoolGeometry& g, const float* x, float* y, int threads) {
  const int64_t H = g.in_h, W = g.in_w, P = g.out_h(), Q = g.out_w();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t plane = 0; plane < g.batch * g.channels; ++plane) {
    const float* xp = x + plane * H * W;
    float* yp = y + plane * P * Q;
    for (int64_t p = 0; p < P; ++p) {
      const int64_t h0 = std::max<int64_t>(0, p * g.stride_h - g.pad_h);
      const int64_t h1 = std::min<int64_t>(H, p * g.stride_h - g.pad_h + g.kernel_h);
      for (int64_t q = 0; q < Q; ++q) {
        const int64_t w0 = std::max<int64_t>(0, q * g.stride_w - g.pad_w);
        const int64_t w1 = std::min<int64_t>(W, q * g.stride_w - g.pad_w + g.kernel_w);
        float sum = 0.f;
        for (int64_t h = h0; h < h1; ++h) {
#pragma omp simd reduction(+ : sum)
          for (int64_t w = w0; w < w1; ++w) sum += xp[h * W + w];
        }
        const int64_t count = (h1 - h0) * (w1 - w0);
        yp[p * Q + q] = count > 0 ? sum / static_cast<float>(count) : 0.f;
      }
    }
  }
}

void avg_backward_nchw(const PoolGeometry& g, const float* dy, float* dx, int threads) {
  const int64_t H = g.in_h, W = g.in_w, P = g.out_h(), Q = g.out_w();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t plane = 0; plane < g.batch * g.channels; ++plane) {
    float* dxp = dx + plane * H * W;
    const float* dyp = dy + plane * P * Q;
    std::fill(dxp, dxp + H * W, 0.f);
    for (int64_t p = 0; p < P; ++p) {
      const int64_t h0 = std::max<int64_t>(0, p * g.stride_h - g.pad_h);
      const int64_t h1 = std::min<int64_t>(H, p * g.stride_h - g.pad_h + g.kernel_h);
      for (int64_t q = 0; q < Q; ++q) {
        const int64_t w0 = std::max<int64_t>(0, q * g.stride_w - g.pad_w);
        const int64_t w1 = std::min<int64_t>(W, q * g.stride_w - g.pad_w + g.kernel_w);
        const int64_t count = (h1 - h0) * (w1 - w0);
        if (count == 0) continue;
        const float share = dyp[p * Q + q] / static_cast<float>(count);
        for (int64_t h = h0; h < h1; ++h) {
#pragma omp simd
          for (int64_t w = w0; w < w1; ++w) dxp[h * W + w] += share;
        }
      }
    }
  }
}

memory::dims src_dims(const PoolGeometry& g) { return {g.batch, g.channels, g.in_h, g.in_w}; }
memory::dims dst_dims(const PoolGeometry& g) { return {g.batch, g.channels, g.out_h(), g.out_w()}; }

}  // namespace

std::unique_ptr<PoolPlan> OneDnnBackend::plan_pool(const PoolGeometry& g) {
  check_f32(g.dtype, "pooling");
  DLB_CHECK(g.batch > 0 && g.channels > 0 && g.out_h() > 0 && g.out_w() > 0, "bad pooling geometry");
  auto plan = std::make_unique<OneDnnPoolPlan>(g);
  plan->threads = threads_;
  if (g.layout == Layout::nchw) {
    DLB_CHECK(g.kernel_h * g.kernel_w <= 256, "pooling window of {}x{} is too large", g.kernel_h, g.kernel_w);
    DLB_CHECK(g.pad_h < g.kernel_h && g.pad_w < g.kernel_w,
              "pooling padding must be smaller than the window");
    plan->own_nchw = true;
    return plan;
  }
  plan->src_md = f32_desc(src_dims(g), activation_tag(g.layout));
  plan->dst_md = f32_desc(dst_dims(g), activation_tag(g.layout));
  const auto algo =
      g.kind == PoolKind::max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding;
  const memory::dims strides{g.stride_h, g.stride_w}, kernel{g.kernel_h, g.kernel_w}, pad{g.pad_h, g.pad_w};
  const std::string what = fmt::format(
      "{} pool {}x{}x{}x{} k{}x{} s{} p{} {}", g.kind == PoolKind::max ? "max" : "avg", g.batch, g.channels,
      g.in_h, g.in_w, g.kernel_h, g.kernel_w, g.stride_h, g.pad_h, layout_name(g.layout));
  using fwd = dnnl::pooling_forward;
  using bwd = dnnl::pooling_backward;
  fwd::primitive_desc train_pd, infer_pd;
  bwd::primitive_desc bwd_pd;
  DNNL_CHECK((train_pd = fwd::primitive_desc(fwd::desc(dnnl::prop_kind::forward_training, algo, plan->src_md,
                                                       plan->dst_md, strides, kernel, pad, pad),
                                             engine_)),
             "{} forward training", what);
  DNNL_CHECK((infer_pd = fwd::primitive_desc(fwd::desc(dnnl::prop_kind::forward_inference, algo, plan->src_md,
                                                       plan->dst_md, strides, kernel, pad, pad),
                                             engine_)),
             "{} forward inference", what);
  DNNL_CHECK((bwd_pd = bwd::primitive_desc(
                  bwd::desc(algo, plan->src_md, plan->dst_md, strides, kernel, pad, pad), engine_, train_pd)),
             "{} backward", what);
  DLB_CHECK(train_pd.scratchpad_desc().get_size() == 0 && infer_pd.scratchpad_desc().get_size() == 0 &&
                bwd_pd.scratchpad_desc().get_size() == 0,
            "{}: oneDNN pooling unexpectedly needs a scratchpad", what);
  if (g.kind == PoolKind::max) plan->saved_md = train_pd.workspace_desc();
  plan->forward_training = fwd(train_pd);
  plan->forward_inference = fwd(infer_pd);
  plan->backward = bwd(bwd_pd);
  return plan;
}

void OneDnnBackend::pool_forward(const PoolPlan& plan, const Tensor& x, Tensor& y, void* saved) {
  const auto& p = as_onednn(plan);
  check_pool_tensor(x, src_dims(p.geometry), p.geometry.layout, "pool_forward x");
  check_pool_tensor(y, dst_dims(p.geometry), p.geometry.layout, "pool_forward y");
  if (p.own_nchw) {
    if (p.geometry.kind == PoolKind::max) {
      max_forward_nchw(p.geometry, x.ptr<float>(), y.ptr<float>(), static_cast<uint8_t*>(saved), p.threads);
    } else {
      avg_forward_nchw(p.geometry, x.ptr<float>(), y.ptr<float>(), p.threads);
    }
    return;
  }
  ArgMap args{{DNNL_ARG_SRC, wrap(p.src_md, engine_, x.data())},
              {DNNL_ARG_DST, wrap(p.dst_md, engine_, y.data())}};
  const bool training = p.saved_md && saved != nullptr;
  if (training) args.emplace(DNNL_ARG_WORKSPACE, wrap(p.saved_md, engine_, saved));
  DNNL_CHECK((training || !p.saved_md ? p.forward_training : p.forward_inference).execute(stream_, args),
             "executing pooling forward");
  stream_.wait();
}

void OneDnnBackend::pool_backward(const PoolPlan& plan, const Tensor& x, const Tensor& y, const Tensor& dy,
                                  const void* saved, Tensor& dx) {
  const auto& p = as_onednn(plan);
  check_pool_tensor(dy, dst_dims(p.geometry), p.geometry.layout, "pool_backward dy");
  check_pool_tensor(dx, src_dims(p.geometry), p.geometry.layout, "pool_backward dx");
  if (p.own_nchw) {
    if (p.geometry.kind == PoolKind::max) {
      DLB_CHECK(saved != nullptr, "max-pool backward needs the state its forward saved");
      max_backward_nchw(p.geometry, dy.ptr<float>(), static_cast<const uint8_t*>(saved), dx.ptr<float>(),
                        p.threads);
    } else {
      avg_backward_nchw(p.geometry, dy.ptr<float>(), dx.ptr<float>(), p.threads);
    }
    return;
  }
  ArgMap args{{DNNL_ARG_DIFF_DST, wrap(p.dst_md, engine_, dy.data())},
              {DNNL_ARG_DIFF_SRC, wrap(p.src_md, engine_, dx.data())}};
  if (p.saved_md) {
    DLB_CHECK(saved != nullptr, "max-pool backward needs the state its forward saved");
    args.emplace(DNNL_ARG_WORKSPACE, wrap(p.saved_md, engine_, saved));
  }
  DNNL_CHECK(p.backward.execute(stream_, args), "executing pooling backward");
  stream_.wait();
}

}  // namespace onednn
}  // namespace dlbench
