// Finite-difference gradient checking, reusable by any test that can compute a scalar loss on the host.
//
//   auto loss = [&] { backend.conv_forward(plan, x, w, y, nullptr); return weighted_sum(y, r); };
//   EXPECT_TRUE(gradient_matches(loss, x, dx_analytic, 1e-6));
//
// The numeric gradient uses central differences, dL/dx[i] ~ (L(x+) - L(x-)) / (x+ - x-), perturbing one
// element at a time in place (and restoring it). x+ and x- are the values actually stored, so an f32
// input whose x + h rounds is still differentiated with the step it really took: for a loss linear in
// that input (batch-norm gamma and beta, say) the estimate stays exact even in f32.
//
// Error measure: max_i |analytic_i - numeric_i| / max(max_i |numeric_i|, floor), i.e. relative to the
// scale of the gradient, so that elements whose gradient is near zero do not dominate.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"

namespace dlbench::testing {

// The step: 1e-6 balances truncation (O(h^2)) and rounding (O(eps / h)) errors in double. f32 inputs take
// a larger step, since their rounding error is ~1e-7 relative.
inline double default_step(DType dtype) { return dtype == DType::f64 ? 1e-6 : 1e-4; }

inline double get_element(const Tensor& t, int64_t i) {
  return t.dtype() == DType::f64 ? t.ptr<double>()[i] : static_cast<double>(t.ptr<float>()[i]);
}

inline void set_element(Tensor& t, int64_t i, double value) {
  if (t.dtype() == DType::f64) {
    t.ptr<double>()[i] = value;
  } else {
    t.ptr<float>()[i] = static_cast<float>(value);
  }
}

// dL/dinput for every element of `input` (f32 or f64, host), by central differences. `loss` must read the
// current contents of `input`.
inline std::vector<double> numeric_gradient(const std::function<double()>& loss, Tensor& input, double h) {
  std::vector<double> gradient(static_cast<size_t>(input.numel()));
  for (int64_t i = 0; i < input.numel(); ++i) {
    const double original = get_element(input, i);
    set_element(input, i, original + h);
    const double x_plus = get_element(input, i);
    const double loss_plus = loss();
    set_element(input, i, original - h);
    const double x_minus = get_element(input, i);
    const double loss_minus = loss();
    set_element(input, i, original);
    gradient[static_cast<size_t>(i)] = (loss_plus - loss_minus) / (x_plus - x_minus);
  }
  return gradient;
}

struct GradientComparison {
  double relative_error = 0;  // see the error measure above
  int64_t worst_index = -1;
  double analytic = 0, numeric = 0;  // at worst_index
};

inline GradientComparison compare_gradients(const Tensor& analytic, const std::vector<double>& numeric,
                                            double floor = 1e-6) {
  GradientComparison result;
  double max_diff = 0, scale = floor;
  for (int64_t i = 0; i < analytic.numel(); ++i) {
    const double a = get_element(analytic, i), b = numeric[static_cast<size_t>(i)];
    const double diff = std::isnan(a) || std::isnan(b) ? INFINITY : std::abs(a - b);
    if (diff > max_diff || result.worst_index < 0) {
      max_diff = diff;
      result.worst_index = i;
      result.analytic = a;
      result.numeric = b;
    }
    scale = std::max(scale, std::abs(b));
  }
  result.relative_error = max_diff / scale;
  return result;
}

// Succeeds when the analytic gradient of `loss` with respect to `input` matches central differences within
// `tolerance` (relative, as above). h <= 0 picks default_step(input.dtype()).
inline ::testing::AssertionResult gradient_matches(const std::function<double()>& loss, Tensor& input,
                                                   const Tensor& analytic, double tolerance, double h = 0) {
  if (analytic.numel() != input.numel()) {
    return ::testing::AssertionFailure()
           << "the analytic gradient has " << analytic.numel() << " elements, the input " << input.numel();
  }
  const std::vector<double> numeric = numeric_gradient(loss, input, h > 0 ? h : default_step(input.dtype()));
  const GradientComparison c = compare_gradients(analytic, numeric);
  if (c.relative_error <= tolerance) {
    return ::testing::AssertionSuccess() << "relative error " << c.relative_error;
  }
  return ::testing::AssertionFailure()
         << "relative error " << c.relative_error << " > " << tolerance << " (worst at element "
         << c.worst_index << ": analytic " << c.analytic << ", numeric " << c.numeric << ")";
}

// sum_i y[i] * weights[i] (same shape and layout): a scalar loss whose gradient with respect to y is
// `weights`.
inline double weighted_sum(const Tensor& y, const Tensor& weights) {
  double sum = 0;
  for (int64_t i = 0; i < y.numel(); ++i) sum += get_element(y, i) * get_element(weights, i);
  return sum;
}

}  // namespace dlbench::testing
