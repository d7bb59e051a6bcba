// The own batch-norm kernels' launch sizing (batchnorm_launch.h).
#include "backend/cuda/batchnorm_launch.h"

#include <climits>

#include "backend/cuda/kernel_check.h"
#include "core/align.h"

namespace dlbench::cuda::bn {

OwnBatchNormLaunch size_launch(const BatchNormGeometry& g, int multiprocessors) {
  const char* op = "own_batchnorm_launch";
  DLB_KERNEL_REQUIRE(g.batch > 0 && g.channels > 0 && g.h > 0 && g.w > 0, op, "sizes must be positive");
  DLB_KERNEL_REQUIRE(g.layout == Layout::nchw || g.layout == Layout::nhwc, op,
                     "the layout is not NCHW or NHWC");
  const int64_t values = g.batch * g.h * g.w;
  // Index arithmetic inside a channel is 32-bit.
  DLB_KERNEL_REQUIRE(values <= int64_t(INT32_MAX) - 64, op, "more than 2^31 values per channel");
  DLB_KERNEL_REQUIRE(g.channels <= int64_t(INT32_MAX) / 4, op, "too many channels");
  OwnBatchNormLaunch launch;
  launch.geometry = g;
  const bool nhwc = g.layout == Layout::nhwc;
  const int64_t wanted_blocks =
      int64_t(std::max(multiprocessors, 1)) * (nhwc ? kNhwcBlocksPerSm : kBlocksPerSm);
  // The blocks one split of every channel takes, and the fewest values a split should hold: one unrolled
  // load of every thread of a block.
  int64_t blocks_per_split = g.channels, least_values = kReduceThreads * kReduceUnroll * kNchwVector;
  if (nhwc) {
    const RowTiles tiles = row_tiles(g, nhwc_vector(g.dtype, g.channels));
    blocks_per_split = tiles.tiles;
    least_values = int64_t(tiles.lanes) * kReduceUnroll;
  }
  const int64_t most_splits = std::max<int64_t>(1, values / least_values);
  const int64_t splits =
      std::clamp<int64_t>(ceil_div<int64_t>(wanted_blocks, blocks_per_split), 1, most_splits);
  // Ranges of whole NCHW vectors (in NHWC, where a value is a row, it costs nothing).
  launch.chunk = align_up<int64_t>(ceil_div<int64_t>(values, splits), kNchwVector);
  launch.splits = ceil_div<int64_t>(values, launch.chunk);
  return launch;
}

}  // namespace dlbench::cuda::bn
