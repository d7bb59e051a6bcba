// A stride-2 convolution as a stride-1 convolution over 2x2 blocks of its input (space-to-depth).
//
// Output pixel p of a stride-2 convolution reads input rows 2p + r - pad for kernel rows r < k. Shift the
// filter down by s rows (its row r at r + s, zeros elsewhere) and write r + s = 2a + b, b in {0, 1}: the
// row read is 2(p + a) + b - (pad + s), which is row b of block p + a when the input is cut into blocks of
// 2 rows starting pad + s rows before its first. So y[p] = sum over a of blocks[p + a] . filter_blocks[a]:
// a stride-1 convolution without padding, over ceil((k + s) / 2) block rows, with the filter cut into
// blocks the same way, starting s rows before its first. Any s gives the same convolution; dlbench takes
// s = pad % 2 (an even offset pad + s). Columns alike; a block holds (row, column, channel) as channel
// (b_h * 2 + b_w) * C + c, so the convolution sees 4C channels (padded up to `channel_multiple` with
// zeros). Pixels outside the input, and filter taps outside the filter, are zeros.
//
// The CUDA backend runs the stem this way where it times faster (cuda_conv.cc); the conversions are
// space_to_depth.cu. Backend-neutral so that the derivation is tested against the reference convolution
// without a GPU (tests/backend_reference/conv_blocks_test.cc).
#pragma once

#include <cstdint>
#include <optional>

#include "backend/backend.h"
#include "core/align.h"

namespace dlbench {

struct ConvBlocks {
  ConvGeometry inner;  // stride 1, no padding, over the blocks
  // Where the input's and the filter's blocks start, before their first row and column.
  int64_t x_off_h = 0, x_off_w = 0, w_off_h = 0, w_off_w = 0;
};

// The block form of `g`, or nothing where it has none: a stride other than 2, a kernel under 3x3, or an
// input pixel outside every block (the transpose gives each pixel its block's gradient, so every pixel
// must lie in one).
inline std::optional<ConvBlocks> conv_blocks(const ConvGeometry& g, int64_t channel_multiple) {
  if (g.stride_h != 2 || g.stride_w != 2 || g.kernel_h < 3 || g.kernel_w < 3 || channel_multiple <= 0)
    return std::nullopt;
  ConvBlocks b;
  b.w_off_h = g.pad_h % 2, b.w_off_w = g.pad_w % 2;
  b.x_off_h = g.pad_h + b.w_off_h, b.x_off_w = g.pad_w + b.w_off_w;
  ConvGeometry& in = b.inner;
  in = g;
  in.in_channels = align_up<int64_t>(4 * g.in_channels, channel_multiple);
  in.kernel_h = (g.kernel_h + b.w_off_h + 1) / 2, in.kernel_w = (g.kernel_w + b.w_off_w + 1) / 2;
  in.in_h = g.out_h() + in.kernel_h - 1, in.in_w = g.out_w() + in.kernel_w - 1;
  in.stride_h = in.stride_w = 1, in.pad_h = in.pad_w = 0;
  // Its gradients go to a buffer first (overwritten), then into the layer's.
  in.accumulates_input_grad = false;
  if ((g.in_h - 1 + b.x_off_h) / 2 >= in.in_h || (g.in_w - 1 + b.x_off_w) / 2 >= in.in_w) return std::nullopt;
  return b;
}

}  // namespace dlbench
