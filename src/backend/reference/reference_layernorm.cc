// Layer normalisation over each row of x [..., C] (one token's features), with a learned affine:
//   mean = sum_c x[c] / C,  var = sum_c (x[c] - mean)^2 / C  (biased, as PyTorch's layer norm)
//   xhat = (x - mean) * rstd,  rstd = 1 / sqrt(var + eps),  y = xhat * weight + bias.
// The backward (with g = dy * weight, the gradient reaching xhat):
//   dbias += sum over rows of dy,  dweight += sum over rows of dy * xhat
//   dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))
// where the two means are what flows back through mean and rstd, both functions of the whole row. The
// forward saves mean and rstd so that the backward need not recompute the row's statistics.
#include <cmath>
#include <vector>

#include "backend/reference/reference_backend.h"
#include "backend/reference/reference_common.h"

namespace dlbench {
namespace {

using reference::View2;

// x [..., C]: the rows are every leading index, N of them. Returns N.
int64_t check_layernorm(const char* op, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd) {
  reference::check_host(op, "x", x);
  DLB_CHECK(x.rank() >= 2 && x.dims().back() > 0, "{}: x is {}, expected rows of features [..., C]", op,
            x.describe());
  const int64_t C = x.dims().back(), N = x.numel() / C;
  reference::check_tensor(op, "weight", weight, {C}, x.dtype());
  reference::check_f32_or_f64(op, "mean", mean, {N});
  reference::check_f32_or_f64(op, "rstd", rstd, {N});
  return N;
}

template <typename T>
void forward(const Tensor& x_t, const Tensor& weight, const Tensor& bias, double eps, Tensor& y_t,
             std::vector<double>& mean, std::vector<double>& rstd) {
  const int64_t C = x_t.dims().back(), N = x_t.numel() / C;
  const View2<T> x(x_t, C), y(y_t, C);
  const T* w = weight.ptr<T>();
  const T* b = bias.ptr<T>();
  for (int64_t n = 0; n < N; ++n) {
    double sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += double(x(n, c));
    const double mu = sum / double(C);
    double squares = 0;  // around the mean: no cancellation, unlike E[x^2] - mean^2
    for (int64_t c = 0; c < C; ++c) squares += (double(x(n, c)) - mu) * (double(x(n, c)) - mu);
    const double r = 1.0 / std::sqrt(squares / double(C) + eps);
    for (int64_t c = 0; c < C; ++c)
      y(n, c) = static_cast<T>((double(x(n, c)) - mu) * r * double(w[c]) + double(b[c]));
    mean[static_cast<size_t>(n)] = mu;
    rstd[static_cast<size_t>(n)] = r;
  }
}

template <typename T>
void backward(const Tensor& x_t, const Tensor& weight, const std::vector<double>& mean,
              const std::vector<double>& rstd, const Tensor& dy_t, Tensor& dx_t, bool add_dx,
              std::vector<double>& dweight, std::vector<double>& dbias) {
  const int64_t C = x_t.dims().back(), N = x_t.numel() / C;
  const View2<T> x(x_t, C), dy(dy_t, C), dx(dx_t, C);
  const T* w = weight.ptr<T>();
  std::vector<double> xhat(static_cast<size_t>(C)), g(static_cast<size_t>(C));
  for (int64_t n = 0; n < N; ++n) {
    const double mu = mean[static_cast<size_t>(n)], r = rstd[static_cast<size_t>(n)];
    double mean_g = 0, mean_g_xhat = 0;
    for (int64_t c = 0; c < C; ++c) {
      const size_t i = static_cast<size_t>(c);
      xhat[i] = (double(x(n, c)) - mu) * r;
      g[i] = double(dy(n, c)) * double(w[c]);
      mean_g += g[i] / double(C);
      mean_g_xhat += g[i] * xhat[i] / double(C);
      dbias[i] += double(dy(n, c));
      dweight[i] += double(dy(n, c)) * xhat[i];
    }
    for (int64_t c = 0; c < C; ++c) {
      const size_t i = static_cast<size_t>(c);
      // Added to dx as the add op would add the rounded value.
      const T d = static_cast<T>(r * (g[i] - mean_g - xhat[i] * mean_g_xhat));
      dx(n, c) = add_dx ? static_cast<T>(double(dx(n, c)) + double(d)) : d;
    }
  }
}

}  // namespace

void ReferenceBackend::layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                                         Tensor& y, Tensor& mean, Tensor& rstd) {
  const char* op = "layernorm_forward";
  const int64_t N = check_layernorm(op, x, weight, mean, rstd);
  DLB_CHECK(eps >= 0, "{}: eps {} is negative", op, eps);
  reference::check_tensor(op, "bias", bias, weight.dims(), x.dtype());
  reference::check_same(op, "x", x, "y", y);
  std::vector<double> row_mean(static_cast<size_t>(N)), row_rstd(static_cast<size_t>(N));
  reference::dispatch_float(
      x.dtype(), op, [&](auto tag) { forward<decltype(tag)>(x, weight, bias, eps, y, row_mean, row_rstd); });
  reference::write_channels(mean, row_mean);
  reference::write_channels(rstd, row_rstd);
}

void ReferenceBackend::layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                                          const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dweight,
                                          Tensor& dbias, Accumulate accumulate, Accumulate dx_accumulate) {
  const char* op = "layernorm_backward";
  check_layernorm(op, x, weight, mean, rstd);
  reference::check_same(op, "x", x, "dy", dy);
  reference::check_same(op, "x", x, "dx", dx);
  reference::check_same(op, "weight", weight, "dweight", dweight);
  reference::check_same(op, "weight", weight, "dbias", dbias);
  std::vector<double> sum_dweight(static_cast<size_t>(weight.numel())), sum_dbias(sum_dweight.size());
  reference::dispatch_float(x.dtype(), op, [&](auto tag) {
    backward<decltype(tag)>(x, weight, reference::read_channels(mean), reference::read_channels(rstd), dy, dx,
                            dx_accumulate == Accumulate::add, sum_dweight, sum_dbias);
  });
  reference::write_channels(dweight, sum_dweight, accumulate);
  reference::write_channels(dbias, sum_dbias, accumulate);
}

}  // namespace dlbench
