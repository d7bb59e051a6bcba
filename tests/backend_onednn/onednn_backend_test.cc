// The onednn backend against the reference backend (the oracle), op by op, forward and backward.
//
// Tolerances (max |a - b| / max |reference|, tests/test_util.h):
//   convolution (every strategy: plain, blocked, blocked_weights)   1e-4
//   batch norm forward 1e-5, backward 1e-4 (dx sums over N*H*W in another order)
//   pooling 1e-6 (max is exact; average is one division)
//   gemm, bias, softmax-cross-entropy 1e-5; elementwise ops and the SGD update 1e-6
#include "backend/onednn/onednn_backend.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "compute_copies_check.h"
#include "core/status.h"
#include "test_util.h"

namespace dlbench {
namespace {

using testing::fill_uniform;
using testing::relative_error;

// A host buffer with the same contents for both backends (both run on the CPU, on host memory).
HostBuffer random_buffer(std::vector<int64_t> dims, uint64_t seed, Layout layout = Layout::nchw,
                         double lo = -1.0, double hi = 1.0) {
  HostBuffer b(std::move(dims), DType::f32, layout);
  fill_uniform(b.tensor(), seed, lo, hi);
  return b;
}

HostBuffer copy_of(const HostBuffer& src) {
  HostBuffer b(src.tensor().dims(), src.tensor().dtype(), src.tensor().layout());
  std::memcpy(b.tensor().data(), src.tensor().data(), src.tensor().bytes());
  return b;
}

struct Workspace {
  std::vector<std::byte> bytes;
  explicit Workspace(size_t n) : bytes(std::max<size_t>(n, 1)) {}
  void* data() { return bytes.data(); }
};

class OneDnnVsReference : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> onednn = make_onednn_backend(0);
  std::unique_ptr<Backend> ref = make_reference_backend();
};

// ---------------------------------------------------------------------------------------------------------
// Convolution

struct ConvCase {
  int64_t n, c, h, w, k, r, s, stride_h, stride_w, pad_h, pad_w;
};

const ConvCase kConvCases[] = {
    {2, 3, 9, 11, 5, 3, 3, 1, 1, 1, 1},     // odd sizes, first-layer-like C
    {2, 12, 9, 9, 20, 3, 3, 2, 2, 1, 1},    // stride 2, channels not a multiple of 8
    {3, 16, 10, 10, 24, 1, 1, 1, 1, 0, 0},  // 1x1
    {2, 16, 11, 11, 32, 1, 1, 2, 2, 0, 0},  // 1x1 stride 2 on odd size (projection shortcut)
    {2, 8, 13, 7, 8, 1, 3, 1, 2, 0, 1},     // non-square kernel and strides
    {1, 3, 17, 17, 8, 7, 7, 2, 2, 3, 3},    // stem-like 7x7 stride 2
    {4, 32, 7, 7, 16, 3, 3, 1, 1, 1, 1},    // small spatial, more channels
};

std::string conv_case_name(
    const ::testing::TestParamInfo<std::tuple<ConvCase, Layout, OneDnnConvFormat>>& info) {
  const ConvCase& c = std::get<0>(info.param);
  return fmt::format("n{}c{}h{}w{}k{}r{}s{}st{}x{}p{}x{}_{}_{}", c.n, c.c, c.h, c.w, c.k, c.r, c.s,
                     c.stride_h, c.stride_w, c.pad_h, c.pad_w, layout_name(std::get<1>(info.param)),
                     onednn_conv_format_name(std::get<2>(info.param)));
}

class ConvTest : public OneDnnVsReference,
                 public ::testing::WithParamInterface<std::tuple<ConvCase, Layout, OneDnnConvFormat>> {};

TEST_P(ConvTest, MatchesReference) {
  const auto [cc, layout, format] = GetParam();
  ConvGeometry g;
  g.batch = cc.n, g.in_channels = cc.c, g.in_h = cc.h, g.in_w = cc.w, g.out_channels = cc.k;
  g.kernel_h = cc.r, g.kernel_w = cc.s, g.stride_h = cc.stride_h, g.stride_w = cc.stride_w;
  g.pad_h = cc.pad_h, g.pad_w = cc.pad_w, g.layout = layout;
  const int64_t p = g.out_h(), q = g.out_w();
  HostBuffer x = random_buffer({cc.n, cc.c, cc.h, cc.w}, 1, layout);
  HostBuffer w = random_buffer({cc.k, cc.c, cc.r, cc.s}, 2, layout);
  HostBuffer dy = random_buffer({cc.n, cc.k, p, q}, 3, layout);

  auto plan = plan_onednn_conv(*onednn, g, {format, format, format});
  auto ref_plan = ref->plan_conv(g);
  Workspace ws(plan->workspace_bytes()), ref_ws(ref_plan->workspace_bytes());
  SCOPED_TRACE(describe_onednn_conv_plan(*plan));

  HostBuffer y({cc.n, cc.k, p, q}, DType::f32, layout), y_ref({cc.n, cc.k, p, q}, DType::f32, layout);
  onednn->conv_forward(*plan, x.tensor(), w.tensor(), y.tensor(), ws.data());
  ref->conv_forward(*ref_plan, x.tensor(), w.tensor(), y_ref.tensor(), ref_ws.data());
  EXPECT_LT(relative_error(y.tensor(), y_ref.tensor()), 1e-4) << "forward";

  for (Accumulate acc : {Accumulate::overwrite, Accumulate::add}) {
    SCOPED_TRACE(acc == Accumulate::add ? "accumulate" : "overwrite");
    HostBuffer dx = random_buffer({cc.n, cc.c, cc.h, cc.w}, 4, layout), dx_ref = copy_of(dx);
    onednn->conv_backward_data(*plan, dy.tensor(), w.tensor(), dx.tensor(), acc, ws.data());
    ref->conv_backward_data(*ref_plan, dy.tensor(), w.tensor(), dx_ref.tensor(), acc, ref_ws.data());
    EXPECT_LT(relative_error(dx.tensor(), dx_ref.tensor()), 1e-4) << "backward data";

    HostBuffer dw = random_buffer({cc.k, cc.c, cc.r, cc.s}, 5, layout), dw_ref = copy_of(dw);
    onednn->conv_backward_filter(*plan, x.tensor(), dy.tensor(), dw.tensor(), acc, ws.data());
    ref->conv_backward_filter(*ref_plan, x.tensor(), dy.tensor(), dw_ref.tensor(), acc, ref_ws.data());
    EXPECT_LT(relative_error(dw.tensor(), dw_ref.tensor()), 1e-4) << "backward filter";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvTest,
                         ::testing::Combine(::testing::ValuesIn(kConvCases),
                                            ::testing::Values(Layout::nchw, Layout::nhwc),
                                            ::testing::Values(OneDnnConvFormat::plain,
                                                              OneDnnConvFormat::blocked,
                                                              OneDnnConvFormat::blocked_weights)),
                         conv_case_name);

TEST_F(OneDnnVsReference, DefaultConvPlanMatchesReference) {
  // plan_conv's own per-shape choice, on a ResNet-like shape in both layouts.
  for (Layout layout : {Layout::nchw, Layout::nhwc}) {
    ConvGeometry g;
    g.batch = 2, g.in_channels = 64, g.in_h = g.in_w = 8, g.out_channels = 64, g.kernel_h = g.kernel_w = 3;
    g.pad_h = g.pad_w = 1, g.layout = layout;
    HostBuffer x = random_buffer({2, 64, 8, 8}, 11, layout), w = random_buffer({64, 64, 3, 3}, 12, layout);
    auto plan = onednn->plan_conv(g);
    auto ref_plan = ref->plan_conv(g);
    Workspace ws(plan->workspace_bytes()), ref_ws(ref_plan->workspace_bytes());
    HostBuffer y({2, 64, 8, 8}, DType::f32, layout), y_ref({2, 64, 8, 8}, DType::f32, layout);
    onednn->conv_forward(*plan, x.tensor(), w.tensor(), y.tensor(), ws.data());
    ref->conv_forward(*ref_plan, x.tensor(), w.tensor(), y_ref.tensor(), ref_ws.data());
    EXPECT_LT(relative_error(y.tensor(), y_ref.tensor()), 1e-4) << describe_onednn_conv_plan(*plan);
  }
}

TEST_F(OneDnnVsReference, RejectsOtherDtypes) {
  ConvGeometry g;
  g.batch = 1, g.in_channels = 1, g.in_h = g.in_w = 4, g.out_channels = 1, g.dtype = DType::f64;
  EXPECT_THROW(onednn->plan_conv(g), Error);
  BatchNormGeometry bg;
  bg.batch = 1, bg.channels = 1, bg.dtype = DType::f16;
  EXPECT_THROW(onednn->plan_batchnorm(bg), Error);
  HostBuffer a({4}, DType::f64), b({4}, DType::f64);
  EXPECT_THROW(onednn->relu_forward(a.tensor(), b.tensor()), Error);
}

// ---------------------------------------------------------------------------------------------------------
// Batch norm

// The tensors each batch-norm pass names (BatchNormTensors), from the test's buffers.
BatchNormTensors training_tensors(HostBuffer& x, HostBuffer& gamma, HostBuffer& beta,
                                  HostBuffer& running_mean, HostBuffer& running_var, HostBuffer& saved_mean,
                                  HostBuffer& saved_inv_std) {
  return BatchNormTensors{.x = &x.tensor(),
                          .gamma = &gamma.tensor(),
                          .beta = &beta.tensor(),
                          .running_mean = &running_mean.tensor(),
                          .running_var = &running_var.tensor(),
                          .saved_mean = &saved_mean.tensor(),
                          .saved_inv_std = &saved_inv_std.tensor()};
}

BatchNormTensors inference_tensors(HostBuffer& x, HostBuffer& gamma, HostBuffer& beta,
                                   HostBuffer& running_mean, HostBuffer& running_var) {
  return BatchNormTensors{.x = &x.tensor(),
                          .gamma = &gamma.tensor(),
                          .beta = &beta.tensor(),
                          .running_mean = &running_mean.tensor(),
                          .running_var = &running_var.tensor()};
}

BatchNormTensors backward_tensors(HostBuffer& x, HostBuffer& gamma, HostBuffer& saved_mean,
                                  HostBuffer& saved_inv_std, HostBuffer& dx, HostBuffer& dgamma,
                                  HostBuffer& dbeta) {
  return BatchNormTensors{.x = &x.tensor(),
                          .gamma = &gamma.tensor(),
                          .saved_mean = &saved_mean.tensor(),
                          .saved_inv_std = &saved_inv_std.tensor(),
                          .dx = &dx.tensor(),
                          .dgamma = &dgamma.tensor(),
                          .dbeta = &dbeta.tensor()};
}

struct BnCase {
  int64_t n, c, h, w;
};

const BnCase kBnCases[] = {{2, 3, 5, 7}, {4, 16, 6, 6}, {3, 20, 1, 1}, {8, 8, 3, 3}};

std::string bn_case_name(const ::testing::TestParamInfo<std::tuple<BnCase, Layout, BatchNormFusion>>& info) {
  const BnCase& c = std::get<0>(info.param);
  const BatchNormFusion fusion = std::get<2>(info.param);
  const char* f = fusion == BatchNormFusion::none   ? "none"
                  : fusion == BatchNormFusion::relu ? "relu"
                                                    : "add_relu";
  return fmt::format("n{}c{}h{}w{}_{}_{}", c.n, c.c, c.h, c.w, layout_name(std::get<1>(info.param)), f);
}

class BatchNormTest : public OneDnnVsReference,
                      public ::testing::WithParamInterface<std::tuple<BnCase, Layout, BatchNormFusion>> {};

TEST_P(BatchNormTest, MatchesReference) {
  const auto [bc, layout, fusion] = GetParam();
  BatchNormGeometry g;
  g.batch = bc.n, g.channels = bc.c, g.h = bc.h, g.w = bc.w, g.layout = layout, g.fusion = fusion;
  g.epsilon = 1e-5, g.momentum = 0.1;
  const std::vector<int64_t> dims{bc.n, bc.c, bc.h, bc.w}, cdims{bc.c};
  // A non-zero mean per channel so that the statistics are not trivially ~0.
  HostBuffer x = random_buffer(dims, 21, layout, -1.0, 3.0);
  HostBuffer residual = random_buffer(dims, 22, layout);
  HostBuffer gamma = random_buffer(cdims, 23, Layout::nchw, 0.5, 1.5);
  HostBuffer beta = random_buffer(cdims, 24);
  HostBuffer dy = random_buffer(dims, 25, layout);
  const Tensor* res = fusion == BatchNormFusion::add_relu ? &residual.tensor() : nullptr;

  auto plan = onednn->plan_batchnorm(g);
  auto ref_plan = ref->plan_batchnorm(g);
  Workspace ws(plan->workspace_bytes()), ref_ws(ref_plan->workspace_bytes());

  // Training forward, with running statistics that start away from 0/1.
  HostBuffer rmean = random_buffer(cdims, 26), rvar = random_buffer(cdims, 27, Layout::nchw, 0.5, 2.0);
  HostBuffer rmean_ref = copy_of(rmean), rvar_ref = copy_of(rvar);
  HostBuffer y(dims, DType::f32, layout), y_ref(dims, DType::f32, layout);
  HostBuffer mean(cdims, DType::f32), inv_std(cdims, DType::f32), mean_ref(cdims, DType::f32),
      inv_std_ref(cdims, DType::f32);
  onednn->batchnorm_forward_training(*plan, training_tensors(x, gamma, beta, rmean, rvar, mean, inv_std), res,
                                     y.tensor(), ws.data());
  ref->batchnorm_forward_training(
      *ref_plan, training_tensors(x, gamma, beta, rmean_ref, rvar_ref, mean_ref, inv_std_ref), res,
      y_ref.tensor(), ref_ws.data());
  EXPECT_LT(relative_error(y.tensor(), y_ref.tensor()), 1e-5) << "y";
  EXPECT_LT(relative_error(mean.tensor(), mean_ref.tensor()), 1e-5) << "saved mean";
  EXPECT_LT(relative_error(inv_std.tensor(), inv_std_ref.tensor()), 1e-5) << "saved inv std";
  EXPECT_LT(relative_error(rmean.tensor(), rmean_ref.tensor()), 1e-5) << "running mean";
  EXPECT_LT(relative_error(rvar.tensor(), rvar_ref.tensor()), 1e-5) << "running var (unbiased)";

  // Backward, overwriting then accumulating dgamma/dbeta.
  for (Accumulate acc : {Accumulate::overwrite, Accumulate::add}) {
    SCOPED_TRACE(acc == Accumulate::add ? "accumulate" : "overwrite");
    HostBuffer dx(dims, DType::f32, layout), dx_ref(dims, DType::f32, layout);
    HostBuffer dres(dims, DType::f32, layout), dres_ref(dims, DType::f32, layout);
    HostBuffer dgamma = random_buffer(cdims, 28), dbeta = random_buffer(cdims, 29);
    HostBuffer dgamma_ref = copy_of(dgamma), dbeta_ref = copy_of(dbeta);
    Tensor* dr = fusion == BatchNormFusion::add_relu ? &dres.tensor() : nullptr;
    Tensor* dr_ref = fusion == BatchNormFusion::add_relu ? &dres_ref.tensor() : nullptr;
    onednn->batchnorm_backward(*plan, backward_tensors(x, gamma, mean, inv_std, dx, dgamma, dbeta),
                               y.tensor(), dy.tensor(), dr, acc, ws.data());
    ref->batchnorm_backward(*ref_plan,
                            backward_tensors(x, gamma, mean_ref, inv_std_ref, dx_ref, dgamma_ref, dbeta_ref),
                            y_ref.tensor(), dy.tensor(), dr_ref, acc, ref_ws.data());
    EXPECT_LT(relative_error(dx.tensor(), dx_ref.tensor()), 1e-4) << "dx";
    EXPECT_LT(relative_error(dgamma.tensor(), dgamma_ref.tensor()), 1e-4) << "dgamma";
    EXPECT_LT(relative_error(dbeta.tensor(), dbeta_ref.tensor()), 1e-4) << "dbeta";
    if (dr) {
      EXPECT_LT(relative_error(dres.tensor(), dres_ref.tensor()), 1e-6) << "dresidual";
    }
  }

  // Inference with the running statistics.
  HostBuffer yi(dims, DType::f32, layout), yi_ref(dims, DType::f32, layout);
  onednn->batchnorm_forward_inference(*plan, inference_tensors(x, gamma, beta, rmean, rvar), res,
                                      yi.tensor());
  ref->batchnorm_forward_inference(*ref_plan, inference_tensors(x, gamma, beta, rmean, rvar), res,
                                   yi_ref.tensor());
  EXPECT_LT(relative_error(yi.tensor(), yi_ref.tensor()), 1e-5) << "inference";
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormTest,
                         ::testing::Combine(::testing::ValuesIn(kBnCases),
                                            ::testing::Values(Layout::nchw, Layout::nhwc),
                                            ::testing::Values(BatchNormFusion::none, BatchNormFusion::relu,
                                                              BatchNormFusion::add_relu)),
                         bn_case_name);

TEST_F(OneDnnVsReference, BatchNormStatisticsOfLargeOffsetData) {
  // Values 1000 +- 0.01: a naive one-pass E[x^2] - E[x]^2 in float would lose the variance entirely.
  for (Layout layout : {Layout::nchw, Layout::nhwc}) {
    SCOPED_TRACE(layout_name(layout));
    BatchNormGeometry g;
    g.batch = 8, g.channels = 4, g.h = 9, g.w = 9, g.layout = layout;
    const std::vector<int64_t> dims{8, 4, 9, 9}, cdims{4};
    HostBuffer x = random_buffer(dims, 201, layout, 999.99, 1000.01);
    HostBuffer gamma = random_buffer(cdims, 202, Layout::nchw, 0.5, 1.5), beta = random_buffer(cdims, 203);
    HostBuffer rm(cdims, DType::f32), rv(cdims, DType::f32), rm_ref(cdims, DType::f32),
        rv_ref(cdims, DType::f32);
    HostBuffer sm(cdims, DType::f32), si(cdims, DType::f32), sm_ref(cdims, DType::f32),
        si_ref(cdims, DType::f32);
    HostBuffer y(dims, DType::f32, layout), y_ref(dims, DType::f32, layout);
    auto plan = onednn->plan_batchnorm(g);
    auto ref_plan = ref->plan_batchnorm(g);
    Workspace ws(plan->workspace_bytes()), ref_ws(ref_plan->workspace_bytes());
    onednn->batchnorm_forward_training(*plan, training_tensors(x, gamma, beta, rm, rv, sm, si), nullptr,
                                       y.tensor(), ws.data());
    ref->batchnorm_forward_training(*ref_plan,
                                    training_tensors(x, gamma, beta, rm_ref, rv_ref, sm_ref, si_ref), nullptr,
                                    y_ref.tensor(), ref_ws.data());
    EXPECT_LT(relative_error(si.tensor(), si_ref.tensor()), 1e-4) << "inv std";
    EXPECT_LT(relative_error(y.tensor(), y_ref.tensor()), 1e-4) << "y";
    EXPECT_LT(relative_error(rv.tensor(), rv_ref.tensor()), 1e-4) << "running var";
  }
}

TEST_F(OneDnnVsReference, BatchNormRunningStatsFollowPyTorch) {
  // One channel, known values: batch mean 2.5, biased var 1.25, unbiased var 5/3.
  BatchNormGeometry g;
  g.batch = 4, g.channels = 1, g.momentum = 0.25;
  HostBuffer x({4, 1, 1, 1}, DType::f32), y({4, 1, 1, 1}, DType::f32);
  for (int i = 0; i < 4; ++i) x.ptr<float>()[i] = static_cast<float>(i + 1);
  HostBuffer gamma({1}, DType::f32), beta({1}, DType::f32), rm({1}, DType::f32), rv({1}, DType::f32),
      sm({1}, DType::f32), sis({1}, DType::f32);
  gamma.ptr<float>()[0] = 1.f, rm.ptr<float>()[0] = 1.f, rv.ptr<float>()[0] = 1.f;
  auto plan = onednn->plan_batchnorm(g);
  Workspace ws(plan->workspace_bytes());
  onednn->batchnorm_forward_training(*plan, training_tensors(x, gamma, beta, rm, rv, sm, sis), nullptr,
                                     y.tensor(), ws.data());
  EXPECT_NEAR(sm.ptr<float>()[0], 2.5f, 1e-6);
  EXPECT_NEAR(sis.ptr<float>()[0], 1.0 / std::sqrt(1.25 + 1e-5), 1e-6);
  EXPECT_NEAR(rm.ptr<float>()[0], 0.75 * 1.0 + 0.25 * 2.5, 1e-6);
  EXPECT_NEAR(rv.ptr<float>()[0], 0.75 * 1.0 + 0.25 * (5.0 / 3.0), 1e-6);
}

TEST(OneDnnThreads, BatchNormAgreesWithReferenceAtOneAndThreeThreads) {
  // The NHWC loops split rows among threads and reduce per-thread partial sums: 2x7x5 = 70 rows over 3
  // threads is an uneven split; NCHW splits 5 channels over 3 threads.
  auto ref = make_reference_backend();
  for (int threads : {1, 3}) {
    auto onednn = make_onednn_backend(threads);
    for (Layout layout : {Layout::nchw, Layout::nhwc}) {
      SCOPED_TRACE(fmt::format("{} threads, {}", threads, layout_name(layout)));
      BatchNormGeometry g;
      g.batch = 2, g.channels = 5, g.h = 7, g.w = 5, g.layout = layout, g.fusion = BatchNormFusion::relu;
      const std::vector<int64_t> dims{2, 5, 7, 5}, cdims{5};
      HostBuffer x = random_buffer(dims, 301, layout), dy = random_buffer(dims, 302, layout);
      HostBuffer gamma = random_buffer(cdims, 303, Layout::nchw, 0.5, 1.5), beta = random_buffer(cdims, 304);
      auto plan = onednn->plan_batchnorm(g);
      auto ref_plan = ref->plan_batchnorm(g);
      Workspace ws(plan->workspace_bytes()), ref_ws(ref_plan->workspace_bytes());
      HostBuffer rm(cdims, DType::f32), rv(cdims, DType::f32), sm(cdims, DType::f32), si(cdims, DType::f32);
      HostBuffer rm_ref(cdims, DType::f32), rv_ref(cdims, DType::f32), sm_ref(cdims, DType::f32),
          si_ref(cdims, DType::f32);
      HostBuffer y(dims, DType::f32, layout), y_ref(dims, DType::f32, layout);
      onednn->batchnorm_forward_training(*plan, training_tensors(x, gamma, beta, rm, rv, sm, si), nullptr,
                                         y.tensor(), ws.data());
      ref->batchnorm_forward_training(*ref_plan,
                                      training_tensors(x, gamma, beta, rm_ref, rv_ref, sm_ref, si_ref),
                                      nullptr, y_ref.tensor(), ref_ws.data());
      EXPECT_LT(relative_error(y.tensor(), y_ref.tensor()), 1e-5);
      HostBuffer dx(dims, DType::f32, layout), dx_ref(dims, DType::f32, layout);
      HostBuffer dg(cdims, DType::f32), db(cdims, DType::f32), dg_ref(cdims, DType::f32),
          db_ref(cdims, DType::f32);
      onednn->batchnorm_backward(*plan, backward_tensors(x, gamma, sm, si, dx, dg, db), y.tensor(),
                                 dy.tensor(), nullptr, Accumulate::overwrite, ws.data());
      ref->batchnorm_backward(*ref_plan, backward_tensors(x, gamma, sm_ref, si_ref, dx_ref, dg_ref, db_ref),
                              y_ref.tensor(), dy.tensor(), nullptr, Accumulate::overwrite, ref_ws.data());
      EXPECT_LT(relative_error(dx.tensor(), dx_ref.tensor()), 1e-4);
      EXPECT_LT(relative_error(dg.tensor(), dg_ref.tensor()), 1e-4);
      EXPECT_LT(relative_error(db.tensor(), db_ref.tensor()), 1e-4);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Pooling

struct PoolCase {
  int64_t n, c, h, w, k, stride, pad;
  PoolKind kind;
};

const PoolCase kPoolCases[] = {
    {2, 5, 9, 11, 3, 2, 1, PoolKind::max},  // ResNet stem pool on odd sizes
    {2, 16, 8, 8, 2, 2, 0, PoolKind::max},
    {3, 7, 7, 7, 7, 1, 0, PoolKind::average},  // global average
    {2, 8, 9, 9, 3, 2, 1, PoolKind::average},  // padding excluded from the divisor
};

std::string pool_case_name(const ::testing::TestParamInfo<std::tuple<PoolCase, Layout>>& info) {
  const PoolCase& c = std::get<0>(info.param);
  return fmt::format("{}_n{}c{}h{}w{}k{}s{}p{}_{}", c.kind == PoolKind::max ? "max" : "avg", c.n, c.c, c.h,
                     c.w, c.k, c.stride, c.pad, layout_name(std::get<1>(info.param)));
}

class PoolTest : public OneDnnVsReference,
                 public ::testing::WithParamInterface<std::tuple<PoolCase, Layout>> {};

TEST_P(PoolTest, MatchesReference) {
  const auto [pc, layout] = GetParam();
  PoolGeometry g;
  g.batch = pc.n, g.channels = pc.c, g.in_h = pc.h, g.in_w = pc.w, g.kernel_h = g.kernel_w = pc.k;
  g.stride_h = g.stride_w = pc.stride, g.pad_h = g.pad_w = pc.pad, g.kind = pc.kind, g.layout = layout;
  const std::vector<int64_t> in{pc.n, pc.c, pc.h, pc.w}, out{pc.n, pc.c, g.out_h(), g.out_w()};
  HostBuffer x = random_buffer(in, 31, layout), dy = random_buffer(out, 32, layout);
  auto plan = onednn->plan_pool(g);
  auto ref_plan = ref->plan_pool(g);
  Workspace saved(plan->saved_bytes()), ref_saved(ref_plan->saved_bytes());
  if (pc.kind == PoolKind::max) {
    EXPECT_GT(plan->saved_bytes(), 0u);
  }
  HostBuffer y(out, DType::f32, layout), y_ref(out, DType::f32, layout);
  onednn->pool_forward(*plan, x.tensor(), y.tensor(), saved.data());
  ref->pool_forward(*ref_plan, x.tensor(), y_ref.tensor(), ref_saved.data());
  EXPECT_LT(relative_error(y.tensor(), y_ref.tensor()), 1e-6) << "forward";
  HostBuffer dx(in, DType::f32, layout), dx_ref(in, DType::f32, layout);
  onednn->pool_backward(*plan, x.tensor(), y.tensor(), dy.tensor(), saved.data(), dx.tensor());
  ref->pool_backward(*ref_plan, x.tensor(), y_ref.tensor(), dy.tensor(), ref_saved.data(), dx_ref.tensor());
  EXPECT_LT(relative_error(dx.tensor(), dx_ref.tensor()), 1e-6) << "backward";
  // Inference: no saved state.
  HostBuffer yi(out, DType::f32, layout);
  onednn->pool_forward(*plan, x.tensor(), yi.tensor(), nullptr);
  EXPECT_LT(relative_error(yi.tensor(), y_ref.tensor()), 1e-6) << "inference";
}

INSTANTIATE_TEST_SUITE_P(Shapes, PoolTest,
                         ::testing::Combine(::testing::ValuesIn(kPoolCases),
                                            ::testing::Values(Layout::nchw, Layout::nhwc)),
                         pool_case_name);

// ---------------------------------------------------------------------------------------------------------
// ReLU, dense algebra, loss

TEST_F(OneDnnVsReference, Relu) {
  HostBuffer x = random_buffer({3, 5, 7, 11}, 41), dy = random_buffer({3, 5, 7, 11}, 42);
  HostBuffer y({3, 5, 7, 11}, DType::f32), y_ref({3, 5, 7, 11}, DType::f32);
  onednn->relu_forward(x.tensor(), y.tensor());
  ref->relu_forward(x.tensor(), y_ref.tensor());
  EXPECT_EQ(relative_error(y.tensor(), y_ref.tensor()), 0.0);
  HostBuffer dx({3, 5, 7, 11}, DType::f32), dx_ref({3, 5, 7, 11}, DType::f32);
  onednn->relu_backward(y.tensor(), dy.tensor(), dx.tensor());
  ref->relu_backward(y_ref.tensor(), dy.tensor(), dx_ref.tensor());
  EXPECT_EQ(relative_error(dx.tensor(), dx_ref.tensor()), 0.0);
  // In place, and large enough to run on several threads.
  HostBuffer big = random_buffer({100000}, 43), big_ref({100000}, DType::f32);
  ref->relu_forward(big.tensor(), big_ref.tensor());
  onednn->relu_forward(big.tensor(), big.tensor());
  EXPECT_EQ(relative_error(big.tensor(), big_ref.tensor()), 0.0);
}

TEST_F(OneDnnVsReference, Gemm) {
  const int64_t m = 13, n = 17, k = 29;
  for (Transpose ta : {Transpose::no, Transpose::yes}) {
    for (Transpose tb : {Transpose::no, Transpose::yes}) {
      HostBuffer a =
          random_buffer(ta == Transpose::no ? std::vector<int64_t>{m, k} : std::vector<int64_t>{k, m}, 51);
      HostBuffer b =
          random_buffer(tb == Transpose::no ? std::vector<int64_t>{k, n} : std::vector<int64_t>{n, k}, 52);
      HostBuffer c = random_buffer({m, n}, 53), c_ref = copy_of(c);
      onednn->gemm(ta, tb, m, n, k, 0.7f, a.tensor(), b.tensor(), 0.3f, c.tensor());
      ref->gemm(ta, tb, m, n, k, 0.7f, a.tensor(), b.tensor(), 0.3f, c_ref.tensor());
      EXPECT_LT(relative_error(c.tensor(), c_ref.tensor()), 1e-5)
          << "ta=" << (ta == Transpose::yes) << " tb=" << (tb == Transpose::yes);
    }
  }
}

TEST_F(OneDnnVsReference, BiasForwardAndBackward) {
  HostBuffer y = random_buffer({9, 1000}, 61), y_ref = copy_of(y), bias = random_buffer({1000}, 62);
  onednn->add_bias(y.tensor(), bias.tensor());
  ref->add_bias(y_ref.tensor(), bias.tensor());
  EXPECT_LT(relative_error(y.tensor(), y_ref.tensor()), 1e-6);
  HostBuffer dy = random_buffer({37, 10}, 63);
  for (Accumulate acc : {Accumulate::overwrite, Accumulate::add}) {
    HostBuffer db = random_buffer({10}, 64), db_ref = copy_of(db);
    onednn->bias_backward(dy.tensor(), db.tensor(), acc);
    ref->bias_backward(dy.tensor(), db_ref.tensor(), acc);
    EXPECT_LT(relative_error(db.tensor(), db_ref.tensor()), 1e-5);
    // Columns [130, 200) alone, over 300 rows (two blocks of features, several threads).
    HostBuffer wide = random_buffer({300, 200}, 65);
    HostBuffer range = random_buffer({70}, 66), range_ref = copy_of(range);
    onednn->bias_backward_columns(wide.tensor(), 130, range.tensor(), acc);
    ref->bias_backward_columns(wide.tensor(), 130, range_ref.tensor(), acc);
    EXPECT_LT(relative_error(range.tensor(), range_ref.tensor()), 1e-5);
  }
}

TEST_F(OneDnnVsReference, SoftmaxCrossEntropy) {
  const int64_t rows = 7, classes = 10;
  HostBuffer logits = random_buffer({rows, classes}, 71, Layout::nchw, -4.0, 4.0);
  HostBuffer labels({rows}, DType::i32);
  for (int64_t i = 0; i < rows; ++i) labels.ptr<int32_t>()[i] = static_cast<int32_t>((i * 3) % classes);
  for (float smoothing : {0.f, 0.1f}) {
    HostBuffer probs({rows, classes}, DType::f32), probs_ref({rows, classes}, DType::f32);
    HostBuffer loss({1}, DType::f32), loss_ref({1}, DType::f32);
    onednn->softmax_cross_entropy_forward(logits.tensor(), labels.tensor(), smoothing, probs.tensor(),
                                          loss.tensor());
    ref->softmax_cross_entropy_forward(logits.tensor(), labels.tensor(), smoothing, probs_ref.tensor(),
                                       loss_ref.tensor());
    EXPECT_LT(relative_error(probs.tensor(), probs_ref.tensor()), 1e-5);
    EXPECT_LT(relative_error(loss.tensor(), loss_ref.tensor()), 1e-5);
    HostBuffer d({rows, classes}, DType::f32), d_ref({rows, classes}, DType::f32);
    onednn->softmax_cross_entropy_backward(probs.tensor(), labels.tensor(), smoothing, 0.5f, d.tensor());
    ref->softmax_cross_entropy_backward(probs_ref.tensor(), labels.tensor(), smoothing, 0.5f, d_ref.tensor());
    EXPECT_LT(relative_error(d.tensor(), d_ref.tensor()), 1e-5);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Elementwise and utilities

TEST_F(OneDnnVsReference, FillAddScale) {
  HostBuffer a = random_buffer({50000}, 81), b = random_buffer({50000}, 82);
  HostBuffer y({50000}, DType::f32), y_ref({50000}, DType::f32);
  onednn->add(a.tensor(), b.tensor(), y.tensor());
  ref->add(a.tensor(), b.tensor(), y_ref.tensor());
  EXPECT_EQ(relative_error(y.tensor(), y_ref.tensor()), 0.0);
  onednn->scale(y.tensor(), 0.37);
  ref->scale(y_ref.tensor(), 0.37);
  EXPECT_LT(relative_error(y.tensor(), y_ref.tensor()), 1e-6);
  onednn->fill(y.tensor(), -2.5);
  for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.ptr<float>()[i], -2.5f);
  HostBuffer flag({1}, DType::i32);
  onednn->fill(flag.tensor(), 7);
  EXPECT_EQ(flag.ptr<int32_t>()[0], 7);
}

TEST_F(OneDnnVsReference, Cast) {
  HostBuffer src = random_buffer({1000}, 91, Layout::nchw, -100.0, 100.0);
  for (DType dtype : {DType::f64, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    HostBuffer mid({1000}, dtype), back({1000}, DType::f32), mid_ref({1000}, dtype),
        back_ref({1000}, DType::f32);
    onednn->cast(src.tensor(), mid.tensor());
    onednn->cast(mid.tensor(), back.tensor());
    ref->cast(src.tensor(), mid_ref.tensor());
    ref->cast(mid_ref.tensor(), back_ref.tensor());
    // Both round to nearest even: the round trips agree exactly.
    EXPECT_EQ(relative_error(back.tensor(), back_ref.tensor()), 0.0);
    const double step = dtype == DType::bf16 ? 1.0 / 256 : dtype == DType::f16 ? 1.0 / 2048 : 1e-7;
    EXPECT_LT(relative_error(back.tensor(), src.tensor()), step);
  }
}

TEST_F(OneDnnVsReference, CheckFiniteSetsButNeverClears) {
  HostBuffer x = random_buffer({40000}, 101), flag({1}, DType::i32);
  onednn->check_finite(x.tensor(), flag.tensor());
  EXPECT_EQ(flag.ptr<int32_t>()[0], 0);
  x.ptr<float>()[39999] = std::numeric_limits<float>::infinity();
  onednn->check_finite(x.tensor(), flag.tensor());
  EXPECT_EQ(flag.ptr<int32_t>()[0], 1);
  x.ptr<float>()[39999] = 0.f;
  onednn->check_finite(x.tensor(), flag.tensor());
  EXPECT_EQ(flag.ptr<int32_t>()[0], 1) << "never clears";
  HostBuffer flag2({1}, DType::i32);
  x.ptr<float>()[5] = std::numeric_limits<float>::quiet_NaN();
  onednn->check_finite(x.tensor(), flag2.tensor());
  EXPECT_EQ(flag2.ptr<int32_t>()[0], 1) << "NaN";
}

TEST_F(OneDnnVsReference, SgdUpdate) {
  const int64_t count = 30000;
  const ParamSegment segments[] = {{0, 20000, true}, {20000, 9000, false}};  // the last 1000 are not updated
  for (bool nesterov : {false, true}) {
    SCOPED_TRACE(nesterov ? "nesterov" : "plain momentum");
    HostBuffer p = random_buffer({count}, 111), g = random_buffer({count}, 112),
               v = random_buffer({count}, 113);
    HostBuffer p_ref = copy_of(p), v_ref = copy_of(v);
    SgdStep step;
    step.lr = 0.05f, step.momentum = 0.9f, step.weight_decay = 1e-4f, step.nesterov = nesterov;
    step.grad_scale = 0.5f;
    for (int i = 0; i < 3; ++i) {
      onednn->sgd_update(p.tensor(), g.tensor(), v.tensor(), segments, step);
      ref->sgd_update(p_ref.tensor(), g.tensor(), v_ref.tensor(), segments, step);
    }
    EXPECT_LT(relative_error(p.tensor(), p_ref.tensor()), 1e-6);
    EXPECT_LT(relative_error(v.tensor(), v_ref.tensor()), 1e-6);
  }
}

// The oneDNN backend trains in FP32 only: it keeps no copies and says so rather than ignoring them.
TEST(OneDnnOptimizer, RefusesComputeCopies) {
  auto backend = make_onednn_backend(1);
  compute_copies_check::Flat p(*backend, 256, DType::f32), g(*backend, 256, DType::f32),
      m(*backend, 256, DType::f32), copy(*backend, 128, DType::bf16);
  const std::vector<ParamSegment> segments = {{0, 256, true}};
  EXPECT_THROW(backend->sgd_update(p.tensor(), g.tensor(), m.tensor(), segments, SgdStep{}, nullptr,
                                   ComputeCopies{&copy.tensor(), nullptr}),
               Error);
}

}  // namespace
}  // namespace dlbench
