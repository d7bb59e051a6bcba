// ReLU, gemm, add_bias, bias_backward and bias_backward_columns.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>

#include "backend/reference/reference_backend.h"
#include "core/status.h"
#include "gradient_check.h"
#include "reference_test_util.h"

namespace dlbench {
namespace {

using testing::from_values;
using testing::gradient_matches;
using testing::random_buffer;
using testing::weighted_sum;
using testing::zeros;

class ReluGradient : public ::testing::TestWithParam<Layout> {};

TEST_P(ReluGradient, MatchesCentralDifferences) {
  const Layout layout = GetParam();
  ReferenceBackend backend;
  const std::vector<int64_t> dims = {2, 3, 4, 5};
  // |x| >= 0.05 everywhere: no value sits at (or within a step of) the kink.
  HostBuffer x = random_buffer(dims, DType::f64, layout, 41, 0.05, 1.0);
  HostBuffer sign = random_buffer(dims, DType::f64, layout, 42);
  for (int64_t i = 0; i < x.numel(); ++i)
    if (sign.ptr<double>()[i] < 0) x.ptr<double>()[i] = -x.ptr<double>()[i];
  HostBuffer y = zeros(dims, DType::f64, layout), dx = zeros(dims, DType::f64, layout);
  HostBuffer r = random_buffer(dims, DType::f64, layout, 43);
  backend.relu_forward(x.tensor(), y.tensor());
  backend.relu_backward(y.tensor(), r.tensor(), dx.tensor());
  auto loss = [&] {
    backend.relu_forward(x.tensor(), y.tensor());
    return weighted_sum(y.tensor(), r.tensor());
  };
  EXPECT_TRUE(gradient_matches(loss, x.tensor(), dx.tensor(), testing::kGradientTolerance));
}

INSTANTIATE_TEST_SUITE_P(Layouts, ReluGradient, ::testing::Values(Layout::nchw, Layout::nhwc),
                         [](const auto& info) { return std::string(testing::layout_label(info.param)); });

TEST(Relu, ExactValuesAndNanPropagation) {
  ReferenceBackend backend;
  for (DType dtype : {DType::f32, DType::f64}) {
    HostBuffer x = from_values({5}, dtype, {-2, -0.0, 0, 3, NAN});
    HostBuffer y = zeros({5}, dtype);
    backend.relu_forward(x.tensor(), y.tensor());
    EXPECT_EQ(testing::get_element(y.tensor(), 0), 0);
    EXPECT_EQ(testing::get_element(y.tensor(), 2), 0);
    EXPECT_EQ(testing::get_element(y.tensor(), 3), 3);
    EXPECT_TRUE(std::isnan(testing::get_element(y.tensor(), 4)));  // so that check_finite still sees it
    // dx = dy where y > 0: only element 3 passes.
    HostBuffer yb = from_values({4}, dtype, {0, 2, 0, 1}), dy = from_values({4}, dtype, {5, 6, 7, 8});
    HostBuffer dx = zeros({4}, dtype);
    backend.relu_backward(yb.tensor(), dy.tensor(), dx.tensor());
    EXPECT_EQ(testing::get_element(dx.tensor(), 0), 0);
    EXPECT_EQ(testing::get_element(dx.tensor(), 1), 6);
    EXPECT_EQ(testing::get_element(dx.tensor(), 2), 0);
    EXPECT_EQ(testing::get_element(dx.tensor(), 3), 8);
  }
}

// ---- gemm ----

std::vector<int64_t> stored(Transpose t, int64_t rows, int64_t cols) {
  return t == Transpose::no ? std::vector<int64_t>{rows, cols} : std::vector<int64_t>{cols, rows};
}
Transpose flip(Transpose t) { return t == Transpose::no ? Transpose::yes : Transpose::no; }

class GemmGradient : public ::testing::TestWithParam<std::tuple<Transpose, Transpose>> {};

// C = alpha * op(A) op(B) + beta * C0 with loss = sum(C * R). The gradients are themselves gemms, the way a
// fully connected layer's backward computes them:
//   d op(A) = alpha * R op(B)^T,  d op(B) = alpha * op(A)^T R,  dC0 = beta * R,
// and a transposed operand receives the transpose: dA = (d op(A))^T when ta = yes.
TEST_P(GemmGradient, MatchesCentralDifferences) {
  const auto [ta, tb] = GetParam();
  ReferenceBackend backend;
  const int64_t m = 4, n = 5, k = 3;
  const float alpha = 1.5f, beta = 0.5f;
  HostBuffer a = random_buffer(stored(ta, m, k), DType::f64, Layout::nchw, 51);
  HostBuffer b = random_buffer(stored(tb, k, n), DType::f64, Layout::nchw, 52);
  HostBuffer c0 = random_buffer({m, n}, DType::f64, Layout::nchw, 53);
  HostBuffer r = random_buffer({m, n}, DType::f64, Layout::nchw, 54);
  HostBuffer c = zeros({m, n}, DType::f64);
  auto loss = [&] {
    for (int64_t i = 0; i < c.numel(); ++i) c.ptr<double>()[i] = c0.ptr<double>()[i];
    backend.gemm(ta, tb, m, n, k, alpha, a.tensor(), b.tensor(), beta, c.tensor());
    return weighted_sum(c.tensor(), r.tensor());
  };

  HostBuffer da = zeros(stored(ta, m, k), DType::f64), db = zeros(stored(tb, k, n), DType::f64);
  if (ta == Transpose::no) {
    backend.gemm(Transpose::no, flip(tb), m, k, n, alpha, r.tensor(), b.tensor(), 0,
                 da.tensor());  // R op(B)^T
  } else {
    backend.gemm(tb, Transpose::yes, k, m, n, alpha, b.tensor(), r.tensor(), 0, da.tensor());  // op(B) R^T
  }
  if (tb == Transpose::no) {
    backend.gemm(flip(ta), Transpose::no, k, n, m, alpha, a.tensor(), r.tensor(), 0,
                 db.tensor());  // op(A)^T R
  } else {
    backend.gemm(Transpose::yes, ta, n, k, m, alpha, r.tensor(), a.tensor(), 0, db.tensor());  // R^T op(A)
  }
  HostBuffer dc0 = zeros({m, n}, DType::f64);
  for (int64_t i = 0; i < dc0.numel(); ++i) dc0.ptr<double>()[i] = beta * r.ptr<double>()[i];

  EXPECT_TRUE(gradient_matches(loss, a.tensor(), da.tensor(), testing::kGradientTolerance)) << "da";
  EXPECT_TRUE(gradient_matches(loss, b.tensor(), db.tensor(), testing::kGradientTolerance)) << "db";
  EXPECT_TRUE(gradient_matches(loss, c0.tensor(), dc0.tensor(), testing::kGradientTolerance)) << "dc";
}

INSTANTIATE_TEST_SUITE_P(Transposes, GemmGradient,
                         ::testing::Combine(::testing::Values(Transpose::no, Transpose::yes),
                                            ::testing::Values(Transpose::no, Transpose::yes)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) == Transpose::no ? "A" : "At") + "_" +
                                  (std::get<1>(info.param) == Transpose::no ? "B" : "Bt");
                         });

