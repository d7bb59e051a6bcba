// layernorm_forward / layernorm_backward over the rows of [B, T, C].
#include <gtest/gtest.h>

#include <cmath>

#include "backend/reference/reference_backend.h"
#include "gradient_check.h"
#include "reference_test_util.h"
#include "transformer_test_util.h"

namespace dlbench {
namespace {

using namespace testing;

constexpr int64_t kRows = kBatch * kSeq;

struct LayerNormBuffers {
  HostBuffer x, weight, bias, y, mean, rstd;
  LayerNormBuffers(DType dtype, DType stats_dtype, uint64_t seed)
      : x(f32_exact_buffer({kBatch, kSeq, kChannels}, dtype, seed, -2.0, 3.0)),
        weight(f32_exact_buffer({kChannels}, dtype, seed + 1, 0.5, 1.5)),
        bias(f32_exact_buffer({kChannels}, dtype, seed + 2)),
        y(zeros({kBatch, kSeq, kChannels}, dtype)),
        mean(zeros({kRows}, stats_dtype)),
        rstd(zeros({kRows}, stats_dtype)) {}
  void forward(Backend& backend, float eps = 1e-5f) {
    backend.layernorm_forward(x.tensor(), weight.tensor(), bias.tensor(), eps, y.tensor(), mean.tensor(),
                              rstd.tensor());
  }
};

TEST(LayerNormGradient, MatchesCentralDifferences) {
  ReferenceBackend backend;
  LayerNormBuffers ln(DType::f64, DType::f64, 11);
  HostBuffer r = random_buffer({kBatch, kSeq, kChannels}, DType::f64, Layout::nchw, 14);
  HostBuffer dx = zeros(ln.x.tensor().dims(), DType::f64);
  HostBuffer dweight = zeros({kChannels}, DType::f64), dbias = zeros({kChannels}, DType::f64);
  ln.forward(backend);
  backend.layernorm_backward(ln.x.tensor(), ln.weight.tensor(), ln.mean.tensor(), ln.rstd.tensor(),
                             r.tensor(), dx.tensor(), dweight.tensor(), dbias.tensor(), Accumulate::overwrite,
                             Accumulate::overwrite);
  auto loss = [&] {
    ln.forward(backend);
    return weighted_sum(ln.y.tensor(), r.tensor());
  };
  EXPECT_TRUE(gradient_matches(loss, ln.x.tensor(), dx.tensor(), kGradientTolerance)) << "dx";
  EXPECT_TRUE(gradient_matches(loss, ln.weight.tensor(), dweight.tensor(), kGradientTolerance)) << "dweight";
  EXPECT_TRUE(gradient_matches(loss, ln.bias.tensor(), dbias.tensor(), kGradientTolerance)) << "dbias";
}

// Against the definition computed here: the saved mean and rstd are the row's own, y is xhat * weight +
// bias; and with weight 1, bias 0 and eps 0 every row comes out with mean 0 and variance 1.
TEST(LayerNorm, NormalizesEachRowThenAppliesTheAffine) {
  ReferenceBackend backend;
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    const double tolerance = dtype == DType::f32 ? 1e-5 : 1e-12;
    const double eps = 1e-5;
    LayerNormBuffers ln(dtype, DType::f32, 21);
    ln.forward(backend, float(eps));
    auto x = [&](int64_t n, int64_t c) { return get_element(ln.x.tensor(), n * kChannels + c); };
    auto y = [&](int64_t n, int64_t c) { return get_element(ln.y.tensor(), n * kChannels + c); };
    for (int64_t n = 0; n < kRows; ++n) {
      double sum = 0, squares = 0;
      for (int64_t c = 0; c < kChannels; ++c) sum += x(n, c);
      const double mean = sum / kChannels;
      for (int64_t c = 0; c < kChannels; ++c) squares += (x(n, c) - mean) * (x(n, c) - mean);
      const double rstd = 1 / std::sqrt(squares / kChannels + float(eps));
      EXPECT_NEAR(get_element(ln.mean.tensor(), n), mean, 1e-6);
      EXPECT_NEAR(get_element(ln.rstd.tensor(), n), rstd, 1e-6 * rstd);
      for (int64_t c = 0; c < kChannels; ++c) {
        const double expected =
            (x(n, c) - mean) * rstd * get_element(ln.weight.tensor(), c) + get_element(ln.bias.tensor(), c);
        EXPECT_NEAR(y(n, c), expected, tolerance);
      }
    }
    fill_value(ln.weight.tensor(), 1.0);
    fill_value(ln.bias.tensor(), 0.0);
    ln.forward(backend, 0.0f);
    for (int64_t n = 0; n < kRows; ++n) {
      double sum = 0, squares = 0;
      for (int64_t c = 0; c < kChannels; ++c) sum += y(n, c);
      for (int64_t c = 0; c < kChannels; ++c)
        squares += (y(n, c) - sum / kChannels) * (y(n, c) - sum / kChannels);
      EXPECT_NEAR(sum / kChannels, 0.0, tolerance) << "row " << n;
      EXPECT_NEAR(squares / kChannels, 1.0, tolerance) << "row " << n;
    }
  }
}

// dweight and dbias sum over micro-batches with Accumulate::add; dx is always overwritten.
TEST(LayerNorm, AccumulateAddsIntoWeightAndBiasGradients) {
  ReferenceBackend backend;
  LayerNormBuffers ln(DType::f64, DType::f64, 31);
  HostBuffer dy = random_buffer({kBatch, kSeq, kChannels}, DType::f64, Layout::nchw, 34);
  ln.forward(backend);
  HostBuffer dx = zeros(ln.x.tensor().dims(), DType::f64),
             dx_again = filled(ln.x.tensor().dims(), DType::f64, 9.0);
  HostBuffer dweight = zeros({kChannels}, DType::f64), dbias = zeros({kChannels}, DType::f64);
  HostBuffer dweight2 = filled({kChannels}, DType::f64, 5.0), dbias2 = filled({kChannels}, DType::f64, 5.0);
  backend.layernorm_backward(ln.x.tensor(), ln.weight.tensor(), ln.mean.tensor(), ln.rstd.tensor(),
                             dy.tensor(), dx.tensor(), dweight.tensor(), dbias.tensor(),
                             Accumulate::overwrite, Accumulate::overwrite);
  backend.layernorm_backward(ln.x.tensor(), ln.weight.tensor(), ln.mean.tensor(), ln.rstd.tensor(),
                             dy.tensor(), dx_again.tensor(), dweight2.tensor(), dbias2.tensor(),
                             Accumulate::add, Accumulate::overwrite);
  EXPECT_TRUE(bit_identical(dx.tensor(), dx_again.tensor(), 0, dx.numel()));
  for (int64_t c = 0; c < kChannels; ++c) {
    EXPECT_DOUBLE_EQ(dweight2.ptr<double>()[c], 5.0 + dweight.ptr<double>()[c]);
    EXPECT_DOUBLE_EQ(dbias2.ptr<double>()[c], 5.0 + dbias.ptr<double>()[c]);
  }
}

TEST(LayerNorm, F32MatchesF64) {
  ReferenceBackend backend;
  LayerNormBuffers ln64(DType::f64, DType::f64, 41), ln32(DType::f32, DType::f32, 41);
  HostBuffer dy64 = f32_exact_buffer({kBatch, kSeq, kChannels}, DType::f64, 44);
  HostBuffer dy32 = as_dtype(dy64.tensor(), DType::f32);
  ln64.forward(backend);
  ln32.forward(backend);
  EXPECT_LT(relative_error(ln32.y.tensor(), ln64.y.tensor()), kF32VsF64Tolerance);
  HostBuffer dx64 = zeros(dy64.tensor().dims(), DType::f64), dx32 = zeros(dy64.tensor().dims(), DType::f32);
  HostBuffer dw64 = zeros({kChannels}, DType::f64), db64 = zeros({kChannels}, DType::f64);
  HostBuffer dw32 = zeros({kChannels}, DType::f32), db32 = zeros({kChannels}, DType::f32);
  backend.layernorm_backward(ln64.x.tensor(), ln64.weight.tensor(), ln64.mean.tensor(), ln64.rstd.tensor(),
                             dy64.tensor(), dx64.tensor(), dw64.tensor(), db64.tensor(),
                             Accumulate::overwrite, Accumulate::overwrite);
  backend.layernorm_backward(ln32.x.tensor(), ln32.weight.tensor(), ln32.mean.tensor(), ln32.rstd.tensor(),
                             dy32.tensor(), dx32.tensor(), dw32.tensor(), db32.tensor(),
                             Accumulate::overwrite, Accumulate::overwrite);
  EXPECT_LT(relative_error(dx32.tensor(), dx64.tensor()), kF32VsF64Tolerance);
  EXPECT_LT(relative_error(dw32.tensor(), dw64.tensor()), kF32VsF64Tolerance);
  EXPECT_LT(relative_error(db32.tensor(), db64.tensor()), kF32VsF64Tolerance);
}

}  // namespace
}  // namespace dlbench
