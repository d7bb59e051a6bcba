// adamw_update (with clipping by the global norm) and sum_of_squares.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/reference/reference_backend.h"
#include "core/status.h"
#include "reference_test_util.h"
#include "transformer_test_util.h"

namespace dlbench {
namespace {

using namespace testing;

struct AdamWBuffers {
  HostBuffer p, g, m, v;
  AdamWBuffers(int64_t n, DType dtype, uint64_t seed)
      : p(f32_exact_buffer({n}, dtype, seed)),
        g(f32_exact_buffer({n}, dtype, seed + 1)),
        m(zeros({n}, dtype)),
        v(zeros({n}, dtype)) {}
  void update(Backend& backend, std::span<const ParamSegment> segments, const AdamWStep& step,
              const StepScalars* scalars = nullptr) {
    backend.adamw_update(p.tensor(), g.tensor(), m.tensor(), v.tensor(), segments, step, scalars);
  }
};

// One parameter p = 1, lr 0.1, betas 0.9 / 0.95, eps 1e-8, weight decay 0.1; gradients 0.5 then -0.25.
//   t = 1: m = 0.1 * 0.5 = 0.05, v = 0.05 * 0.25 = 0.0125, mhat = 0.05 / 0.1 = 0.5, vhat = 0.0125 / 0.05 =
//   0.25
//          p = 1 - 0.1 * (0.5 / (0.5 + 1e-8) + 0.1 * 1)
//   t = 2: m = 0.9 * 0.05 - 0.1 * 0.25 = 0.02, v = 0.95 * 0.0125 + 0.05 * 0.0625 = 0.015
//          mhat = 0.02 / 0.19, vhat = 0.015 / 0.0975, p -= 0.1 * (mhat / (sqrt(vhat) + 1e-8) + 0.1 * p)
TEST(AdamW, HandComputedTwoSteps) {
  ReferenceBackend backend;
  HostBuffer p = from_values({1}, DType::f64, {1.0}), m = zeros({1}, DType::f64), v = zeros({1}, DType::f64);
  const ParamSegment segment{0, 1, true};
  AdamWStep step;
  step.lr = 0.1f;
  HostBuffer g1 = from_values({1}, DType::f64, {0.5});
  step.step = 1;
  backend.adamw_update(p.tensor(), g1.tensor(), m.tensor(), v.tensor(), {&segment, 1}, step);
  const double p1 = 1 - double(0.1f) * (0.5 / (0.5 + double(1e-8f)) + double(0.1f) * 1);
  // The betas are floats (0.9f is 0.9 - 2.4e-8), which the hand computation's decimals ignore: ~1e-7.
  EXPECT_NEAR(m.ptr<double>()[0], 0.05, 1e-7);
  EXPECT_NEAR(v.ptr<double>()[0], 0.0125, 1e-7);
  EXPECT_NEAR(p.ptr<double>()[0], p1, 1e-7);

  HostBuffer g2 = from_values({1}, DType::f64, {-0.25});
  step.step = 2;
  backend.adamw_update(p.tensor(), g2.tensor(), m.tensor(), v.tensor(), {&segment, 1}, step);
  const double mhat = 0.02 / 0.19, vhat = 0.015 / 0.0975;
  const double p2 = p1 - double(0.1f) * (mhat / (std::sqrt(vhat) + double(1e-8f)) + double(0.1f) * p1);
  EXPECT_NEAR(m.ptr<double>()[0], 0.02, 1e-7);
  EXPECT_NEAR(v.ptr<double>()[0], 0.015, 1e-7);
  EXPECT_NEAR(p.ptr<double>()[0], p2, 1e-6);
}

// torch.optim.AdamW's own arithmetic (its _single_tensor_adamw): decay first, then the bias-corrected
// step written with step_size and a denominator, over five steps with changing gradients.
TEST(AdamW, MatchesPyTorchsFormulation) {
  ReferenceBackend backend;
  const int64_t n = 16;
  AdamWBuffers adam(n, DType::f64, 71);
  std::vector<double> p(adam.p.ptr<double>(), adam.p.ptr<double>() + n), m(n, 0.0), v(n, 0.0);
  const ParamSegment segment{0, n, true};
  AdamWStep step;
  step.lr = 3e-3f;
  for (int64_t t = 1; t <= 5; ++t) {
    fill_uniform(adam.g.tensor(), 100 + uint64_t(t));
    step.step = t;
    adam.update(backend, {&segment, 1}, step);
    const double lr = step.lr, beta1 = step.beta1, beta2 = step.beta2, eps = step.eps, wd = step.weight_decay;
    const double bias_correction1 = 1 - std::pow(beta1, double(t)),
                 bias_correction2 = 1 - std::pow(beta2, double(t));
    for (int64_t i = 0; i < n; ++i) {
      const double grad = adam.g.ptr<double>()[i];
      p[i] *= 1 - lr * wd;
      m[i] = m[i] + (grad - m[i]) * (1 - beta1);  // exp_avg.lerp_(grad, 1 - beta1)
      v[i] = v[i] * beta2 + (1 - beta2) * grad * grad;
      const double step_size = lr / bias_correction1;
      const double denom = std::sqrt(v[i]) / std::sqrt(bias_correction2) + eps;
      p[i] -= step_size * m[i] / denom;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(adam.p.ptr<double>()[i], p[i], 1e-12) << i;
    EXPECT_NEAR(adam.m.ptr<double>()[i], m[i], 1e-14) << i;
    EXPECT_NEAR(adam.v.ptr<double>()[i], v[i], 1e-14) << i;
  }
}

// With zero gradients m and v stay 0 and only the decay moves p: p *= 1 - lr * wd on decaying segments,
// untouched on the others and outside every segment.
TEST(AdamW, WeightDecayOnlyOnDecayingSegments) {
  ReferenceBackend backend;
  AdamWBuffers adam(10, DType::f64, 72);
  fill_value(adam.g.tensor(), 0.0);
  const std::vector<double> before(adam.p.ptr<double>(), adam.p.ptr<double>() + 10);
  const std::vector<ParamSegment> segments = {{0, 4, true}, {4, 3, false}};  // 7..9 in no segment
  AdamWStep step;
  step.lr = 0.5f;
  adam.update(backend, segments, step);
  for (int64_t i = 0; i < 10; ++i) {
    const double expected = i < 4 ? before[i] * (1 - double(0.5f) * double(0.1f)) : before[i];
    EXPECT_DOUBLE_EQ(adam.p.ptr<double>()[i], expected) << i;
  }
}

TEST(AdamW, SumOfSquaresOverwritesOrAdds) {
  ReferenceBackend backend;
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    HostBuffer a = from_values({3}, dtype, {1, -2, 3}), b = from_values({2}, dtype, {0.5, 4});
    HostBuffer out = filled({1}, DType::f32, 100.0);
    backend.sum_of_squares(a.tensor(), out.tensor(), Accumulate::overwrite);
    EXPECT_EQ(out.ptr<float>()[0], 14.0f);
    backend.sum_of_squares(b.tensor(), out.tensor(), Accumulate::add);
    EXPECT_EQ(out.ptr<float>()[0], 30.25f);
  }
}

// Clipping equals an unclipped step on gradients scaled by min(1, max_norm / (norm + 1e-6)), where the norm
// is the true gradients': stored gradients G carry grad_scale 0.5 (two micro-batches, say) and the loss
// scale 8, so the true ones are G * 0.5 / 8. m and v start non-zero, or Adam's first step would hide a
// uniform scale. The squares are summed in two calls (two buffers) as a model with several would.
TEST(AdamW, ClippingScalesTheTrueGradientsByTheNormFactor) {
  ReferenceBackend backend;
  const int64_t n = 12;
  const double grad_scale = 0.5, loss_scale = 8;
  for (double max_norm_fraction : {0.25, 4.0}) {  // clipped, and a norm already below the limit
    SCOPED_TRACE(max_norm_fraction);
    AdamWBuffers clipped(n, DType::f64, 73), reference(n, DType::f64, 73);
    for (AdamWBuffers* b : {&clipped, &reference}) {
      fill_uniform(b->m.tensor(), 74, -0.1, 0.1);
      fill_uniform(b->v.tensor(), 75, 0.01, 0.02);
    }
    HostBuffer squares = zeros({1}, DType::f32);
    const Tensor first(clipped.g.tensor().data(), {5}, DType::f64);
    const Tensor rest(clipped.g.ptr<double>() + 5, {n - 5}, DType::f64);
    backend.sum_of_squares(first, squares.tensor(), Accumulate::overwrite);
    backend.sum_of_squares(rest, squares.tensor(), Accumulate::add);
    double stored_squares = 0;
    for (int64_t i = 0; i < n; ++i) stored_squares += clipped.g.ptr<double>()[i] * clipped.g.ptr<double>()[i];
    const double true_norm = std::sqrt(stored_squares) * grad_scale / loss_scale;
    const double max_norm = max_norm_fraction * true_norm;
    const double factor = std::min(1.0, max_norm / (true_norm + 1e-6));
    EXPECT_EQ(factor == 1.0, max_norm_fraction > 1);

    const ParamSegment segment{0, n, true};
    StepScalars scalars;
    scalars.lr = 1e-2f;
    scalars.loss_scale = float(loss_scale);
    AdamWStep step;
    step.step = 3;
    step.grad_scale = float(grad_scale);
    step.max_grad_norm = float(max_norm);
    step.grad_norm_squared = squares.ptr<float>();
    clipped.update(backend, {&segment, 1}, step, &scalars);

    for (int64_t i = 0; i < n; ++i)
      reference.g.ptr<double>()[i] *= double(float(grad_scale)) / loss_scale * factor;
    AdamWStep plain;
    plain.step = 3;
    plain.lr = scalars.lr;
    reference.update(backend, {&segment, 1}, plain);
    // The sum of squares passes through an f32: the factor is good to ~1e-7.
    EXPECT_LT(relative_error(clipped.p.tensor(), reference.p.tensor()), 1e-7);
    EXPECT_LT(relative_error(clipped.m.tensor(), reference.m.tensor()), 1e-7);
  }
}

// While scalars->overflow is set nothing moves (p, m and v bit for bit); otherwise lr is scalars->lr, not
// step.lr, and the gradients are divided by the loss scale.
TEST(AdamW, StepScalarsSkipOnOverflowAndSetLrAndLossScale) {
  ReferenceBackend backend;
  const ParamSegment segment{0, 8, true};
  AdamWBuffers adam(8, DType::f32, 76), expected(8, DType::f32, 76);
  fill_uniform(adam.m.tensor(), 77);
  fill_uniform(adam.v.tensor(), 78, 0.1, 0.2);
  HostBuffer p0 = as_dtype(adam.p.tensor(), DType::f32), m0 = as_dtype(adam.m.tensor(), DType::f32);
  HostBuffer v0 = as_dtype(adam.v.tensor(), DType::f32);
  StepScalars scalars;
  scalars.lr = 0.01f;
  scalars.loss_scale = 4;
  scalars.overflow = 1;
  AdamWStep step;
  step.lr = 123.f;  // ignored with scalars
  step.step = 2;
  adam.update(backend, {&segment, 1}, step, &scalars);
  EXPECT_TRUE(bit_identical(adam.p.tensor(), p0.tensor(), 0, 8));
  EXPECT_TRUE(bit_identical(adam.m.tensor(), m0.tensor(), 0, 8));
  EXPECT_TRUE(bit_identical(adam.v.tensor(), v0.tensor(), 0, 8));

  scalars.overflow = 0;
  adam.update(backend, {&segment, 1}, step, &scalars);
  fill_uniform(expected.m.tensor(), 77);
  fill_uniform(expected.v.tensor(), 78, 0.1, 0.2);
  backend.scale(expected.g.tensor(), 0.25);
  AdamWStep plain = step;
  plain.lr = 0.01f;
  expected.update(backend, {&segment, 1}, plain);
  EXPECT_TRUE(bit_identical(adam.p.tensor(), expected.p.tensor(), 0, 8));
}

TEST(AdamW, F32MatchesF64) {
  ReferenceBackend backend;
  AdamWBuffers a64(32, DType::f64, 79), a32(32, DType::f32, 79);
  const ParamSegment segments[] = {{0, 20, true}, {20, 12, false}};
  AdamWStep step;
  step.lr = 1e-3f;
  for (int64_t t = 1; t <= 3; ++t) {
    step.step = t;
    a64.update(backend, segments, step);
    a32.update(backend, segments, step);
  }
  EXPECT_LT(relative_error(a32.p.tensor(), a64.p.tensor()), kF32VsF64Tolerance);
  EXPECT_LT(relative_error(a32.m.tensor(), a64.m.tensor()), kF32VsF64Tolerance);
  EXPECT_LT(relative_error(a32.v.tensor(), a64.v.tensor()), kF32VsF64Tolerance);
}

TEST(AdamW, ClippingWithoutTheNormThrows) {
  ReferenceBackend backend;
  AdamWBuffers adam(4, DType::f32, 80);
  const ParamSegment segment{0, 4, true};
  AdamWStep step;
  step.max_grad_norm = 1;
  EXPECT_THROW(adam.update(backend, {&segment, 1}, step), Error);
  step.max_grad_norm = 0;
  step.step = 0;
  EXPECT_THROW(adam.update(backend, {&segment, 1}, step), Error);  // t counts from 1
}

}  // namespace
}  // namespace dlbench
