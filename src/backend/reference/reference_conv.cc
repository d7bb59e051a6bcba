// Convolution: direct loops over the definition. With zero padding, an output pixel (p, q) sees input
// pixel (p * stride - pad + r, q * stride - pad + s) through kernel tap (r, s); taps that fall outside the
// input read zero, i.e. contribute nothing.
#include <vector>

#include "backend/reference/reference_backend.h"
#include "backend/reference/reference_common.h"

namespace dlbench {
namespace {

using reference::View4;

void check_geometry(const ConvGeometry& g) { check_conv_geometry(g); }

std::vector<int64_t> x_dims(const ConvGeometry& g) { return {g.batch, g.in_channels, g.in_h, g.in_w}; }
std::vector<int64_t> w_dims(const ConvGeometry& g) {
  return {g.out_channels, g.in_channels, g.kernel_h, g.kernel_w};
}
std::vector<int64_t> y_dims(const ConvGeometry& g) { return {g.batch, g.out_channels, g.out_h(), g.out_w()}; }

// The input row/column that output position `o` sees through kernel tap `t`; may be in the padding.
int64_t input_index(int64_t o, int64_t t, int64_t stride, int64_t pad) { return o * stride - pad + t; }
bool inside(int64_t i, int64_t size) { return i >= 0 && i < size; }

template <typename T>
void forward(const ConvGeometry& g, const Tensor& xt, const Tensor& wt, Tensor& yt) {
  const View4<T> x(xt), w(wt), y(yt);
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t k = 0; k < g.out_channels; ++k)
      for (int64_t p = 0; p < g.out_h(); ++p)
        for (int64_t q = 0; q < g.out_w(); ++q) {
          double sum = 0;
          for (int64_t c = 0; c < g.in_channels; ++c)
            for (int64_t r = 0; r < g.kernel_h; ++r)
              for (int64_t s = 0; s < g.kernel_w; ++s) {
                const int64_t h = input_index(p, r, g.stride_h, g.pad_h);
                const int64_t wi = input_index(q, s, g.stride_w, g.pad_w);
                if (inside(h, g.in_h) && inside(wi, g.in_w))
                  sum += double(x(n, c, h, wi)) * double(w(k, c, r, s));
              }
          y(n, k, p, q) = static_cast<T>(sum);
        }
}

// The transpose of the forward: every (output, tap) pair that read x[n,c,h,w] sends dy * weight back to it.
template <typename T>
void backward_data(const ConvGeometry& g, const Tensor& dyt, const Tensor& wt, Tensor& dxt,
                   Accumulate accumulate) {
  const View4<T> dy(dyt), w(wt), dx(dxt);
  std::vector<double> sum(static_cast<size_t>(dxt.numel()), 0.0);  // in dx's memory order
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t k = 0; k < g.out_channels; ++k)
      for (int64_t p = 0; p < g.out_h(); ++p)
        for (int64_t q = 0; q < g.out_w(); ++q)
          for (int64_t c = 0; c < g.in_channels; ++c)
            for (int64_t r = 0; r < g.kernel_h; ++r)
              for (int64_t s = 0; s < g.kernel_w; ++s) {
                const int64_t h = input_index(p, r, g.stride_h, g.pad_h);
                const int64_t wi = input_index(q, s, g.stride_w, g.pad_w);
                if (inside(h, g.in_h) && inside(wi, g.in_w))
                  sum[static_cast<size_t>(dx.offset(n, c, h, wi))] +=
                      double(dy(n, k, p, q)) * double(w(k, c, r, s));
              }
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t c = 0; c < g.in_channels; ++c)
      for (int64_t h = 0; h < g.in_h; ++h)
        for (int64_t wi = 0; wi < g.in_w; ++wi)
          reference::store(dx(n, c, h, wi), sum[static_cast<size_t>(dx.offset(n, c, h, wi))], accumulate);
}

// dL/dw[k,c,r,s] = sum over every output that used this tap of dy * the input pixel it read.
template <typename T>
void backward_filter(const ConvGeometry& g, const Tensor& xt, const Tensor& dyt, Tensor& dwt,
                     Accumulate accumulate) {
  const View4<T> x(xt), dy(dyt), dw(dwt);
  for (int64_t k = 0; k < g.out_channels; ++k)
    for (int64_t c = 0; c < g.in_channels; ++c)
      for (int64_t r = 0; r < g.kernel_h; ++r)
        for (int64_t s = 0; s < g.kernel_w; ++s) {
          double sum = 0;
          for (int64_t n = 0; n < g.batch; ++n)
            for (int64_t p = 0; p < g.out_h(); ++p)
              for (int64_t q = 0; q < g.out_w(); ++q) {
                const int64_t h = input_index(p, r, g.stride_h, g.pad_h);
                const int64_t wi = input_index(q, s, g.stride_w, g.pad_w);
                if (inside(h, g.in_h) && inside(wi, g.in_w))
                  sum += double(x(n, c, h, wi)) * double(dy(n, k, p, q));
              }
          reference::store(dw(k, c, r, s), sum, accumulate);
        }
}

}  // namespace

