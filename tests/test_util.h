// Helpers shared by the test binaries: seeded random tensors and tolerance comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace dlbench::testing {

// Fills a host f32 or f64 tensor with uniform values in [lo, hi).
inline void fill_uniform(Tensor& t, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::f64) {
      t.ptr<double>()[i] = dist(rng);
    } else {
      t.ptr<float>()[i] = static_cast<float>(dist(rng));
    }
  }
}

inline double element(const Tensor& t, int64_t i) {
  return t.dtype() == DType::f64 ? t.ptr<double>()[i] : static_cast<double>(t.ptr<float>()[i]);
}

// max |a - b| / max(max |b|, floor): a relative error normalised by the reference's scale, so that
// elements near zero do not dominate. NaN anywhere yields +inf (NaN never passes).
inline double relative_error(const Tensor& actual, const Tensor& expected, double floor = 1e-6) {
  EXPECT_EQ(actual.numel(), expected.numel());
  double max_diff = 0, max_ref = floor;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    double a = element(actual, i), b = element(expected, i);
    if (std::isnan(a) || std::isnan(b)) return INFINITY;
    max_diff = std::max(max_diff, std::abs(a - b));
    max_ref = std::max(max_ref, std::abs(b));
  }
  return max_diff / max_ref;
}

}  // namespace dlbench::testing
