// Pooling over windows of kernel_h x kernel_w input pixels; output (p, q) covers rows p * stride - pad + r
// and columns q * stride - pad + s. Padding never wins a max (it acts as -inf) and is not counted by an
// average.
#include <algorithm>
#include <utility>
#include <vector>

#include "backend/reference/reference_backend.h"
#include "backend/reference/reference_common.h"

namespace dlbench {
namespace {

using reference::View4;

void check_geometry(const PoolGeometry& g) {
  DLB_CHECK(g.batch > 0 && g.channels > 0 && g.in_h > 0 && g.in_w > 0,
            "pool: sizes must be positive ({}x{}x{}x{})", g.batch, g.channels, g.in_h, g.in_w);
  DLB_CHECK(g.kernel_h > 0 && g.kernel_w > 0 && g.stride_h > 0 && g.stride_w > 0,
            "pool: kernel {}x{} and stride {}x{} must be positive", g.kernel_h, g.kernel_w, g.stride_h,
            g.stride_w);
  // pad < kernel guarantees every window holds at least one real pixel (so a max exists and an
  // average never divides by zero).
  DLB_CHECK(g.pad_h >= 0 && g.pad_w >= 0 && g.pad_h < g.kernel_h && g.pad_w < g.kernel_w,
            "pool: pad {}x{} must be in [0, kernel {}x{})", g.pad_h, g.pad_w, g.kernel_h, g.kernel_w);
  DLB_CHECK(g.in_h + 2 * g.pad_h >= g.kernel_h && g.in_w + 2 * g.pad_w >= g.kernel_w,
            "pool: kernel {}x{} is larger than the padded input {}x{}", g.kernel_h, g.kernel_w,
            g.in_h + 2 * g.pad_h, g.in_w + 2 * g.pad_w);
}

std::vector<int64_t> x_dims(const PoolGeometry& g) { return {g.batch, g.channels, g.in_h, g.in_w}; }
std::vector<int64_t> y_dims(const PoolGeometry& g) { return {g.batch, g.channels, g.out_h(), g.out_w()}; }

// The real (non-padding) pixels of the window of output (p, q), in scan order (row by row).
struct Window {
  int64_t h_begin, h_end, w_begin, w_end;
  int64_t size() const { return (h_end - h_begin) * (w_end - w_begin); }
};

Window window(const PoolGeometry& g, int64_t p, int64_t q) {
  const int64_t h0 = p * g.stride_h - g.pad_h, w0 = q * g.stride_w - g.pad_w;
  return {std::max<int64_t>(h0, 0), std::min(h0 + g.kernel_h, g.in_h), std::max<int64_t>(w0, 0),
          std::min(w0 + g.kernel_w, g.in_w)};
}

// The first maximum of the window in scan order: where a max pool takes its value from.
template <typename T>
std::pair<int64_t, int64_t> argmax(const View4<T>& x, const Window& win, int64_t n, int64_t c) {
  std::pair<int64_t, int64_t> best{win.h_begin, win.w_begin};
  for (int64_t h = win.h_begin; h < win.h_end; ++h)
    for (int64_t w = win.w_begin; w < win.w_end; ++w)
      if (x(n, c, h, w) > x(n, c, best.first, best.second)) best = {h, w};
  return best;
}

template <typename T>
void forward(const PoolGeometry& g, const Tensor& xt, Tensor& yt) {
  const View4<T> x(xt), y(yt);
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t c = 0; c < g.channels; ++c)
      for (int64_t p = 0; p < g.out_h(); ++p)
        for (int64_t q = 0; q < g.out_w(); ++q) {
          const Window win = window(g, p, q);
          if (g.kind == PoolKind::max) {
            const auto [h, w] = argmax(x, win, n, c);
            y(n, c, p, q) = x(n, c, h, w);
          } else {
            double sum = 0;
            for (int64_t h = win.h_begin; h < win.h_end; ++h)
              for (int64_t w = win.w_begin; w < win.w_end; ++w) sum += x(n, c, h, w);
            y(n, c, p, q) = static_cast<T>(sum / static_cast<double>(win.size()));
          }
        }
}

// Each output's gradient goes back to what produced it: all of it to the argmax for max, an equal share
// to every real pixel of the window for average. Windows overlap, so contributions sum.
template <typename T>
void backward(const PoolGeometry& g, const Tensor& xt, const Tensor& dyt, Tensor& dxt) {
  const View4<T> x(xt), dy(dyt), dx(dxt);
  std::vector<double> sum(static_cast<size_t>(dxt.numel()), 0.0);  // in dx's memory order
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t c = 0; c < g.channels; ++c)
      for (int64_t p = 0; p < g.out_h(); ++p)
        for (int64_t q = 0; q < g.out_w(); ++q) {
          const Window win = window(g, p, q);
          if (g.kind == PoolKind::max) {
            const auto [h, w] = argmax(x, win, n, c);
            sum[static_cast<size_t>(dx.offset(n, c, h, w))] += dy(n, c, p, q);
          } else {
            const double share = double(dy(n, c, p, q)) / static_cast<double>(win.size());
            for (int64_t h = win.h_begin; h < win.h_end; ++h)
              for (int64_t w = win.w_begin; w < win.w_end; ++w)
                sum[static_cast<size_t>(dx.offset(n, c, h, w))] += share;
          }
        }
  for (int64_t i = 0; i < dxt.numel(); ++i) dxt.ptr<T>()[i] = static_cast<T>(sum[static_cast<size_t>(i)]);
}

}  // namespace

std::unique_ptr<PoolPlan> ReferenceBackend::plan_pool(const PoolGeometry& geometry) {
  check_geometry(geometry);
  return std::make_unique<PoolPlan>(geometry);  // saved_bytes() == 0: the backward recomputes the argmax
}

void ReferenceBackend::pool_forward(const PoolPlan& plan, const Tensor& x, Tensor& y, void*) {
  const PoolGeometry& g = plan.geometry;
  check_geometry(g);
  reference::check_tensor("pool_forward", "x", x, x_dims(g), g.dtype, g.layout);
  reference::check_tensor("pool_forward", "y", y, y_dims(g), g.dtype, g.layout);
  reference::dispatch_float(g.dtype, "pool_forward", [&](auto tag) { forward<decltype(tag)>(g, x, y); });
}

void ReferenceBackend::pool_backward(const PoolPlan& plan, const Tensor& x, const Tensor& y, const Tensor& dy,
                                     const void*, Tensor& dx) {
  const PoolGeometry& g = plan.geometry;
  check_geometry(g);
  reference::check_tensor("pool_backward", "x", x, x_dims(g), g.dtype, g.layout);
  reference::check_tensor("pool_backward", "y", y, y_dims(g), g.dtype, g.layout);
  reference::check_tensor("pool_backward", "dy", dy, y_dims(g), g.dtype, g.layout);
  reference::check_tensor("pool_backward", "dx", dx, x_dims(g), g.dtype, g.layout);
  reference::dispatch_float(g.dtype, "pool_backward",
                            [&](auto tag) { backward<decltype(tag)>(g, x, dy, dx); });
}

}  // namespace dlbench