// A = [[1 2 3] [4 5 6]], B = [[1 0] [0 1] [1 1]]: A B = [[4 5] [10 11]].
TEST(Gemm, HandComputedWithTransposesAlphaBeta) {
  ReferenceBackend backend;
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    HostBuffer a = from_values({2, 3}, dtype, {1, 2, 3, 4, 5, 6});
    HostBuffer at = from_values({3, 2}, dtype, {1, 4, 2, 5, 3, 6});
    HostBuffer b = from_values({3, 2}, dtype, {1, 0, 0, 1, 1, 1});
    HostBuffer bt = from_values({2, 3}, dtype, {1, 0, 1, 0, 1, 1});
    for (auto [ta, tb] :
         {std::pair{Transpose::no, Transpose::no}, std::pair{Transpose::yes, Transpose::no},
          std::pair{Transpose::no, Transpose::yes}, std::pair{Transpose::yes, Transpose::yes}}) {
      HostBuffer c = from_values({2, 2}, dtype, {1, 1, 1, 1});
      backend.gemm(ta, tb, 2, 2, 3, 2.0f, ta == Transpose::no ? a.tensor() : at.tensor(),
                   tb == Transpose::no ? b.tensor() : bt.tensor(), 3.0f, c.tensor());
      // 2 * A B + 3 * 1
      EXPECT_EQ(testing::get_element(c.tensor(), 0), 11);
      EXPECT_EQ(testing::get_element(c.tensor(), 1), 13);
      EXPECT_EQ(testing::get_element(c.tensor(), 2), 23);
      EXPECT_EQ(testing::get_element(c.tensor(), 3), 25);
    }
    // beta = 0 does not read c: NaN there does not leak (BLAS convention).
    HostBuffer c = testing::filled({2, 2}, dtype, NAN);
    backend.gemm(Transpose::no, Transpose::no, 2, 2, 3, 1.0f, a.tensor(), b.tensor(), 0.0f, c.tensor());
    EXPECT_EQ(testing::get_element(c.tensor(), 0), 4);
    EXPECT_EQ(testing::get_element(c.tensor(), 3), 11);
  }
}

