// Global average pooling over NHWC tensors (ResNet's head: [N, H, W, C] -> [N, C]), forward and backward.
//
// Why not cuDNN's: its average pooling took 0.042 ms forward and 0.071 ms backward for ResNet-50's head in
// FP16 at batch 256 (256 x 7 x 7 x 2048: 51 MB, ~13 us at the memory's speed each way;
// bench/results/pooling-kernels). A global average is a sum down each
// channel's H * W values: one thread per (image, vector of channels) walks the pixels with 16-byte loads
// (a warp reads whole rows of channels), sums in float in pixel order (deterministic) and divides once;
// the backward writes dy / (H * W) to every pixel.
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace dlbench::cuda {
namespace {

using namespace detail;

// y[n, c..c+W) = mean over the H * W pixels of image n.
// Indices in I (uint32_t where every element's fits: 64-bit division is several times slower).
template <typename T, typename I>
struct GlobalAvgForwardOp {
  const T* x;
  T* y;
  I pixels, channels;
  template <int W>
  __device__ void apply(int64_t e) const {
    // e runs over [n, c]: image n's first pixel, channel c.
    const I n = I(e) / channels, c = I(e) % channels;
    const T* in = x + int64_t(n) * pixels * channels + c;
    Acc<T> sum[W];
#pragma unroll
    for (int j = 0; j < W; ++j) sum[j] = 0;
    for (I p = 0; p < pixels; ++p) {
      const Vec<T, W> v = load_vec<W>(in + int64_t(p) * channels);
#pragma unroll
      for (int j = 0; j < W; ++j) sum[j] += widen(v.v[j]);
    }
    Vec<T, W> out;
#pragma unroll
    for (int j = 0; j < W; ++j) out.v[j] = narrow<T>(sum[j] / Acc<T>(pixels));
    store_vec<W>(y + e, out);
  }
};

// dx[n, p, c..c+W) = dy[n, c..c+W) / (H * W).
template <typename T, typename I>
struct GlobalAvgBackwardOp {
  const T* dy;
  T* dx;
  I pixels, channels;
  template <int W>
  __device__ void apply(int64_t e) const {
    // e runs over dx: [n, p, c].
    const I c = I(e) % channels, n = I(e) / (pixels * channels);
    const Vec<T, W> g = load_vec<W>(dy + int64_t(n) * channels + c);
    Vec<T, W> out;
#pragma unroll
    for (int j = 0; j < W; ++j) out.v[j] = narrow<T>(widen(g.v[j]) / Acc<T>(pixels));
    store_vec<W>(dx + e, out);
  }
};

void require_sizes(const char* op, int64_t n, int64_t pixels, int64_t channels) {
  DLB_KERNEL_REQUIRE(n > 0 && pixels > 0 && channels > 0, op, "sizes must be positive");
}

}  // namespace

void global_avg_pool_forward_nhwc(const void* x, void* y, DType dtype, int64_t n, int64_t pixels,
                                  int64_t channels, cudaStream_t stream) {
  const char* op = "global_avg_pool_forward_nhwc";
  require_sizes(op, n, pixels, channels);
  dispatch_float(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    const bool vector_ok = channels % V == 0 && aligned(x, 16) && aligned(y, 16);
    dispatch_index(n * pixels * channels, [&](auto index_tag) {
      using I = decltype(index_tag);
      launch_elementwise<V>(
          n * channels, vector_ok,
          GlobalAvgForwardOp<T, I>{static_cast<const T*>(x), static_cast<T*>(y), I(pixels), I(channels)},
          stream);
    });
  });
}

void global_avg_pool_backward_nhwc(const void* dy, void* dx, DType dtype, int64_t n, int64_t pixels,
                                   int64_t channels, cudaStream_t stream) {
  const char* op = "global_avg_pool_backward_nhwc";
  require_sizes(op, n, pixels, channels);
  dispatch_float(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    const bool vector_ok = channels % V == 0 && aligned(dy, 16) && aligned(dx, 16);
    dispatch_index(n * pixels * channels, [&](auto index_tag) {
      using I = decltype(index_tag);
      launch_elementwise<V>(
          n * pixels * channels, vector_ok,
          GlobalAvgBackwardOp<T, I>{static_cast<const T*>(dy), static_cast<T*>(dx), I(pixels), I(channels)},
          stream);
    });
  });
}

}  // namespace dlbench::cuda
