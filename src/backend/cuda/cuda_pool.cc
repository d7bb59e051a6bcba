// Pooling. Max pooling of NHWC tensors runs dlbench's own kernels (max_pool.cu: cuDNN's backward was
// ten times slower than the bytes it moves), which save each output's argmax position in the window, one
// byte per output element (saved_bytes()); so does global average pooling of NHWC tensors (avg_pool.cu:
// cuDNN's took 3-5 times its bytes' time for ResNet's head). The rest is cuDNN: cudnnPoolingForward /
// cudnnPoolingBackward, max pooling CUDNN_POOLING_MAX_DETERMINISTIC (its backward recomputes the argmax from
// x and y, nothing saved), average pooling CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING (the contract's
// divisor). NaN propagates in both, so that check_finite sees it downstream.
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/kernels.h"

namespace dlbench {
namespace cuda {
namespace {

MaxPoolShape max_pool_shape(const PoolGeometry& g) {
  return {g.batch,    g.channels, g.in_h,     g.in_w,     g.out_h(), g.out_w(),
          g.kernel_h, g.kernel_w, g.stride_h, g.stride_w, g.pad_h,   g.pad_w};
}

class CudaPoolPlan final : public PoolPlan {
 public:
  explicit CudaPoolPlan(const PoolGeometry& g)
      : PoolPlan(g),
        own_max(g.kind == PoolKind::max && g.layout == Layout::nhwc &&
                max_pool_positions_fit(max_pool_shape(g))),
        own_global_average(g.kind == PoolKind::average && g.layout == Layout::nhwc && g.pad_h == 0 &&
                           g.pad_w == 0 && g.kernel_h == g.in_h && g.kernel_w == g.in_w) {}
  // One argmax byte per output element for the own kernels.
  size_t saved_bytes() const override {
    return own_max
               ? static_cast<size_t>(geometry.batch * geometry.channels * geometry.out_h() * geometry.out_w())
               : 0;
  }
  const bool own_max;             // max_pool.cu's kernels
  const bool own_global_average;  // avg_pool.cu's (else cuDNN)
  TensorDescriptor x_desc, y_desc;
  PoolingDescriptor pool_desc;
};

const CudaPoolPlan& as_cuda_plan(const PoolPlan& plan) {
  auto* p = dynamic_cast<const CudaPoolPlan*>(&plan);
  DLB_CHECK(p != nullptr, "pooling plan was not made by the cuda backend");
  return *p;
}

void check_geometry(const PoolGeometry& g) {
  DLB_CHECK(g.batch > 0 && g.channels > 0 && g.in_h > 0 && g.in_w > 0,
            "pool: sizes must be positive ({}x{}x{}x{})", g.batch, g.channels, g.in_h, g.in_w);
  DLB_CHECK(g.kernel_h > 0 && g.kernel_w > 0 && g.stride_h > 0 && g.stride_w > 0,
            "pool: kernel {}x{} and stride {}x{} must be positive", g.kernel_h, g.kernel_w, g.stride_h,
            g.stride_w);
  DLB_CHECK(g.pad_h >= 0 && g.pad_w >= 0 && g.pad_h < g.kernel_h && g.pad_w < g.kernel_w,
            "pool: pad {}x{} must be in [0, kernel {}x{})", g.pad_h, g.pad_w, g.kernel_h, g.kernel_w);
  DLB_CHECK(g.in_h + 2 * g.pad_h >= g.kernel_h && g.in_w + 2 * g.pad_w >= g.kernel_w,
            "pool: kernel {}x{} is larger than the padded input {}x{}", g.kernel_h, g.kernel_w,
            g.in_h + 2 * g.pad_h, g.in_w + 2 * g.pad_w);
  DLB_CHECK(is_float_dtype(g.dtype), "pool: dtype {} is not a float dtype", dtype_name(g.dtype));
}

std::vector<int64_t> x_dims(const PoolGeometry& g) { return {g.batch, g.channels, g.in_h, g.in_w}; }
std::vector<int64_t> y_dims(const PoolGeometry& g) { return {g.batch, g.channels, g.out_h(), g.out_w()}; }

}  // namespace

std::unique_ptr<PoolPlan> CudaBackend::plan_pool(const PoolGeometry& g) {
  check_geometry(g);
  activate();
  auto plan = std::make_unique<CudaPoolPlan>(g);
  set_tensor_4d(plan->x_desc, g.dtype, g.layout, g.batch, g.channels, g.in_h, g.in_w);
  set_tensor_4d(plan->y_desc, g.dtype, g.layout, g.batch, g.channels, g.out_h(), g.out_w());
  const cudnnPoolingMode_t mode =
      g.kind == PoolKind::max ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  CUDNN_CHECK(cudnnSetPooling2dDescriptor(
      plan->pool_desc, mode, CUDNN_PROPAGATE_NAN, checked_int(g.kernel_h, "kernel_h"),
      checked_int(g.kernel_w, "kernel_w"), checked_int(g.pad_h, "pad_h"), checked_int(g.pad_w, "pad_w"),
      checked_int(g.stride_h, "stride_h"), checked_int(g.stride_w, "stride_w")));
  int n = 0, c = 0, h = 0, w = 0;
  CUDNN_CHECK(cudnnGetPooling2dForwardOutputDim(plan->pool_desc, plan->x_desc, &n, &c, &h, &w));
  DLB_CHECK(n == g.batch && c == g.channels && h == g.out_h() && w == g.out_w(),
            "pool: cuDNN's output {}x{}x{}x{} differs from the geometry's {}x{}x{}x{}", n, c, h, w, g.batch,
            g.channels, g.out_h(), g.out_w());
  return plan;
}

void CudaBackend::pool_forward(const PoolPlan& plan, const Tensor& x, Tensor& y, void* saved) {
  const auto& p = as_cuda_plan(plan);
  const PoolGeometry& g = p.geometry;
  check_activation("pool_forward", "x", x, x_dims(g), g.dtype, g.layout);
  check_activation("pool_forward", "y", y, y_dims(g), g.dtype, g.layout);
  activate();
  if (p.own_max) {
    max_pool_forward_nhwc(x.data(), y.data(), static_cast<uint8_t*>(saved), g.dtype, max_pool_shape(g),
                          stream_);
    return;
  }
  if (p.own_global_average) {
    global_avg_pool_forward_nhwc(x.data(), y.data(), g.dtype, g.batch, g.in_h * g.in_w, g.channels, stream_);
    return;
  }
  const Scaling s(g.dtype, 1.0, 0.0);
  CUDNN_CHECK(
      cudnnPoolingForward(cudnn_, p.pool_desc, s.alpha(), p.x_desc, x.data(), s.beta(), p.y_desc, y.data()));
}

void CudaBackend::pool_backward(const PoolPlan& plan, const Tensor& x, const Tensor& y, const Tensor& dy,
                                const void* saved, Tensor& dx) {
  const auto& p = as_cuda_plan(plan);
  const PoolGeometry& g = p.geometry;
  const char* op = "pool_backward";
  check_activation(op, "x", x, x_dims(g), g.dtype, g.layout);
  check_activation(op, "y", y, y_dims(g), g.dtype, g.layout);
  check_activation(op, "dy", dy, y_dims(g), g.dtype, g.layout);
  check_activation(op, "dx", dx, x_dims(g), g.dtype, g.layout);
  activate();
  if (p.own_max) {
    max_pool_backward_nhwc(x.data(), static_cast<const uint8_t*>(saved), dy.data(), dx.data(), g.dtype,
                           max_pool_shape(g), stream_);
    return;
  }
  if (p.own_global_average) {
    global_avg_pool_backward_nhwc(dy.data(), dx.data(), g.dtype, g.batch, g.in_h * g.in_w, g.channels,
                                  stream_);
    return;
  }
  const Scaling s(g.dtype, 1.0, 0.0);
  CUDNN_CHECK(cudnnPoolingBackward(cudnn_, p.pool_desc, s.alpha(), p.y_desc, y.data(), p.y_desc, dy.data(),
                                   p.x_desc, x.data(), s.beta(), p.x_desc, dx.data()));
}

}  // namespace cuda
}  // namespace dlbench
