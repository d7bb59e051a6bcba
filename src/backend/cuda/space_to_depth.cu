// Space-to-depth by 2 over NHWC tensors, and its transpose: a stride-2 convolution over C channels is a
// stride-1 convolution over the 2 x 2 blocks of its input, seen as 4C channels (conv/space_to_depth.cc says
// when and why). With offsets (off_h, off_w), block (i, j) of the result holds the input pixels (2i + bh -
// off_h, 2j + bw - off_w) for bh, bw in {0, 1}, channel (bh * 2 + bw) * C + c; pixels outside the input are
// zeros, and so are the channels past 4C up to the result's count (a whole tensor-core vector). The same
// layout serves filters ([K, R, S, C] is an NHWC tensor of K images of R x S pixels).
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace dlbench::cuda {
namespace {

using namespace detail;

template <typename I>
struct SpaceToDepthShape {
  I h, w, c;                 // the pixels' tensor (per image)
  I blocks_h, blocks_w, bc;  // the blocks' tensor: bc >= 4c channels
  I off_h, off_w;
};

// dst[n, i, j, k] of the blocks' tensor, element by element.
template <typename T, typename I>
struct SpaceToDepthOp {
  const T* src;
  T* dst;
  SpaceToDepthShape<I> s;
  template <int W>
  __device__ void apply(int64_t e) const {
    static_assert(W == 1, "space-to-depth runs element by element");
    I i = I(e);
    const I k = i % s.bc;
    i /= s.bc;
    const I j = i % s.blocks_w;
    i /= s.blocks_w;
    const I bi = i % s.blocks_h, n = i / s.blocks_h;
    T value = narrow<T>(Acc<T>(0));
    if (k < 4 * s.c) {
      const I c = k % s.c, b = k / s.c;  // b = bh * 2 + bw
      // Signed: the block may start in the padding before the first pixel.
      const int64_t h = 2 * int64_t(bi) + int64_t(b / 2) - int64_t(s.off_h);
      const int64_t w = 2 * int64_t(j) + int64_t(b % 2) - int64_t(s.off_w);
      if (h >= 0 && h < int64_t(s.h) && w >= 0 && w < int64_t(s.w))
        value = src[((n * s.h + I(h)) * s.w + I(w)) * s.c + c];
    }
    dst[e] = value;
  }
};

// dst[n, h, w, c] of the pixels' tensor (=|+=) its element in the blocks' tensor.
template <typename T, typename I>
struct DepthToSpaceOp {
  const T* src;
  T* dst;
  SpaceToDepthShape<I> s;
  bool accumulate;
  template <int W>
  __device__ void apply(int64_t e) const {
    static_assert(W == 1, "depth-to-space runs element by element");
    I i = I(e);
    const I c = i % s.c;
    i /= s.c;
    const I w = i % s.w;
    i /= s.w;
    const I h = i % s.h, n = i / s.h;
    const I hb = h + s.off_h, wb = w + s.off_w;
    const I k = ((hb % 2) * 2 + wb % 2) * s.c + c;
    Acc<T> value = widen(src[((n * s.blocks_h + hb / 2) * s.blocks_w + wb / 2) * s.bc + k]);
    if (accumulate) value += widen(dst[e]);
    dst[e] = narrow<T>(value);
  }
};

void require(const char* op, int64_t batch, int64_t h, int64_t w, int64_t c, int64_t blocks_h,
             int64_t blocks_w, int64_t block_channels, int64_t off_h, int64_t off_w) {
  DLB_KERNEL_REQUIRE(batch >= 0 && h > 0 && w > 0 && c > 0 && blocks_h > 0 && blocks_w > 0, op,
                     "sizes must be positive");
  DLB_KERNEL_REQUIRE(block_channels >= 4 * c, op, "the blocks need at least 4x the pixels' channels");
  DLB_KERNEL_REQUIRE(off_h >= 0 && off_w >= 0, op, "offsets must not be negative");
  // Every pixel lies in a block: the transpose reads each one's.
  DLB_KERNEL_REQUIRE((h - 1 + off_h) / 2 < blocks_h && (w - 1 + off_w) / 2 < blocks_w, op,
                     "the blocks do not cover every pixel");
}

}  // namespace

void space_to_depth2(const void* src, int64_t batch, int64_t h, int64_t w, int64_t c, int64_t off_h,
                     int64_t off_w, void* dst, int64_t blocks_h, int64_t blocks_w, int64_t block_channels,
                     DType dtype, cudaStream_t stream) {
  require("space_to_depth2", batch, h, w, c, blocks_h, blocks_w, block_channels, off_h, off_w);
  const int64_t n = batch * blocks_h * blocks_w * block_channels;
  if (n == 0) return;
  dispatch_float(dtype, "space_to_depth2", [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(std::max(n, batch * h * w * c), [&](auto index_tag) {
      using I = decltype(index_tag);
      const SpaceToDepthShape<I> s{I(h),     I(w),    I(c), I(blocks_h), I(blocks_w), I(block_channels),
                                   I(off_h), I(off_w)};
      launch_elementwise<1>(
          n, false, SpaceToDepthOp<T, I>{static_cast<const T*>(src), static_cast<T*>(dst), s}, stream);
    });
  });
}

void depth_to_space2(const void* src, int64_t blocks_h, int64_t blocks_w, int64_t block_channels,
                     int64_t batch, int64_t h, int64_t w, int64_t c, int64_t off_h, int64_t off_w, void* dst,
                     DType dtype, bool accumulate, cudaStream_t stream) {
  require("depth_to_space2", batch, h, w, c, blocks_h, blocks_w, block_channels, off_h, off_w);
  const int64_t n = batch * h * w * c;
  if (n == 0) return;
  dispatch_float(dtype, "depth_to_space2", [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(std::max(n, batch * blocks_h * blocks_w * block_channels), [&](auto index_tag) {
      using I = decltype(index_tag);
      const SpaceToDepthShape<I> s{I(h),     I(w),    I(c), I(blocks_h), I(blocks_w), I(block_channels),
                                   I(off_h), I(off_w)};
      launch_elementwise<1>(
          n, false, DepthToSpaceOp<T, I>{static_cast<const T*>(src), static_cast<T*>(dst), s, accumulate},
          stream);
    });
  });
}

}  // namespace dlbench::cuda