TEST(Gemm, ShapeMismatchThrows) {
  ReferenceBackend backend;
  HostBuffer a = zeros({2, 3}, DType::f32), b = zeros({3, 2}, DType::f32), c = zeros({2, 2}, DType::f32);
  EXPECT_NO_THROW(
      backend.gemm(Transpose::no, Transpose::no, 2, 2, 3, 1, a.tensor(), b.tensor(), 0, c.tensor()));
  // With ta = yes, a must be stored [k, m] = [3, 2].
  try {
    backend.gemm(Transpose::yes, Transpose::no, 2, 2, 3, 1, a.tensor(), b.tensor(), 0, c.tensor());
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gemm: a is f32[2, 3] nchw cpu, expected f32[3, 2]"),
              std::string::npos)
        << e.what();
  }
  HostBuffer b64 = zeros({3, 2}, DType::f64);
  EXPECT_THROW(
      backend.gemm(Transpose::no, Transpose::no, 2, 2, 3, 1, a.tensor(), b64.tensor(), 0, c.tensor()), Error);
}

// ---- bias ----

TEST(AddBias, GradientMatchesCentralDifferences) {
  ReferenceBackend backend;
  const int64_t rows = 3, features = 4;
  HostBuffer y0 = random_buffer({rows, features}, DType::f64, Layout::nchw, 61);
  HostBuffer bias = random_buffer({features}, DType::f64, Layout::nchw, 62);
  HostBuffer r = random_buffer({rows, features}, DType::f64, Layout::nchw, 63);
  HostBuffer y = zeros({rows, features}, DType::f64);
  auto loss = [&] {
    for (int64_t i = 0; i < y.numel(); ++i) y.ptr<double>()[i] = y0.ptr<double>()[i];
    backend.add_bias(y.tensor(), bias.tensor());
    return weighted_sum(y.tensor(), r.tensor());
  };
  HostBuffer dbias = zeros({features}, DType::f64);
  backend.bias_backward(r.tensor(), dbias.tensor(), Accumulate::overwrite);
  EXPECT_TRUE(gradient_matches(loss, bias.tensor(), dbias.tensor(), testing::kGradientTolerance)) << "dbias";
  EXPECT_TRUE(gradient_matches(loss, y0.tensor(), r.tensor(), testing::kGradientTolerance))
      << "dy passes through";
}

TEST(AddBias, ExactValuesAndAccumulate) {
  ReferenceBackend backend;
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    HostBuffer y = from_values({2, 3}, dtype, {1, 2, 3, 4, 5, 6});
    HostBuffer bias = from_values({3}, dtype, {10, 20, 30});
    backend.add_bias(y.tensor(), bias.tensor());
    const double expected_y[6] = {11, 22, 33, 14, 25, 36};
    for (int i = 0; i < 6; ++i) EXPECT_EQ(testing::get_element(y.tensor(), i), expected_y[i]);

    HostBuffer dbias = testing::filled({3}, dtype, NAN);
    backend.bias_backward(y.tensor(), dbias.tensor(), Accumulate::overwrite);
    EXPECT_EQ(testing::get_element(dbias.tensor(), 0), 25);
    EXPECT_EQ(testing::get_element(dbias.tensor(), 1), 47);
    EXPECT_EQ(testing::get_element(dbias.tensor(), 2), 69);
    backend.bias_backward(y.tensor(), dbias.tensor(), Accumulate::add);
    EXPECT_EQ(testing::get_element(dbias.tensor(), 0), 50);
    EXPECT_EQ(testing::get_element(dbias.tensor(), 2), 138);
  }
  HostBuffer y = zeros({2, 3}, DType::f32), bias = zeros({4}, DType::f32);
  EXPECT_THROW(backend.add_bias(y.tensor(), bias.tensor()), Error);
}

// A column range's bias gradient: the sums of those columns alone, overwritten or added to; a range that
// leaves dy is refused.
TEST(AddBias, ColumnRangeSums) {
  ReferenceBackend backend;
  HostBuffer dy = from_values({2, 4}, DType::f32, {1, 2, 3, 4, 10, 20, 30, 40});
  HostBuffer sums = testing::filled({2}, DType::f32, NAN);
  backend.bias_backward_columns(dy.tensor(), 1, sums.tensor(), Accumulate::overwrite);
  EXPECT_EQ(testing::get_element(sums.tensor(), 0), 22);
  EXPECT_EQ(testing::get_element(sums.tensor(), 1), 33);
  backend.bias_backward_columns(dy.tensor(), 2, sums.tensor(), Accumulate::add);
  EXPECT_EQ(testing::get_element(sums.tensor(), 0), 55);
  EXPECT_EQ(testing::get_element(sums.tensor(), 1), 77);
  EXPECT_THROW(backend.bias_backward_columns(dy.tensor(), 3, sums.tensor(), Accumulate::overwrite), Error);
  EXPECT_THROW(backend.bias_backward_columns(dy.tensor(), -1, sums.tensor(), Accumulate::overwrite), Error);
}

}  // namespace
}  // namespace dlbench
