// Layer normalisation over each row of x [..., C] on oneDNN's layer_normalization primitive (forward
// training and backward, with scale and shift), f32: y = (x - mean) * rstd * weight + bias.
//
// oneDNN keeps a row's variance where our interface keeps rstd = 1 / sqrt(var + eps) (what the backward
// needs, and what cuDNN saves), so the forward lets oneDNN write the variance into `rstd` and turns it
// into rstd in place. The backward is not told eps; it hands oneDNN var' = 1 / rstd^2 with eps = 0, from
// which oneDNN's 1 / sqrt(var' + 0) is rstd again: the backward depends on the statistics through rstd
// alone. oneDNN overwrites its weight gradients, so Accumulate::add takes them through scratch and adds.
// oneDNN 2.6 will not run the backward without a shift argument, though no gradient depends on the shift
// (it is not an input of the backward here): the weight stands in for it.
#include <cmath>
#include <string>

#include "backend/onednn/onednn_common.h"

namespace dlbench {
namespace onednn {
namespace {

const dnnl::normalization_flags kScaleAndShift =
    dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;

// x [..., C]: N rows of C features. Returns {N, C}.
std::pair<int64_t, int64_t> check_layernorm(const char* op, const Tensor& x, const Tensor& weight,
                                            const Tensor& mean, const Tensor& rstd) {
  require_f32(x, op, "x");
  require_f32(weight, op, "the weight");
  require_f32(mean, op, "the saved mean");
  require_f32(rstd, op, "the saved rstd");
  DLB_CHECK(x.rank() >= 2 && x.dims().back() > 0, "{}: x is {}, expected rows of features [..., C]", op,
            x.describe());
  const int64_t C = x.dims().back(), N = x.numel() / C;
  DLB_CHECK(weight.numel() == C && mean.numel() == N && rstd.numel() == N,
            "{}: x {} needs weight [{}] and statistics [{}]; got {}, {}, {}", op, x.describe(), C, N,
            weight.describe(), mean.describe(), rstd.describe());
  return {N, C};
}

void check_like(const char* op, const Tensor& t, const Tensor& like, const char* name) {
  require_f32(t, op, name);
  DLB_CHECK(t.numel() == like.numel(), "{}: {} is {}, expected {} elements", op, name, t.describe(),
            like.numel());
}

dnnl::layer_normalization_forward::primitive_desc forward_pd(const dnnl::engine& engine, int64_t N, int64_t C,
                                                             float eps) {
  const dnnl::memory::desc data = f32_desc({N, C}, tag::ab), stats = f32_desc({N}, tag::a);
  return {{dnnl::prop_kind::forward_training, data, stats, eps, kScaleAndShift}, engine};
}

}  // namespace

void OneDnnBackend::layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                                      Tensor& y, Tensor& mean, Tensor& rstd) {
  const char* op = "layernorm_forward";
  const auto [N, C] = check_layernorm(op, x, weight, mean, rstd);
  check_like(op, bias, weight, "the bias");
  check_like(op, y, x, "y");
  DLB_CHECK(eps >= 0, "{}: eps {} is negative", op, eps);
  const auto& primitive = cached_primitive(fmt::format("layernorm_fwd {} {} {:a}", N, C, eps), [&] {
    return dnnl::primitive(dnnl::layer_normalization_forward(forward_pd(engine_, N, C, eps)));
  });
  const dnnl::memory::desc data = f32_desc({N, C}, tag::ab), stats = f32_desc({N}, tag::a),
                           params = f32_desc({C}, tag::a);
  DNNL_CHECK(primitive.execute(stream_, {{DNNL_ARG_SRC, wrap(data, engine_, x.data())},
                                         {DNNL_ARG_DST, wrap(data, engine_, y.data())},
                                         {DNNL_ARG_MEAN, wrap(stats, engine_, mean.data())},
                                         {DNNL_ARG_VARIANCE, wrap(stats, engine_, rstd.data())},
                                         {DNNL_ARG_SCALE, wrap(params, engine_, weight.data())},
                                         {DNNL_ARG_SHIFT, wrap(params, engine_, bias.data())}}),
             "executing layer normalisation forward on {}", x.describe());
  stream_.wait();
  float* r = rstd.ptr<float>();
#pragma omp parallel for simd schedule(static) num_threads(threads_) if (N > kParallelThreshold)
  for (int64_t n = 0; n < N; ++n) r[n] = 1.f / std::sqrt(r[n] + eps);
}

void OneDnnBackend::layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                                       const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dweight,
                                       Tensor& dbias, Accumulate accumulate, Accumulate dx_accumulate) {
  const char* op = "layernorm_backward";
  const auto [N, C] = check_layernorm(op, x, weight, mean, rstd);
  check_like(op, dy, x, "dy");
  check_like(op, dx, x, "dx");
  check_like(op, dweight, weight, "dweight");
  check_like(op, dbias, weight, "dbias");
  const auto& primitive = cached_primitive(fmt::format("layernorm_bwd {} {}", N, C), [&] {
    const dnnl::memory::desc data = f32_desc({N, C}, tag::ab), stats = f32_desc({N}, tag::a);
    const dnnl::layer_normalization_backward::desc desc(dnnl::prop_kind::backward, data, data, stats, 0.f,
                                                        kScaleAndShift);
    return dnnl::primitive(dnnl::layer_normalization_backward(
        dnnl::layer_normalization_backward::primitive_desc(desc, engine_, forward_pd(engine_, N, C, 0.f))));
  });
  const bool add = accumulate == Accumulate::add, add_dx = dx_accumulate == Accumulate::add;
  // With add_dx, dx's new part lands after the variance and the parameters' parts, and is added after.
  float* variance = scratch().floats(static_cast<size_t>(N + (add ? 2 * C : 0) + (add_dx ? N * C : 0)));
  float* dweight_out = add ? variance + N : dweight.ptr<float>();
  float* dbias_out = add ? variance + N + C : dbias.ptr<float>();
  float* dx_out = add_dx ? variance + N + (add ? 2 * C : 0) : dx.ptr<float>();
  const float* r = rstd.ptr<float>();
#pragma omp parallel for simd schedule(static) num_threads(threads_) if (N > kParallelThreshold)
  for (int64_t n = 0; n < N; ++n) variance[n] = 1.f / (r[n] * r[n]);
  const dnnl::memory::desc data = f32_desc({N, C}, tag::ab), stats = f32_desc({N}, tag::a),
                           params = f32_desc({C}, tag::a);
  DNNL_CHECK(primitive.execute(stream_, {{DNNL_ARG_SRC, wrap(data, engine_, x.data())},
                                         {DNNL_ARG_DIFF_DST, wrap(data, engine_, dy.data())},
                                         {DNNL_ARG_MEAN, wrap(stats, engine_, mean.data())},
                                         {DNNL_ARG_VARIANCE, wrap(stats, engine_, variance)},
                                         {DNNL_ARG_SCALE, wrap(params, engine_, weight.data())},
                                         {DNNL_ARG_SHIFT, wrap(params, engine_, weight.data())},
                                         {DNNL_ARG_DIFF_SRC, wrap(data, engine_, dx_out)},
                                         {DNNL_ARG_DIFF_SCALE, wrap(params, engine_, dweight_out)},
                                         {DNNL_ARG_DIFF_SHIFT, wrap(params, engine_, dbias_out)}}),
             "executing layer normalisation backward on {}", x.describe());
  stream_.wait();
  if (add_dx) {
    float* d = dx.ptr<float>();
    const int64_t count = N * C;
#pragma omp parallel for simd schedule(static) num_threads(threads_) if (count > kParallelThreshold)
    for (int64_t i = 0; i < count; ++i) d[i] += dx_out[i];
  }
  if (add) {
    float* dw = dweight.ptr<float>();
    float* db = dbias.ptr<float>();
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      dw[c] += dweight_out[c];
      db[c] += dbias_out[c];
    }
  }
}

}  // namespace onednn
}  // namespace dlbench
