// The block form of a stride-2 convolution (backend/conv_blocks.h) against the convolution itself, on the
// reference backend in f64: the same output, filter gradient and input gradient, for odd and even padding,
// odd and even sizes, square and non-square kernels. The CUDA backend's conversion kernels implement the
// same mapping (space_to_depth.cu; tested against the reference on a GPU in cuda_conv_test.cc).
#include "backend/conv_blocks.h"

#include <gtest/gtest.h>

#include <optional>
#include <ostream>

#include "backend/reference/reference_backend.h"
#include "reference_test_util.h"

namespace dlbench {
namespace {

using testing::at;
using testing::logical_relative_error;
using testing::random_buffer;
using testing::set_element;
using testing::zeros;

// Pixel (b_h, b_w) of block (i, j) of `src` [N, C, H, W]: pixel (2i + b_h - off_h, 2j + b_w - off_w), as
// channel (b_h * 2 + b_w) * C + c of the [N, channels, blocks_h, blocks_w] result; zeros outside.
HostBuffer to_blocks(const Tensor& src, int64_t off_h, int64_t off_w, int64_t blocks_h, int64_t blocks_w,
                     int64_t channels) {
  HostBuffer dst = zeros({src.n(), channels, blocks_h, blocks_w}, DType::f64);
  for (int64_t n = 0; n < src.n(); ++n)
    for (int64_t i = 0; i < blocks_h; ++i)
      for (int64_t j = 0; j < blocks_w; ++j)
        for (int64_t b = 0; b < 4; ++b)
          for (int64_t c = 0; c < src.c(); ++c) {
            const int64_t h = 2 * i + b / 2 - off_h, w = 2 * j + b % 2 - off_w;
            if (h < 0 || h >= src.h() || w < 0 || w >= src.w()) continue;
            set_element(dst.tensor(), dst.tensor().offset(n, b * src.c() + c, i, j), at(src, n, c, h, w));
          }
  return dst;
}

// The transpose: each pixel of a [N, C, H, W] tensor from its block.
HostBuffer from_blocks(const Tensor& blocks, std::vector<int64_t> dims, int64_t off_h, int64_t off_w) {
  HostBuffer dst = zeros(dims, DType::f64);
  const int64_t channels = dims[1];
  for (int64_t n = 0; n < dims[0]; ++n)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t h = 0; h < dims[2]; ++h)
        for (int64_t w = 0; w < dims[3]; ++w) {
          const int64_t hb = h + off_h, wb = w + off_w;
          set_element(dst.tensor(), dst.tensor().offset(n, c, h, w),
                      at(blocks, n, ((hb % 2) * 2 + wb % 2) * channels + c, hb / 2, wb / 2));
        }
  return dst;
}

struct BlockCase {
  const char* name;
  int64_t n, c, h, w, k, r, s, pad_h, pad_w, multiple;
};
void PrintTo(const BlockCase& bc, std::ostream* os) { *os << bc.name; }

class ConvBlocksTest : public ::testing::TestWithParam<BlockCase> {};

TEST_P(ConvBlocksTest, MatchesTheStrideTwoConvolution) {
  const BlockCase bc = GetParam();
  ConvGeometry g;
  g.batch = bc.n, g.in_channels = bc.c, g.in_h = bc.h, g.in_w = bc.w, g.out_channels = bc.k;
  g.kernel_h = bc.r, g.kernel_w = bc.s, g.stride_h = g.stride_w = 2, g.pad_h = bc.pad_h, g.pad_w = bc.pad_w;
  g.dtype = DType::f64;
  const std::optional<ConvBlocks> blocks = conv_blocks(g, bc.multiple);
  ASSERT_TRUE(blocks.has_value());
  const ConvGeometry& in = blocks->inner;
  EXPECT_EQ(in.stride_h, 1);
  EXPECT_EQ(in.pad_h, 0);
  EXPECT_EQ(in.in_channels % bc.multiple, 0);
  EXPECT_GE(in.in_channels, 4 * g.in_channels);
  ASSERT_EQ(in.out_h(), g.out_h());
  ASSERT_EQ(in.out_w(), g.out_w());

  auto backend = make_reference_backend();
  HostBuffer x = random_buffer({g.batch, g.in_channels, g.in_h, g.in_w}, DType::f64, Layout::nchw, 11),
             w = random_buffer({g.out_channels, g.in_channels, g.kernel_h, g.kernel_w}, DType::f64,
                               Layout::nchw, 12),
             dy =
                 random_buffer({g.batch, g.out_channels, g.out_h(), g.out_w()}, DType::f64, Layout::nchw, 13);
  HostBuffer y = zeros(dy.tensor().dims(), DType::f64), dx = zeros(x.tensor().dims(), DType::f64),
             dw = zeros(w.tensor().dims(), DType::f64);
  auto plan = backend->plan_conv(g);
  backend->conv_forward(*plan, x.tensor(), w.tensor(), y.tensor(), nullptr);
  backend->conv_backward_filter(*plan, x.tensor(), dy.tensor(), dw.tensor(), Accumulate::overwrite, nullptr);
  backend->conv_backward_data(*plan, dy.tensor(), w.tensor(), dx.tensor(), Accumulate::overwrite, nullptr);

  HostBuffer xb = to_blocks(x.tensor(), blocks->x_off_h, blocks->x_off_w, in.in_h, in.in_w, in.in_channels),
             wb = to_blocks(w.tensor(), blocks->w_off_h, blocks->w_off_w, in.kernel_h, in.kernel_w,
                            in.in_channels);
  HostBuffer yb = zeros(dy.tensor().dims(), DType::f64),
             dxb = zeros({in.batch, in.in_channels, in.in_h, in.in_w}, DType::f64),
             dwb = zeros({in.out_channels, in.in_channels, in.kernel_h, in.kernel_w}, DType::f64);
  auto inner = backend->plan_conv(in);
  backend->conv_forward(*inner, xb.tensor(), wb.tensor(), yb.tensor(), nullptr);
  backend->conv_backward_filter(*inner, xb.tensor(), dy.tensor(), dwb.tensor(), Accumulate::overwrite,
                                nullptr);
  backend->conv_backward_data(*inner, dy.tensor(), wb.tensor(), dxb.tensor(), Accumulate::overwrite, nullptr);

  EXPECT_LT(logical_relative_error(yb.tensor(), y.tensor()), 1e-12);
  const HostBuffer dw_back = from_blocks(dwb.tensor(), w.tensor().dims(), blocks->w_off_h, blocks->w_off_w);
  EXPECT_LT(logical_relative_error(dw_back.tensor(), dw.tensor()), 1e-12);
  const HostBuffer dx_back = from_blocks(dxb.tensor(), x.tensor().dims(), blocks->x_off_h, blocks->x_off_w);
  EXPECT_LT(logical_relative_error(dx_back.tensor(), dx.tensor()), 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvBlocksTest,
                         ::testing::Values(BlockCase{"stem_7x7_pad3", 2, 3, 17, 17, 8, 7, 7, 3, 3, 4},
                                           BlockCase{"stem_fp16_channels", 1, 3, 16, 18, 4, 7, 7, 3, 3, 8},
                                           BlockCase{"3x3_pad1_even", 2, 3, 12, 10, 5, 3, 3, 1, 1, 4},
                                           BlockCase{"5x5_pad2_odd", 2, 2, 11, 9, 3, 5, 5, 2, 2, 8},
                                           BlockCase{"3x5_mixed_pad", 1, 3, 9, 12, 4, 3, 5, 0, 1, 4},
                                           BlockCase{"4x4_pad1_even_kernel", 1, 2, 10, 10, 3, 4, 4, 1, 1, 4},
                                           BlockCase{"3x3_pad0_unread_row", 1, 3, 8, 8, 2, 3, 3, 0, 0, 4}),
                         [](const ::testing::TestParamInfo<BlockCase>& info) {
                           return std::string(info.param.name);
                         });

// No block form: stride 1, a 1x1 kernel, an input row no block holds.
TEST(ConvBlocks, OnlyStrideTwoKernelsThatCoverTheInput) {
  ConvGeometry g;
  g.batch = 1, g.in_channels = 3, g.in_h = g.in_w = 16, g.out_channels = 4, g.kernel_h = g.kernel_w = 3;
  g.stride_h = g.stride_w = 1, g.pad_h = g.pad_w = 1;
  EXPECT_FALSE(conv_blocks(g, 4).has_value());
  g.stride_h = g.stride_w = 2;
  EXPECT_TRUE(conv_blocks(g, 4).has_value());
  ConvGeometry one = g;
  one.kernel_h = one.kernel_w = 1, one.pad_h = one.pad_w = 0;
  EXPECT_FALSE(conv_blocks(one, 4).has_value());
  // 4x4 stride 2 without padding on 9 rows: the 3 output rows read input rows 0..7, and row 8 lies in no
  // block of the 2 block rows the kernel spans past the last output.
  ConvGeometry uncovered = g;
  uncovered.in_h = uncovered.in_w = 9, uncovered.kernel_h = uncovered.kernel_w = 4;
  uncovered.pad_h = uncovered.pad_w = 0;
  EXPECT_FALSE(conv_blocks(uncovered, 4).has_value());
  // 3x3 on 8 rows: row 7 is read by no window but lies in a block (its gradient is the zero taps').
  uncovered.in_h = uncovered.in_w = 8, uncovered.kernel_h = uncovered.kernel_w = 3;
  EXPECT_TRUE(conv_blocks(uncovered, 4).has_value());
}

}  // namespace
}  // namespace dlbench
