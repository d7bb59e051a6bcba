#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <string>
#include <tuple>

#include "backend/reference/reference_backend.h"
#include "core/status.h"
#include "gradient_check.h"
#include "reference_test_util.h"

namespace dlbench {
namespace {

using testing::at;
using testing::converted;
using testing::from_values;
using testing::gradient_matches;
using testing::random_buffer;
using testing::weighted_sum;
using testing::zeros;

BatchNormGeometry geometry_of(std::vector<int64_t> dims, BatchNormFusion fusion, DType dtype, Layout layout) {
  BatchNormGeometry g;
  g.batch = dims[0];
  g.channels = dims[1];
  g.h = dims[2];
  g.w = dims[3];
  g.fusion = fusion;
  g.dtype = dtype;
  g.layout = layout;
  return g;
}

const char* fusion_label(BatchNormFusion f) {
  return f == BatchNormFusion::none ? "none" : f == BatchNormFusion::relu ? "relu" : "add_relu";
}

// Everything one batch norm reads and writes. gamma/beta are FP32 as the contract says.
struct BnBuffers {
  BnBuffers(const BatchNormGeometry& g, uint64_t seed)
      : x(random_buffer(dims(g), g.dtype, g.layout, seed, -1.0, 2.0)),
        residual(random_buffer(dims(g), g.dtype, g.layout, seed + 1)),
        y(zeros(dims(g), g.dtype, g.layout)),
        dy(random_buffer(dims(g), g.dtype, g.layout, seed + 2)),
        dx(zeros(dims(g), g.dtype, g.layout)),
        dresidual(zeros(dims(g), g.dtype, g.layout)),
        gamma(random_buffer({g.channels}, DType::f32, Layout::nchw, seed + 3, 0.5, 1.5)),
        beta(random_buffer({g.channels}, DType::f32, Layout::nchw, seed + 4, -0.5, 0.5)),
        running_mean(zeros({g.channels}, DType::f32)),
        running_var(testing::filled({g.channels}, DType::f32, 1.0)),
        saved_mean(zeros({g.channels}, DType::f32)),
        saved_inv_std(zeros({g.channels}, DType::f32)),
        dgamma(zeros({g.channels}, DType::f32)),
        dbeta(zeros({g.channels}, DType::f32)) {}
  static std::vector<int64_t> dims(const BatchNormGeometry& g) { return {g.batch, g.channels, g.h, g.w}; }

  Tensor* residual_or_null(const BatchNormGeometry& g) {
    return g.fusion == BatchNormFusion::add_relu ? &residual.tensor() : nullptr;
  }
  void forward(Backend& backend, const BatchNormPlan& plan) {
    backend.batchnorm_forward_training(plan,
                                       BatchNormTensors{.x = &x.tensor(),
                                                        .gamma = &gamma.tensor(),
                                                        .beta = &beta.tensor(),
                                                        .running_mean = &running_mean.tensor(),
                                                        .running_var = &running_var.tensor(),
                                                        .saved_mean = &saved_mean.tensor(),
                                                        .saved_inv_std = &saved_inv_std.tensor()},
                                       residual_or_null(plan.geometry), y.tensor(), nullptr);
  }
  void backward(Backend& backend, const BatchNormPlan& plan, Accumulate accumulate = Accumulate::overwrite) {
    Tensor* dres = plan.geometry.fusion == BatchNormFusion::add_relu ? &dresidual.tensor() : nullptr;
    backend.batchnorm_backward(plan,
                               BatchNormTensors{.x = &x.tensor(),
                                                .gamma = &gamma.tensor(),
                                                .saved_mean = &saved_mean.tensor(),
                                                .saved_inv_std = &saved_inv_std.tensor(),
                                                .dx = &dx.tensor(),
                                                .dgamma = &dgamma.tensor(),
                                                .dbeta = &dbeta.tensor()},
                               y.tensor(), dy.tensor(), dres, accumulate, nullptr);
  }

