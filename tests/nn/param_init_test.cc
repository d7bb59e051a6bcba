// Initial values (nn/param_init.h): a pure function of (seed, parameter, element), so any split of the
// work gives the same values, with the distribution each rule states.
#include "nn/param_init.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace dlbench {
namespace {

std::vector<float> values(ParamInit init, double scale, uint64_t key, int64_t first, int64_t count) {
  std::vector<float> out(static_cast<size_t>(count));
  initial_values(init, scale, key, first, out);
  return out;
}

TEST(ParamInit, AnySplitOfTheWorkGivesTheSameValues) {
  const uint64_t key = param_stream_key(42, 3);
  for (ParamInit init : {ParamInit::normal, ParamInit::uniform_fan_in}) {
    const std::vector<float> whole = values(init, 0.02, key, 0, 1001);
    std::vector<float> pieces;
    // Pieces starting at odd and even elements, of odd and even lengths: a normal pair split in two.
    for (auto [first, count] : {std::pair<int64_t, int64_t>{0, 1}, {1, 4}, {5, 7}, {12, 500}, {512, 489}}) {
      const std::vector<float> piece = values(init, 0.02, key, first, count);
      pieces.insert(pieces.end(), piece.begin(), piece.end());
    }
    EXPECT_EQ(pieces, whole);
  }
}

TEST(ParamInit, StreamsDifferBySeedAndParameter) {
  const std::vector<float> a = values(ParamInit::normal, 1, param_stream_key(1, 0), 0, 64);
  EXPECT_NE(a, values(ParamInit::normal, 1, param_stream_key(2, 0), 0, 64));
  EXPECT_NE(a, values(ParamInit::normal, 1, param_stream_key(1, 1), 0, 64));
  EXPECT_EQ(a, values(ParamInit::normal, 1, param_stream_key(1, 0), 0, 64));
}

TEST(ParamInit, EachRuleHasItsDistribution) {
  constexpr int64_t n = 1 << 20;
  const std::vector<float> normal = values(ParamInit::normal, 0.02, param_stream_key(7, 0), 0, n);
  double sum = 0, squares = 0, fourth = 0;
  for (float v : normal) sum += v, squares += double(v) * v, fourth += std::pow(double(v), 4);
  const double mean = sum / n, var = squares / n - mean * mean;
  EXPECT_NEAR(mean, 0, 5 * 0.02 / std::sqrt(double(n)));
  EXPECT_NEAR(std::sqrt(var), 0.02, 0.02 * 0.005);
  EXPECT_NEAR(fourth / n / (var * var), 3.0, 0.05);  // a normal's kurtosis
  // Neighbouring elements (the two halves of one Box-Muller draw) are uncorrelated.
  double lag = 0;
  for (int64_t i = 0; i + 1 < n; ++i) lag += double(normal[size_t(i)]) * normal[size_t(i + 1)];
  EXPECT_NEAR(lag / n / var, 0, 0.01);

  const std::vector<float> uniform = values(ParamInit::uniform_fan_in, 0.5, param_stream_key(7, 1), 0, n);
  double lo = 1, hi = -1, usum = 0;
  for (float v : uniform) lo = std::min(lo, double(v)), hi = std::max(hi, double(v)), usum += v;
  EXPECT_GE(lo, -0.5);
  EXPECT_LE(hi, 0.5);
  EXPECT_LT(lo, -0.499);
  EXPECT_GT(hi, 0.499);
  EXPECT_NEAR(usum / n, 0, 0.005);

  for (float v : values(ParamInit::ones, 0, 0, 0, 10)) EXPECT_EQ(v, 1.f);
  for (float v : values(ParamInit::zeros, 0, 0, 0, 10)) EXPECT_EQ(v, 0.f);
}

}  // namespace
}  // namespace dlbench
