// How dlbench's own batch-norm kernels cut their work (batchnorm_own.cu, batchnorm_nchw.cu,
// batchnorm_nhwc.cu): block sizes, vectors, NHWC's channel tiles, the ReLU mask's size, and the launch's
// splits for a device of a given size. Plain C++ (no device code), so that the sizing is tested without a
// GPU.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/backend.h"
#include "backend/cuda/kernels.h"
#include "core/align.h"

namespace dlbench::cuda::bn {

constexpr int kReduceThreads = 256;  // block size of the partial reductions (and NHWC's apply passes)
constexpr int kReduceUnroll = 4;     // vectors a thread loads before it uses any (loads in flight)
constexpr int kBlocksPerSm = 4;      // what NCHW's splits aim for: ~4 blocks per multiprocessor
constexpr int kNhwcBlocksPerSm = 8;  // and NHWC's (batchnorm_nhwc.cu says why)

constexpr int kNchwVector = 4;    // NCHW: elements per vector access (rows of HW % 4 == 0)
constexpr int kMostColumns = 32;  // NHWC: the widest tile, in vectors

// NHWC: a block covers a tile of `columns` vectors of `vector` channels on `lanes` rows at once (thread t
// takes column t % columns of rows lane = t / columns, + lanes, ...); `tiles` tiles span the channels.
// A warp's loads are whole rows of the tile: contiguous memory.
struct RowTiles {
  uint32_t vector, columns, lanes, tiles;
};

// 16-byte accesses when the channels come in whole vectors of them, else element by element.
inline int nhwc_vector(DType dtype, int64_t channels) {
  const int w = static_cast<int>(16 / dtype_size(dtype));
  return channels % w == 0 ? w : 1;
}

// NHWC add_relu keeps, beside the forward's coefficients, which elements the ReLU passed: one byte per
// vector of nhwc_vector channels of a row (bit j for channel j of the vector), 1/16 of the activation's
// bytes, which the backward reads in place of y. Without whole vectors it reads y.
inline bool keeps_relu_mask(const BatchNormGeometry& g) {
  return g.layout == Layout::nhwc && g.fusion == BatchNormFusion::add_relu &&
         nhwc_vector(g.dtype, g.channels) > 1;
}
inline size_t relu_mask_bytes(const BatchNormGeometry& g) {
  return keeps_relu_mask(g)
             ? static_cast<size_t>(g.batch * g.h * g.w * (g.channels / nhwc_vector(g.dtype, g.channels)))
             : 0;
}

inline RowTiles row_tiles(const BatchNormGeometry& g, int vector) {
  const int64_t vectors = g.channels / vector;
  const auto columns = static_cast<uint32_t>(std::min<int64_t>(vectors, kMostColumns));
  return {static_cast<uint32_t>(vector), columns, kReduceThreads / columns,
          static_cast<uint32_t>(ceil_div<int64_t>(vectors, columns))};
}

// The launch for `g` on a device of `multiprocessors` multiprocessors: `splits` ranges of `chunk` values
// (a multiple of kNchwVector) per channel, enough for the blocks wanted (kBlocksPerSm or kNhwcBlocksPerSm
// a multiprocessor) but none shorter than one unrolled load of every thread of a block, and none empty.
// Throws on shapes the kernels do not take (more than 2^31 values a channel).
OwnBatchNormLaunch size_launch(const BatchNormGeometry& g, int multiprocessors);

}  // namespace dlbench::cuda::bn
