// Helpers for the reference backend's tests: seeded buffers, logical (layout-independent) copies and
// comparisons, and the tolerances the tests share.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "backend/reference/reference_backend.h"
#include "core/tensor.h"
#include "gradient_check.h"
#include "test_util.h"

namespace dlbench {

// Readable test names in gtest's output for parameterised tests.
inline void PrintTo(Layout layout, std::ostream* os) { *os << layout_name(layout); }
inline void PrintTo(BatchNormFusion fusion, std::ostream* os) {
  *os << (fusion == BatchNormFusion::none ? "none" : fusion == BatchNormFusion::relu ? "relu" : "add_relu");
}

}  // namespace dlbench

namespace dlbench::testing {

// Analytic vs central-difference gradients in double (see gradient_check.h for the measure). Observed
// errors are ~1e-9; batch norm's backward reads the FP32 saved statistics, which limits it to ~1e-7.
constexpr double kGradientTolerance = 1e-6;
constexpr double kBatchNormGradientTolerance = 1e-5;
// The same op in f32 and in f64 on the same (f32-representable) data.
constexpr double kF32VsF64Tolerance = 1e-5;

inline const char* layout_label(Layout layout) { return layout == Layout::nchw ? "NCHW" : "NHWC"; }

inline void fill_value(Tensor& t, double value) {
  for (int64_t i = 0; i < t.numel(); ++i) set_element(t, i, value);
}

inline HostBuffer random_buffer(std::vector<int64_t> dims, DType dtype, Layout layout, uint64_t seed,
                                double lo = -1.0, double hi = 1.0) {
  HostBuffer buffer(std::move(dims), dtype, layout);
  fill_uniform(buffer.tensor(), seed, lo, hi);
  return buffer;
}

inline HostBuffer zeros(std::vector<int64_t> dims, DType dtype, Layout layout = Layout::nchw) {
  return HostBuffer(std::move(dims), dtype, layout);
}

inline HostBuffer filled(std::vector<int64_t> dims, DType dtype, double value, Layout layout = Layout::nchw) {
  HostBuffer buffer(std::move(dims), dtype, layout);
  fill_value(buffer.tensor(), value);
  return buffer;
}

inline HostBuffer from_values(std::vector<int64_t> dims, DType dtype, const std::vector<double>& values) {
  HostBuffer buffer(std::move(dims), dtype);
  EXPECT_EQ(static_cast<size_t>(buffer.numel()), values.size());
  for (size_t i = 0; i < values.size(); ++i) set_element(buffer.tensor(), static_cast<int64_t>(i), values[i]);
  return buffer;
}

// Element (n, c, h, w) of a rank-4 f32/f64 tensor, whatever its layout.
inline double at(const Tensor& t, int64_t n, int64_t c, int64_t h, int64_t w) {
  return get_element(t, t.offset(n, c, h, w));
}

// A copy of a rank-4 tensor in another layout and/or dtype (f32/f64), element by logical index.
inline HostBuffer converted(const Tensor& src, DType dtype, Layout layout) {
  HostBuffer dst(src.dims(), dtype, layout);
  if (src.rank() != 4) {
    for (int64_t i = 0; i < src.numel(); ++i) set_element(dst.tensor(), i, get_element(src, i));
    return dst;
  }
  for (int64_t n = 0; n < src.n(); ++n)
    for (int64_t c = 0; c < src.c(); ++c)
      for (int64_t h = 0; h < src.h(); ++h)
        for (int64_t w = 0; w < src.w(); ++w)
          set_element(dst.tensor(), dst.tensor().offset(n, c, h, w), at(src, n, c, h, w));
  return dst;
}

// relative_error (test_util.h) by logical index, for tensors that may differ in layout.
inline double logical_relative_error(const Tensor& actual, const Tensor& expected) {
  HostBuffer a = converted(actual, DType::f64, Layout::nchw);
  HostBuffer e = converted(expected, DType::f64, Layout::nchw);
  return relative_error(a.tensor(), e.tensor());
}

// Distinct values in random order, spaced `gap` apart: every max-pool window has a unique maximum that a
// finite-difference step cannot overtake.
inline HostBuffer distinct_buffer(std::vector<int64_t> dims, Layout layout, uint64_t seed,
                                  double gap = 0.01) {
  HostBuffer buffer(std::move(dims), DType::f64, layout);
  std::vector<int64_t> order(static_cast<size_t>(buffer.numel()));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  for (size_t i = 0; i < order.size(); ++i)
    buffer.ptr<double>()[i] = gap * (static_cast<double>(order[i]) - static_cast<double>(order.size()) / 2);
  return buffer;
}

inline bool all_finite(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(get_element(t, i))) return false;
  return true;
}

}  // namespace dlbench::testing
