// How the own batch-norm kernels cut their work (batchnorm_launch.h), without a GPU: for ResNet-50's
// batch-norm shapes and odd ones, both layouts, every dtype and devices of 1 to 132 multiprocessors, the
// splits cover each channel's values exactly once with none empty, in whole NCHW vectors, within the grid's
// limits, and NHWC's tiles cover the channels.
#include <gtest/gtest.h>

#ifndef DLBENCH_WITH_CUDA
TEST(CudaKernels, Skipped) { GTEST_SKIP() << "no CUDA GPU: dlbench was built without CUDA"; }
#else

#include <fmt/format.h>

#include <vector>

#include "backend/cuda/batchnorm_launch.h"
#include "core/status.h"

namespace dlbench::cuda::bn {
namespace {

struct Shape {
  int64_t n, c, h, w;
};

// ResNet-50's batch norms at batch 256 and 1, and shapes that leave remainders everywhere.
const std::vector<Shape> kShapes = {{256, 64, 112, 112}, {256, 256, 56, 56}, {256, 128, 28, 28},
                                    {256, 1024, 14, 14}, {256, 2048, 7, 7},  {1, 64, 112, 112},
                                    {1, 2048, 7, 7},     {2, 3, 5, 7},       {3, 20, 1, 1},
                                    {4, 520, 3, 5},      {13, 4, 36, 36},    {2, 2, 1, 1}};

BatchNormGeometry geometry(const Shape& s, Layout layout, DType dtype) {
  BatchNormGeometry g;
  g.batch = s.n, g.channels = s.c, g.h = s.h, g.w = s.w, g.layout = layout, g.dtype = dtype;
  return g;
}

TEST(BatchNormLaunch, SplitsCoverEveryValueOnceWithinTheGridLimits) {
  for (const Shape& s : kShapes)
    for (Layout layout : {Layout::nchw, Layout::nhwc})
      for (DType dtype : {DType::f32, DType::f16, DType::bf16})
        for (int multiprocessors : {1, 16, 132}) {
          const BatchNormGeometry g = geometry(s, layout, dtype);
          SCOPED_TRACE(fmt::format("{}x{}x{}x{} {} {} on {} SMs", s.n, s.c, s.h, s.w, layout_name(layout),
                                   dtype_name(dtype), multiprocessors));
          const OwnBatchNormLaunch launch = size_launch(g, multiprocessors);
          const int64_t values = s.n * s.h * s.w;
          EXPECT_GE(launch.splits, 1);
          EXPECT_EQ(launch.chunk % kNchwVector, 0);
          EXPECT_GE(launch.splits * launch.chunk, values);        // every value in a split
          EXPECT_LT((launch.splits - 1) * launch.chunk, values);  // the last split is not empty
          const int64_t blocks_per_split =
              layout == Layout::nchw ? s.c : row_tiles(g, nhwc_vector(dtype, s.c)).tiles;
          // The splits aim at the blocks wanted and never beyond them by more than a split's worth.
          const int64_t wanted =
              int64_t(multiprocessors) * (layout == Layout::nchw ? kBlocksPerSm : kNhwcBlocksPerSm);
          EXPECT_LE((launch.splits - 1) * blocks_per_split, wanted);
          EXPECT_LE(launch.splits, 65535);  // NHWC puts the splits in gridDim.y
        }
}

TEST(BatchNormLaunch, NhwcTilesCoverTheChannelsInWholeWarpsOfRows) {
  for (const Shape& s : kShapes)
    for (DType dtype : {DType::f32, DType::f16, DType::bf16})
      for (int vector : {nhwc_vector(dtype, s.c), 1}) {
        SCOPED_TRACE(fmt::format("{} channels, {} vector {}", s.c, dtype_name(dtype), vector));
        const RowTiles t = row_tiles(geometry(s, Layout::nhwc, dtype), vector);
        const int64_t vectors = s.c / vector;
        EXPECT_EQ(vectors * vector, s.c);  // the vector divides the channels
        EXPECT_GE(int64_t(t.tiles) * t.columns, vectors);
        EXPECT_LT(int64_t(t.tiles - 1) * t.columns, vectors);
        EXPECT_LE(t.columns, uint32_t(kMostColumns));
        EXPECT_LE(t.columns * t.lanes, uint32_t(kReduceThreads));
        EXPECT_GT(t.columns * t.lanes, uint32_t(kReduceThreads) / 2);  // at most half a block idle
      }
}

TEST(BatchNormLaunch, TheReluMaskIsOneBytePerVectorOfARow) {
  BatchNormGeometry g = geometry({256, 256, 56, 56}, Layout::nhwc, DType::f16);
  g.fusion = BatchNormFusion::add_relu;
  EXPECT_EQ(relu_mask_bytes(g), size_t(256) * 56 * 56 * 256 / 8);
  g.dtype = DType::f32;
  EXPECT_EQ(relu_mask_bytes(g), size_t(256) * 56 * 56 * 256 / 4);
  g.channels = 20;  // no whole 16-byte vectors in f16: no mask, the backward reads y
  g.dtype = DType::f16;
  EXPECT_EQ(relu_mask_bytes(g), 0u);
  g.channels = 256, g.fusion = BatchNormFusion::relu;  // a plain ReLU recomputes y from x
  EXPECT_EQ(relu_mask_bytes(g), 0u);
  g.fusion = BatchNormFusion::add_relu, g.layout = Layout::nchw;
  EXPECT_EQ(relu_mask_bytes(g), 0u);
}

TEST(BatchNormLaunch, ShapesTheKernelsDoNotTakeAreRefused) {
  EXPECT_THROW(size_launch(geometry({0, 64, 7, 7}, Layout::nhwc, DType::f16), 132), Error);
  // 2^31 values a channel: the kernels' in-channel indices are 32-bit.
  EXPECT_THROW(size_launch(geometry({1 << 16, 1, 1 << 8, 1 << 7}, Layout::nhwc, DType::f16), 132), Error);
}

}  // namespace
}  // namespace dlbench::cuda::bn

#endif