  HostBuffer x, residual, y, dy, dx, dresidual, gamma, beta, running_mean, running_var, saved_mean,
      saved_inv_std, dgamma, dbeta;
};

// The smallest |gamma * xhat + beta (+ residual)| over all elements: the distance from the ReLU's kink.
double distance_from_kink(Backend& backend, const BatchNormGeometry& g, BnBuffers& b) {
  BatchNormGeometry linear = g;
  linear.fusion = BatchNormFusion::none;
  auto plan = backend.plan_batchnorm(linear);
  BnBuffers copy(g, 0);
  copy.x = converted(b.x.tensor(), g.dtype, g.layout);
  copy.gamma = converted(b.gamma.tensor(), DType::f32, Layout::nchw);
  copy.beta = converted(b.beta.tensor(), DType::f32, Layout::nchw);
  copy.forward(backend, *plan);
  double distance = INFINITY;
  for (int64_t i = 0; i < copy.y.numel(); ++i) {
    double z = copy.y.ptr<double>()[i];
    if (g.fusion == BatchNormFusion::add_relu) z += b.residual.ptr<double>()[i];
    distance = std::min(distance, std::abs(z));
  }
  return distance;
}

class BatchNormGradient
    : public ::testing::TestWithParam<std::tuple<std::vector<int64_t>, BatchNormFusion, Layout>> {};

// loss = sum(y * r). The analytic gradients come from one forward (batch statistics) and one backward with
// dy = r. The finite differences redo the training forward, whose statistics move with x, as they must.
TEST_P(BatchNormGradient, MatchesCentralDifferences) {
  const auto& [dims, fusion, layout] = GetParam();
  ReferenceBackend backend;
  const BatchNormGeometry g = geometry_of(dims, fusion, DType::f64, layout);
  auto plan = backend.plan_batchnorm(g);

  // A finite-difference step must not carry any z across the ReLU's kink: pick a seed whose inputs keep
  // every z at least 1e-3 away from 0 (steps move z by < 1e-5 for x, < 3e-4 for gamma in f32).
  uint64_t seed = 100;
  BnBuffers b(g, seed);
  while (fusion != BatchNormFusion::none && distance_from_kink(backend, g, b) < 1e-3)
    b = BnBuffers(g, seed += 10);

  b.forward(backend, *plan);
  b.backward(backend, *plan);
  Tensor& r = b.dy.tensor();
  auto loss = [&] {
    b.forward(backend, *plan);
    return weighted_sum(b.y.tensor(), r);
  };
  const double tolerance = testing::kBatchNormGradientTolerance;
  EXPECT_TRUE(gradient_matches(loss, b.x.tensor(), b.dx.tensor(), tolerance)) << "dx";
  EXPECT_TRUE(gradient_matches(loss, b.gamma.tensor(), b.dgamma.tensor(), tolerance)) << "dgamma";
  EXPECT_TRUE(gradient_matches(loss, b.beta.tensor(), b.dbeta.tensor(), tolerance)) << "dbeta";
  if (fusion == BatchNormFusion::add_relu) {
    EXPECT_TRUE(gradient_matches(loss, b.residual.tensor(), b.dresidual.tensor(), tolerance)) << "dresidual";
  }
  if (fusion != BatchNormFusion::none) {  // the mask really removed something, or the test proves little
    int64_t masked = 0;
    for (int64_t i = 0; i < b.y.numel(); ++i) masked += b.y.ptr<double>()[i] == 0;
    EXPECT_GT(masked, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Fusions, BatchNormGradient,
                         ::testing::Combine(::testing::Values(std::vector<int64_t>{2, 3, 3, 4},
                                                              std::vector<int64_t>{5, 2, 1, 1}),
                                            ::testing::Values(BatchNormFusion::none, BatchNormFusion::relu,
                                                              BatchNormFusion::add_relu),
                                            ::testing::Values(Layout::nchw, Layout::nhwc)),
                         [](const auto& info) {
                           const auto& d = std::get<0>(info.param);
                           return std::to_string(d[0]) + "x" + std::to_string(d[1]) + "x" +
                                  std::to_string(d[2]) + "x" + std::to_string(d[3]) + "_" +
                                  fusion_label(std::get<1>(info.param)) + "_" +
                                  testing::layout_label(std::get<2>(info.param));
                         });

// One channel holding 1, 2, 3, 4 (N = 2, W = 2): mean 2.5, biased variance 1.25, unbiased 5/3.
TEST(BatchNorm, TrainingStatisticsAndRunningUpdate) {
  ReferenceBackend backend;
  for (Layout layout : {Layout::nchw, Layout::nhwc}) {
    SCOPED_TRACE(testing::layout_label(layout));
    BatchNormGeometry g = geometry_of({2, 2, 1, 2}, BatchNormFusion::none, DType::f64, layout);
    g.momentum = 0.1;
    g.epsilon = 1e-5;
    BnBuffers b(g, 0);
    // Channel 0: 1 2 | 3 4 over (n, w). Channel 1: constant 7 (variance 0).
    HostBuffer x = from_values({2, 2, 1, 2}, DType::f64, {1, 2, 7, 7, 3, 4, 7, 7});
    b.x = converted(x.tensor(), DType::f64, layout);
    b.gamma = from_values({2}, DType::f32, {2, 1});
    b.beta = from_values({2}, DType::f32, {0.5, -1});
    b.running_mean = from_values({2}, DType::f32, {1, 0});
    b.running_var = from_values({2}, DType::f32, {2, 1});
    b.forward(backend, *backend.plan_batchnorm(g));

    EXPECT_FLOAT_EQ(b.saved_mean.ptr<float>()[0], 2.5f);
    EXPECT_FLOAT_EQ(b.saved_mean.ptr<float>()[1], 7.0f);
    EXPECT_FLOAT_EQ(b.saved_inv_std.ptr<float>()[0], static_cast<float>(1 / std::sqrt(1.25 + 1e-5)));
    EXPECT_FLOAT_EQ(b.saved_inv_std.ptr<float>()[1], static_cast<float>(1 / std::sqrt(1e-5)));
    // running = 0.9 * running + 0.1 * batch, with the unbiased variance 5/3.
    EXPECT_FLOAT_EQ(b.running_mean.ptr<float>()[0], 0.9f * 1 + 0.1f * 2.5f);
    EXPECT_FLOAT_EQ(b.running_mean.ptr<float>()[1], 0.1f * 7);
    EXPECT_FLOAT_EQ(b.running_var.ptr<float>()[0], static_cast<float>(0.9 * 2 + 0.1 * 5.0 / 3.0));
    EXPECT_FLOAT_EQ(b.running_var.ptr<float>()[1], 0.9f);
    // y = gamma * (x - 2.5) / sqrt(1.25 + eps) + beta.
    const double inv_std = 1 / std::sqrt(1.25 + 1e-5);
    EXPECT_NEAR(at(b.y.tensor(), 0, 0, 0, 0), 2 * (1 - 2.5) * inv_std + 0.5, 1e-12);
    EXPECT_NEAR(at(b.y.tensor(), 1, 0, 0, 1), 2 * (4 - 2.5) * inv_std + 0.5, 1e-12);
    EXPECT_NEAR(at(b.y.tensor(), 1, 1, 0, 0), -1, 1e-12);  // a constant channel normalises to beta
  }
}

TEST(BatchNorm, InferenceUsesRunningStatistics) {
  ReferenceBackend backend;
  for (BatchNormFusion fusion : {BatchNormFusion::none, BatchNormFusion::relu, BatchNormFusion::add_relu}) {
    SCOPED_TRACE(fusion_label(fusion));
    const BatchNormGeometry g = geometry_of({1, 2, 1, 2}, fusion, DType::f64, Layout::nhwc);
    BnBuffers b(g, 0);
    HostBuffer x = from_values({1, 2, 1, 2}, DType::f64, {3, 5, -1, 0});  // channel 0: 3, 5; channel 1: -1, 0
    b.x = converted(x.tensor(), DType::f64, Layout::nhwc);
    b.residual =
        converted(testing::filled({1, 2, 1, 2}, DType::f64, -0.25).tensor(), DType::f64, Layout::nhwc);
    b.gamma = from_values({2}, DType::f32, {2, 1});
    b.beta = from_values({2}, DType::f32, {0.5, 0});
    b.running_mean = from_values({2}, DType::f32, {4, 1});
    b.running_var = from_values({2}, DType::f32, {0.25, 4});
    Tensor* residual = fusion == BatchNormFusion::add_relu ? &b.residual.tensor() : nullptr;
    backend.batchnorm_forward_inference(*backend.plan_batchnorm(g),
                                        BatchNormTensors{.x = &b.x.tensor(),
                                                         .gamma = &b.gamma.tensor(),
                                                         .beta = &b.beta.tensor(),
                                                         .running_mean = &b.running_mean.tensor(),
                                                         .running_var = &b.running_var.tensor()},
                                        residual, b.y.tensor());
    const double add = fusion == BatchNormFusion::add_relu ? -0.25 : 0;
    auto act = [&](double z) { return fusion == BatchNormFusion::none ? z : std::max(z, 0.0); };
    const double e = 1e-5;
    EXPECT_NEAR(at(b.y.tensor(), 0, 0, 0, 0), act(2 * (3 - 4) / std::sqrt(0.25 + e) + 0.5 + add), 1e-12);
    EXPECT_NEAR(at(b.y.tensor(), 0, 0, 0, 1), act(2 * (5 - 4) / std::sqrt(0.25 + e) + 0.5 + add), 1e-12);
    EXPECT_NEAR(at(b.y.tensor(), 0, 1, 0, 0), act((-1 - 1) / std::sqrt(4 + e) + add), 1e-12);
    EXPECT_NEAR(at(b.y.tensor(), 0, 1, 0, 1), act((0 - 1) / std::sqrt(4 + e) + add), 1e-12);
    // Inference leaves the statistics alone.
    EXPECT_EQ(b.running_mean.ptr<float>()[0], 4.0f);
    EXPECT_EQ(b.running_var.ptr<float>()[1], 4.0f);
  }
}

TEST(BatchNorm, AccumulateAddsIntoGammaAndBetaGradients) {
  ReferenceBackend backend;
  const BatchNormGeometry g = geometry_of({2, 3, 2, 2}, BatchNormFusion::add_relu, DType::f64, Layout::nchw);
  auto plan = backend.plan_batchnorm(g);
  BnBuffers b(g, 9);
  b.forward(backend, *plan);
  testing::fill_value(b.dgamma.tensor(), NAN);  // overwrite must not read what was there
  testing::fill_value(b.dbeta.tensor(), NAN);
  testing::fill_value(b.dresidual.tensor(), NAN);
  b.backward(backend, *plan, Accumulate::overwrite);
  ASSERT_TRUE(testing::all_finite(b.dgamma.tensor()));
  ASSERT_TRUE(testing::all_finite(b.dbeta.tensor()));
  ASSERT_TRUE(testing::all_finite(b.dresidual.tensor()));
  const HostBuffer dgamma = converted(b.dgamma.tensor(), DType::f64, Layout::nchw);
  const HostBuffer dbeta = converted(b.dbeta.tensor(), DType::f64, Layout::nchw);
  const HostBuffer dx = converted(b.dx.tensor(), DType::f64, Layout::nchw);

  b.dgamma = from_values({3}, DType::f32, {1, -2, 3});
  b.dbeta = from_values({3}, DType::f32, {10, 20, 30});
  b.backward(backend, *plan, Accumulate::add);
  for (int c = 0; c < 3; ++c) {
    EXPECT_FLOAT_EQ(b.dgamma.ptr<float>()[c],
                    static_cast<float>(std::array{1, -2, 3}[c] + dgamma.ptr<double>()[c]));
    EXPECT_FLOAT_EQ(b.dbeta.ptr<float>()[c], static_cast<float>(10 * (c + 1) + dbeta.ptr<double>()[c]));
  }
  // dx is an activation gradient: it is overwritten whatever `accumulate` says.
  EXPECT_EQ(testing::relative_error(b.dx.tensor(), dx.tensor()), 0);
}

// With ReLU, dresidual is dy where y > 0 and 0 elsewhere; dbeta sums exactly that.
TEST(BatchNorm, ResidualGradientIsMaskedDy) {
  ReferenceBackend backend;
  const BatchNormGeometry g = geometry_of({2, 2, 3, 3}, BatchNormFusion::add_relu, DType::f64, Layout::nhwc);
  auto plan = backend.plan_batchnorm(g);
  BnBuffers b(g, 4);
  b.forward(backend, *plan);
  b.backward(backend, *plan);
  double dbeta[2] = {0, 0};
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t w = 0; w < 3; ++w) {
          const double masked = at(b.y.tensor(), n, c, h, w) > 0 ? at(b.dy.tensor(), n, c, h, w) : 0.0;
          EXPECT_EQ(at(b.dresidual.tensor(), n, c, h, w), masked);
          dbeta[c] += masked;
        }
  EXPECT_NEAR(b.dbeta.ptr<float>()[0], dbeta[0], 1e-6);
  EXPECT_NEAR(b.dbeta.ptr<float>()[1], dbeta[1], 1e-6);
}

TEST(BatchNorm, LayoutsAgree) {
  ReferenceBackend backend;
  for (BatchNormFusion fusion : {BatchNormFusion::none, BatchNormFusion::relu, BatchNormFusion::add_relu}) {
    SCOPED_TRACE(fusion_label(fusion));
    const BatchNormGeometry gc = geometry_of({3, 4, 3, 5}, fusion, DType::f64, Layout::nchw);
    const BatchNormGeometry gh = geometry_of({3, 4, 3, 5}, fusion, DType::f64, Layout::nhwc);
    BnBuffers c(gc, 8), h(gh, 8);
    h.x = converted(c.x.tensor(), DType::f64, Layout::nhwc);
    h.residual = converted(c.residual.tensor(), DType::f64, Layout::nhwc);
    h.dy = converted(c.dy.tensor(), DType::f64, Layout::nhwc);
    c.forward(backend, *backend.plan_batchnorm(gc));
    c.backward(backend, *backend.plan_batchnorm(gc));
    h.forward(backend, *backend.plan_batchnorm(gh));
    h.backward(backend, *backend.plan_batchnorm(gh));
    EXPECT_EQ(testing::logical_relative_error(h.y.tensor(), c.y.tensor()), 0);
    EXPECT_EQ(testing::logical_relative_error(h.dx.tensor(), c.dx.tensor()), 0);
    for (auto member : {&BnBuffers::saved_mean, &BnBuffers::saved_inv_std, &BnBuffers::running_mean,
                        &BnBuffers::running_var, &BnBuffers::dgamma, &BnBuffers::dbeta}) {
      EXPECT_EQ(testing::relative_error((h.*member).tensor(), (c.*member).tensor()), 0);
    }
    if (fusion == BatchNormFusion::add_relu) {
      EXPECT_EQ(testing::logical_relative_error(h.dresidual.tensor(), c.dresidual.tensor()), 0);
    }
  }
}

TEST(BatchNorm, F32MatchesF64) {
  ReferenceBackend backend;
  for (Layout layout : {Layout::nchw, Layout::nhwc}) {
    const BatchNormGeometry g32 = geometry_of({2, 3, 4, 5}, BatchNormFusion::add_relu, DType::f32, layout);
    const BatchNormGeometry g64 = geometry_of({2, 3, 4, 5}, BatchNormFusion::add_relu, DType::f64, layout);
    BnBuffers s(g32, 6), d(g64, 6);
    d.x = converted(s.x.tensor(), DType::f64, layout);
    d.residual = converted(s.residual.tensor(), DType::f64, layout);
    d.dy = converted(s.dy.tensor(), DType::f64, layout);
    s.forward(backend, *backend.plan_batchnorm(g32));
    s.backward(backend, *backend.plan_batchnorm(g32));
    d.forward(backend, *backend.plan_batchnorm(g64));
    d.backward(backend, *backend.plan_batchnorm(g64));
    EXPECT_LT(testing::logical_relative_error(s.y.tensor(), d.y.tensor()), testing::kF32VsF64Tolerance);
    EXPECT_LT(testing::logical_relative_error(s.dx.tensor(), d.dx.tensor()), testing::kF32VsF64Tolerance);
    EXPECT_LT(testing::logical_relative_error(s.dresidual.tensor(), d.dresidual.tensor()),
              testing::kF32VsF64Tolerance);
    EXPECT_LT(testing::relative_error(s.dgamma.tensor(), d.dgamma.tensor()), testing::kF32VsF64Tolerance);
    EXPECT_LT(testing::relative_error(s.dbeta.tensor(), d.dbeta.tensor()), testing::kF32VsF64Tolerance);
  }
}

TEST(BatchNorm, ChecksResidualAndParameterShapes) {
  ReferenceBackend backend;
  const BatchNormGeometry g = geometry_of({2, 3, 2, 2}, BatchNormFusion::relu, DType::f32, Layout::nchw);
  auto plan = backend.plan_batchnorm(g);
  BnBuffers b(g, 1);
  // A residual given to a fusion that has none is a caller bug.
  EXPECT_THROW(
      backend.batchnorm_forward_training(*plan,
                                         BatchNormTensors{.x = &b.x.tensor(),
                                                          .gamma = &b.gamma.tensor(),
                                                          .beta = &b.beta.tensor(),
                                                          .running_mean = &b.running_mean.tensor(),
                                                          .running_var = &b.running_var.tensor(),
                                                          .saved_mean = &b.saved_mean.tensor(),
                                                          .saved_inv_std = &b.saved_inv_std.tensor()},
                                         &b.residual.tensor(), b.y.tensor(), nullptr),
      Error);
  // Parameters are FP32 [C] even for f64 activations.
  HostBuffer gamma64 = zeros({3}, DType::f64);
  try {
    backend.batchnorm_forward_training(*plan,
                                       BatchNormTensors{.x = &b.x.tensor(),
                                                        .gamma = &gamma64.tensor(),
                                                        .beta = &b.beta.tensor(),
                                                        .running_mean = &b.running_mean.tensor(),
                                                        .running_var = &b.running_var.tensor(),
                                                        .saved_mean = &b.saved_mean.tensor(),
                                                        .saved_inv_std = &b.saved_inv_std.tensor()},
                                       nullptr, b.y.tensor(), nullptr);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gamma is f64[3] nchw cpu, expected f32[3]"), std::string::npos)
        << e.what();
  }
  // One value per channel has no unbiased variance.
  const BatchNormGeometry single = geometry_of({1, 3, 1, 1}, BatchNormFusion::none, DType::f32, Layout::nchw);
  BnBuffers s(single, 1);
  EXPECT_THROW(s.forward(backend, *backend.plan_batchnorm(single)), Error);
}

}  // namespace
}  // namespace dlbench
