// ReLU and the dense algebra of fully connected layers: gemm (row-major), bias add and its gradient.
#include <vector>

#include "backend/reference/reference_backend.h"
#include "backend/reference/reference_common.h"

namespace dlbench {
namespace {

using reference::View2;

// Dims of the stored matrix whose op() is [rows, cols].
std::vector<int64_t> stored_dims(Transpose t, int64_t rows, int64_t cols) {
  return t == Transpose::no ? std::vector<int64_t>{rows, cols} : std::vector<int64_t>{cols, rows};
}

// op(a)[i, j]: a itself, or its transpose.
template <typename T>
T op(const View2<T>& a, Transpose t, int64_t i, int64_t j) {
  return t == Transpose::no ? a(i, j) : a(j, i);
}

template <typename T>
void gemm_typed(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, double alpha, const Tensor& at,
                const Tensor& bt, double beta, Tensor& ct) {
  const View2<T> a(at, ta == Transpose::no ? k : m), b(bt, tb == Transpose::no ? n : k), c(ct, n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int64_t l = 0; l < k; ++l) dot += double(op(a, ta, i, l)) * double(op(b, tb, l, j));
      // beta == 0 does not read c: uninitialised memory (even NaN) must not leak into the result.
      const double previous = beta == 0 ? 0.0 : beta * double(c(i, j));
      c(i, j) = static_cast<T>(alpha * dot + previous);
    }
}

void check_rows(const char* op, const char* name, const Tensor& t) {
  reference::check_host(op, name, t);
  DLB_CHECK(t.rank() == 2, "{}: {} is {}, expected a [N, F] matrix", op, name, t.describe());
}

}  // namespace

// y = max(x, 0), written so that NaN propagates (x < 0 is false for NaN): check_finite must still see it.
void ReferenceBackend::relu_forward(const Tensor& x, Tensor& y) {
  reference::check_same("relu_forward", "x", x, "y", y);
  reference::dispatch_float(x.dtype(), "relu_forward", [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < x.numel(); ++i) y.ptr<T>()[i] = x.ptr<T>()[i] < 0 ? T(0) : x.ptr<T>()[i];
  });
}

// The output tells where the input was positive, so the backward needs only y.
void ReferenceBackend::relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  reference::check_same("relu_backward", "y", y, "dy", dy);
  reference::check_same("relu_backward", "y", y, "dx", dx);
  reference::dispatch_float(y.dtype(), "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < y.numel(); ++i) dx.ptr<T>()[i] = y.ptr<T>()[i] > 0 ? dy.ptr<T>()[i] : T(0);
  });
}

void ReferenceBackend::gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
                            const Tensor& a, const Tensor& b, float beta, Tensor& c) {
  DLB_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm: m {}, n {}, k {} must not be negative", m, n, k);
  const DType dtype = c.dtype();
  reference::check_tensor("gemm", "a", a, stored_dims(ta, m, k), dtype);
  reference::check_tensor("gemm", "b", b, stored_dims(tb, k, n), dtype);
  reference::check_tensor("gemm", "c", c, {m, n}, dtype);
  reference::dispatch_float(
      dtype, "gemm", [&](auto tag) { gemm_typed<decltype(tag)>(ta, tb, m, n, k, alpha, a, b, beta, c); });
}

void ReferenceBackend::add_bias(Tensor& y, const Tensor& bias) {
  check_rows("add_bias", "y", y);
  reference::check_tensor("add_bias", "bias", bias, {y.dim(1)}, y.dtype());
  reference::dispatch_float(y.dtype(), "add_bias", [&](auto tag) {
    using T = decltype(tag);
    const View2<T> out(y, y.dim(1));
    for (int64_t row = 0; row < y.dim(0); ++row)
      for (int64_t f = 0; f < y.dim(1); ++f)
        out(row, f) = static_cast<T>(double(out(row, f)) + double(bias.ptr<T>()[f]));
  });
}

// The bias was added to every row, so its gradient is the sum of dy over rows.
void ReferenceBackend::bias_backward(const Tensor& dy, Tensor& dbias, Accumulate accumulate) {
  check_rows("bias_backward", "dy", dy);
  reference::check_tensor("bias_backward", "dbias", dbias, {dy.dim(1)}, dy.dtype());
  bias_backward_columns(dy, 0, dbias, accumulate);
}

void ReferenceBackend::bias_backward_columns(const Tensor& dy, int64_t first_column, Tensor& dbias,
                                             Accumulate accumulate) {
  const char* op = "bias_backward_columns";
  check_rows(op, "dy", dy);
  reference::check_host(op, "dbias", dbias);
  DLB_CHECK(dbias.rank() == 1 && dbias.dtype() == dy.dtype() && first_column >= 0 &&
                first_column + dbias.dim(0) <= dy.dim(1),
            "{}: dbias {} is no column range of dy {} from column {}", op, dbias.describe(), dy.describe(),
            first_column);
  reference::dispatch_float(dy.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const View2<T> grad(dy, dy.dim(1));
    for (int64_t f = 0; f < dbias.dim(0); ++f) {
      double sum = 0;
      for (int64_t row = 0; row < dy.dim(0); ++row) sum += grad(row, first_column + f);
      reference::store(dbias.ptr<T>()[f], sum, accumulate);
    }
  });
}

}  // namespace dlbench
