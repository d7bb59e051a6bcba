// GELU in its tanh form, as GPT-2 was trained with (not the erf form: the two differ by ~1e-3):
//   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// The backward takes the forward's input (not its output: gelu is not invertible).
#include <cmath>
#include <numbers>

#include "backend/reference/reference_backend.h"
#include "backend/reference/reference_common.h"

namespace dlbench {
namespace {

constexpr double kCubic = 0.044715;
const double kSqrt2OverPi = std::sqrt(2.0 / std::numbers::pi);

double gelu(double x) { return 0.5 * x * (1 + std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x))); }

double gelu_derivative(double x) {
  const double tanh_u = std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x));
  return 0.5 * (1 + tanh_u) + 0.5 * x * (1 - tanh_u * tanh_u) * kSqrt2OverPi * (1 + 3 * kCubic * x * x);
}

}  // namespace

void ReferenceBackend::gelu_forward(const Tensor& x, Tensor& y) {
  reference::check_same("gelu_forward", "x", x, "y", y);
  reference::dispatch_float(x.dtype(), "gelu_forward", [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < x.numel(); ++i) y.ptr<T>()[i] = static_cast<T>(gelu(double(x.ptr<T>()[i])));
  });
}

void ReferenceBackend::gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  reference::check_same("gelu_backward", "x", x, "dy", dy);
  reference::check_same("gelu_backward", "x", x, "dx", dx);
  reference::dispatch_float(x.dtype(), "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < x.numel(); ++i)
      dx.ptr<T>()[i] = static_cast<T>(double(dy.ptr<T>()[i]) * gelu_derivative(double(x.ptr<T>()[i])));
  });
}

}  // namespace dlbench