namespace {

// Sums its output wherever its geometry asks: one more pass in double after the forward.
class ReferenceConvPlan final : public ConvPlan {
 public:
  using ConvPlan::ConvPlan;
  bool emits_statistics() const override { return geometry.output_statistics; }
};

}  // namespace

std::unique_ptr<ConvPlan> ReferenceBackend::plan_conv(const ConvGeometry& geometry) {
  check_geometry(geometry);
  return std::make_unique<ReferenceConvPlan>(geometry);
}

void ReferenceBackend::conv_forward(const ConvPlan& plan, const Tensor& x, const Tensor& w, Tensor& y,
                                    void*) {
  const ConvGeometry& g = plan.geometry;
  check_geometry(g);
  reference::check_tensor("conv_forward", "x", x, x_dims(g), g.dtype, g.layout);
  reference::check_tensor("conv_forward", "w", w, w_dims(g), g.dtype, g.layout);
  reference::check_tensor("conv_forward", "y", y, y_dims(g), g.dtype, g.layout);
  reference::dispatch_float(g.dtype, "conv_forward", [&](auto tag) { forward<decltype(tag)>(g, x, w, y); });
}

void ReferenceBackend::conv_forward_with_statistics(const ConvPlan& plan, const Tensor& x, const Tensor& w,
                                                    Tensor& y, Tensor& sums, void* workspace) {
  const ConvGeometry& g = plan.geometry;
  const char* op = "conv_forward_with_statistics";
  DLB_CHECK(g.output_statistics, "{}: the plan was not made with output_statistics", op);
  DLB_CHECK(sums.numel() == 2 * g.out_channels && (sums.dtype() == DType::f32 || sums.dtype() == DType::f64),
            "{}: sums must hold 2 x {} FP32 or FP64 values, got {}", op, g.out_channels, sums.describe());
  reference::check_host(op, "sums", sums);
  conv_forward(plan, x, w, y, workspace);
  const auto K = static_cast<size_t>(g.out_channels);
  std::vector<double> values(2 * K, 0.0);
  reference::dispatch_float(g.dtype, op, [&](auto tag) {
    const reference::View4<decltype(tag)> out(y);
    for (int64_t n = 0; n < g.batch; ++n)
      for (int64_t k = 0; k < g.out_channels; ++k)
        for (int64_t p = 0; p < g.out_h(); ++p)
          for (int64_t q = 0; q < g.out_w(); ++q) {
            const double v = double(out(n, k, p, q));
            values[static_cast<size_t>(k)] += v;
            values[K + static_cast<size_t>(k)] += v * v;
          }
  });
  reference::write_channels(sums, values);
}

void ReferenceBackend::conv_backward_data(const ConvPlan& plan, const Tensor& dy, const Tensor& w, Tensor& dx,
                                          Accumulate accumulate, void*) {
  const ConvGeometry& g = plan.geometry;
  check_geometry(g);
  reference::check_tensor("conv_backward_data", "dy", dy, y_dims(g), g.dtype, g.layout);
  reference::check_tensor("conv_backward_data", "w", w, w_dims(g), g.dtype, g.layout);
  reference::check_tensor("conv_backward_data", "dx", dx, x_dims(g), g.dtype, g.layout);
  reference::dispatch_float(g.dtype, "conv_backward_data",
                            [&](auto tag) { backward_data<decltype(tag)>(g, dy, w, dx, accumulate); });
}

void ReferenceBackend::conv_backward_filter(const ConvPlan& plan, const Tensor& x, const Tensor& dy,
                                            Tensor& dw, Accumulate accumulate, void*) {
  const ConvGeometry& g = plan.geometry;
  check_geometry(g);
  reference::check_tensor("conv_backward_filter", "x", x, x_dims(g), g.dtype, g.layout);
  reference::check_tensor("conv_backward_filter", "dy", dy, y_dims(g), g.dtype, g.layout);
  reference::check_tensor("conv_backward_filter", "dw", dw, w_dims(g), g.dtype, g.layout);
  reference::dispatch_float(g.dtype, "conv_backward_filter",
                            [&](auto tag) { backward_filter<decltype(tag)>(g, x, dy, dw, accumulate); });
}

}  // namespace dlbench
