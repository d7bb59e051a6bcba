// The ImageNet stem's batch norm + ReLU and the max pool after it as one op over NHWC tensors
// (Backend::batchnorm_max_pool_*): kernels and host side.
#include "backend/cuda/batchnorm_nhwc_common.cuh"
#include "backend/cuda/max_pool_common.cuh"

namespace dlbench::cuda::bn {
namespace {

// ---- the ImageNet stem's batch norm + ReLU and the max pool after it (Backend::batchnorm_max_pool_*) ----
//
// relu(bn(x)) is read by the pool alone. The forward makes the statistics as the batch norm's own forward
// does, then one pass pools relu(bn(x)), normalising each input row once as it walks down strips of output
// rows (the same rounding as the apply pass and the same first maximum as the pool's scan, so the same
// values and positions as the composed ops), and writes only the pool's output and positions — flagged
// where the ReLU stopped the window's maximum.
// The backward's two passes walk the pool's 2 x 2 blocks of input pixels (StemBlock): each gathers its
// pixels' gradient from dy and the saved positions in place of reading the batch norm's output gradient
// (the flag is the ReLU's mask), and sums (pass 1) or writes dx (pass 3). Neither relu(bn(x)) nor its
// gradient is ever stored: on ResNet-50's FP16 stem at batch 256, forward 0.63 -> 0.46 ms and backward
// 0.75 -> 0.53 ms against the two layers (docs/PERFORMANCE.md). Vectors only.

// Forward: each output pixel's maximum over its window of relu(bn(x)), and where it is. A thread keeps its
// channels' coefficients (loaded once, on the same channel-tile x row-range grid as the batch norm's
// passes, a "row" here being a strip of kStripRows output pixels down one column) and walks down its strip
// separably: each input row's first maximum over the window's three columns, then the first of the
// window's three rows — the first maximum in scan order, as the pool takes it. A window's last row is the
// next one's first, so a strip normalises and loads each of its input rows once: 3 loads and transforms
// an output pixel and 4 comparisons, where the whole 3 x 3 window took 9 and 8 (that version: 0.45 ms
// for ResNet-50's FP16 stem at batch 256, and 1.0 ms as an elementwise op at 156 registers). 2 blocks a
// multiprocessor (128 registers).
constexpr int kPooledForwardBlocks = 2;
constexpr uint32_t kStripRows = 8;

// The ReLU's backward passes a gradient where y > 0; a window's maximum is y at its position, so the
// forward flags the position byte of a window whose maximum is not positive (0, or NaN) and the backward's
// gather, which compares whole bytes with a pixel's position (0-8), never hands that window's gradient
// on: the ReLU's mask without recomputing y.
constexpr uint8_t kReluStopped = 0x80;

// One input row of a window: the first maximum of relu(bn(x)) over the window's three columns, per
// channel (its value as rounded to T, and its column), or nothing (a padding row).
template <int W>
struct RowMaximum {
  float value[W];
  uint8_t column[W];
  bool present;
};

template <typename T, int W>
__global__ void __launch_bounds__(kReduceThreads, kPooledForwardBlocks)
    nhwc_pooled_forward_kernel(const T* __restrict__ x, T* __restrict__ y, uint8_t* __restrict__ argmax,
                               const float4* __restrict__ coefficients, pool::PoolIndex<uint32_t> g,
                               ChannelRanges strips, RowTiles t) {
  const ThreadPlace p = thread_place(t, strips.channels);
  if (!p.active) return;
  ForwardCoefficients k[W];
#pragma unroll
  for (int j = 0; j < W; ++j) k[j] = forward_coefficients(coefficients[p.channel + j]);
  const uint32_t segments = (g.out_h + kStripRows - 1) / kStripRows;
  // Input row r of image n under output column q: columns 2q - 1, 2q, 2q + 1.
  auto row_maximum = [&](uint32_t n, int64_t r, uint32_t q) {
    RowMaximum<W> m;
    m.present = r >= 0 && r < int64_t(g.h);
    if (!m.present) return m;
    Vec<T, W> v[3];
    bool inside[3];
#pragma unroll
    for (int s = 0; s < 3; ++s) {
      const int64_t column = int64_t(2 * q) - 1 + s;
      inside[s] = column >= 0 && column < int64_t(g.w);
      if (inside[s]) v[s] = load_vec<W>(x + ((int64_t(n) * g.h + r) * g.w + column) * g.c + p.channel);
    }
    bool first = true;
#pragma unroll
    for (int s = 0; s < 3; ++s) {
      if (!inside[s]) continue;
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const float value =
            widen(narrow<T>(activate<BatchNormFusion::relu>(bn_affine(widen(v[s].v[j]), k[j]))));
        if (first || pool::takes_over(value, m.value[j])) {
          m.value[j] = value;
          m.column[j] = static_cast<uint8_t>(s);
        }
      }
      first = false;
    }
    return m;
  };
  const uint32_t begin = blockIdx.y * strips.chunk, end = min(begin + strips.chunk, strips.values);
  for (uint32_t o = begin + p.lane; o < end; o += t.lanes) {
    // o runs over [n, segment, q].
    const uint32_t q = o % g.out_w, rest = o / g.out_w, segment = rest % segments, n = rest / segments;
    const uint32_t p_begin = segment * kStripRows, p_end = min(p_begin + kStripRows, g.out_h);
    RowMaximum<W> above = row_maximum(n, int64_t(2 * p_begin) - 1, q);  // window p's first row, 2p - 1
    for (uint32_t pp = p_begin; pp < p_end; ++pp) {
      float best[W];
      uint8_t where[W];
      bool first = true;
      auto take = [&](const RowMaximum<W>& m, int row) {
        if (!m.present) return;
#pragma unroll
        for (int j = 0; j < W; ++j) {
          if (first || pool::takes_over(m.value[j], best[j])) {
            best[j] = m.value[j];
            where[j] = static_cast<uint8_t>(row * 3 + m.column[j]);
          }
        }
        first = false;
      };
      take(above, 0);
      take(row_maximum(n, int64_t(2 * pp), q), 1);
      const RowMaximum<W> below = row_maximum(n, int64_t(2 * pp) + 1, q);
      take(below, 2);
      above = below;
      const uint32_t e = ((n * g.out_h + pp) * g.out_w + q) * g.c + p.channel;
      Vec<T, W> out;
#pragma unroll
      for (int j = 0; j < W; ++j) out.v[j] = narrow<T>(best[j]);  // exact: best was rounded to T
      store_vec<W>(y + e, out);
      if (argmax) {
        Vec<uint8_t, W> packed;
#pragma unroll
        for (int j = 0; j < W; ++j) packed.v[j] = where[j] | (best[j] > 0.f ? 0 : kReluStopped);
        store_vec<W>(argmax + e, packed);
      }
    }
  }
}

// A thread keeps its channels' means (pass 3: the backward's coefficients) besides a block's 12 vectors:
// 2 blocks a multiprocessor (128 registers).
constexpr int kPooledResidentBlocks = 2;

// Pass 1 (kWriteDx false): per (channel, split of the blocks), sum g and sum g * (x - mean); pass 3 (true):
// dx = k * g + a * (x - mean) + b. `blocks` cuts the N * out_h * out_w blocks into the splits. g is the
// gathered gradient itself: a window whose maximum the ReLU stopped has its position byte flagged
// (kReluStopped) and so matches no pixel; a pixel that is the maximum of two windows sums both in float
// (the composed ops round that sum to T first).
template <typename T, int W, bool kWriteDx>
__global__ void __launch_bounds__(kReduceThreads, kPooledResidentBlocks)
    nhwc_pooled_backward_kernel(const T* __restrict__ x, const uint8_t* __restrict__ argmax,
                                const T* __restrict__ dy, T* __restrict__ dx,
                                const float* __restrict__ saved_mean, const float4* __restrict__ coefficients,
                                pool::PoolIndex<uint32_t> g, ChannelRanges blocks, RowTiles t,
                                float2* __restrict__ partials) {
  __shared__ float2 merge_slots[kWriteDx ? 1 : kMergeSlots];
  const ThreadPlace p = thread_place(t, blocks.channels);
  // Pass 3's coefficients hold the saved mean (k.w); pass 1 reads it.
  float4 k[W];
  float mean[W], sum_g[W], sum_g_xc[W];
#pragma unroll
  for (int j = 0; j < W; ++j) {
    if constexpr (kWriteDx) {
      k[j] = p.active ? coefficients[p.channel + j] : make_float4(0.f, 0.f, 0.f, 0.f);
      mean[j] = k[j].w;
    } else {
      mean[j] = p.active ? saved_mean[p.channel + j] : 0.f;
    }
    sum_g[j] = sum_g_xc[j] = 0.f;
  }
  if (p.active) {
    const uint32_t begin = blockIdx.y * blocks.chunk, end = min(begin + blocks.chunk, blocks.values);
    for (uint32_t b = begin + p.lane; b < end; b += t.lanes) {
      const pool::StemBlock<W, T, uint32_t> block(int64_t(b) * blocks.channels + p.channel, argmax, dy, g);
      constexpr int kRow[4] = {0, 0, 1, 1}, kColumn[4] = {0, 1, 0, 1};
      bool inside[4];
      Vec<T, W> xs[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        inside[i] = block.inside(kRow[i], kColumn[i], g);
        if (inside[i]) xs[i] = load_vec<W>(x + block.offset(kRow[i], kColumn[i], g));
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (!inside[i]) continue;
        float gathered[W];
        block.gather(kRow[i], kColumn[i], gathered);
        Vec<T, W> out;
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float xc = widen(xs[i].v[j]) - mean[j];
          if constexpr (kWriteDx) {
            out.v[j] = narrow<T>(fmaf(k[j].x, gathered[j], fmaf(k[j].y, xc, k[j].z)));
          } else {
            sum_g[j] += gathered[j];
            sum_g_xc[j] += gathered[j] * xc;
          }
        }
        if constexpr (kWriteDx) store_vec<W>(dx + block.offset(kRow[i], kColumn[i], g), out);
      }
    }
  }
  if constexpr (!kWriteDx) write_backward_partials<W>(merge_slots, p, t, sum_g, sum_g_xc, blocks, partials);
}

}  // namespace

namespace {

pool::PoolIndex<uint32_t> pooled_index(const MaxPoolShape& s) { return pool::PoolIndex<uint32_t>(s); }

// `rows` work items (the forward's strips, the backward's 2 x 2 blocks of input pixels) cut into at most
// the launch's splits (its workspace holds that many partials a channel); `values` is their count.
ChannelRanges cut_rows(const OwnBatchNormLaunch& launch, int64_t rows) {
  ChannelRanges r = channel_ranges(launch);
  const int64_t splits = std::min<int64_t>(launch.splits, rows);
  r.chunk = static_cast<uint32_t>((rows + splits - 1) / splits);
  r.splits = static_cast<uint32_t>((rows + r.chunk - 1) / r.chunk);
  r.values = static_cast<uint32_t>(rows);
  return r;
}

// The backward's blocks: one per output pixel.
ChannelRanges pooled_blocks(const OwnBatchNormLaunch& launch, const MaxPoolShape& s) {
  return cut_rows(launch, s.n * s.out_h * s.out_w);
}

// The pooled forward over strips of kStripRows output pixels down each column.
template <typename T, int W>
void launch_pooled_forward(const OwnBatchNormLaunch& launch, const MaxPoolShape& s, const T* x, T* y,
                           uint8_t* argmax, const float4* coefficients, cudaStream_t stream) {
  const RowTiles t = row_tiles(launch.geometry, W);
  const int64_t segments = (s.out_h + kStripRows - 1) / kStripRows;
  const ChannelRanges strips = cut_rows(launch, s.n * segments * s.out_w);
  nhwc_pooled_forward_kernel<T, W><<<dim3(t.tiles, strips.splits), kReduceThreads, 0, stream>>>(
      x, y, argmax, coefficients, pooled_index(s), strips, t);
  DLB_KERNEL_LAUNCH_CHECK();
}

}  // namespace

bool nhwc_pooled_fits(const BatchNormGeometry& g, const MaxPoolShape& s) {
  const bool shapes = g.layout == Layout::nhwc && g.fusion == BatchNormFusion::relu &&
                      g.dtype != DType::f64 && g.batch == s.n && g.channels == s.c && g.h == s.h &&
                      g.w == s.w && pool::is_stem_pool(s);
  // 32-bit indices: every element offset below 2^32.
  return shapes && nhwc_vector(g.dtype, g.channels) > 1 &&
         g.batch * g.h * g.w * g.channels < int64_t(UINT32_MAX);
}

bool nhwc_pooled_forward_training(const OwnBatchNormSide& bn, const MaxPoolShape& s, void* y, uint8_t* argmax,
                                  void* workspace, cudaStream_t stream) {
  const OwnBatchNormLaunch& launch = *bn.launch;
  const BatchNormGeometry& g = launch.geometry;
  if (!nhwc_pooled_fits(g, s)) return false;
  bool ran = false;
  dispatch_float(g.dtype, kForward, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      constexpr int W = kVec16<T>;
      if (!aligned(bn.x, 16) || !aligned(y, 16) || !aligned(argmax, W)) return;
      launch_side_statistics<T, W>(bn, workspace, stream);
      launch_pooled_forward<T, W>(launch, s, static_cast<const T*>(bn.x), static_cast<T*>(y), argmax,
                                  static_cast<const float4*>(bn.held), stream);
      ran = true;
    }
  });
  return ran;
}

bool nhwc_pooled_forward_inference(const BatchNormGeometry& g, const void* x, const float* gamma,
                                   const float* beta, const float* running_mean, const float* running_var,
                                   const MaxPoolShape& s, void* y, float4* coefficients,
                                   cudaStream_t stream) {
  if (!nhwc_pooled_fits(g, s)) return false;
  bool ran = false;
  dispatch_float(g.dtype, kForward, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      constexpr int W = kVec16<T>;
      if (!aligned(x, 16) || !aligned(y, 16)) return;
      launch_inference_coefficients(g, gamma, beta, running_mean, running_var, coefficients, stream);
      launch_pooled_forward<T, W>(own_batchnorm_launch(g), s, static_cast<const T*>(x), static_cast<T*>(y),
                                  nullptr, coefficients, stream);
      ran = true;
    }
  });
  return ran;
}

bool nhwc_pooled_backward(const OwnBatchNormSide& bn, const MaxPoolShape& s, const void* dy,
                          const uint8_t* argmax, bool accumulate, void* workspace, cudaStream_t stream) {
  const OwnBatchNormLaunch& launch = *bn.launch;
  const BatchNormGeometry& g = launch.geometry;
  if (!nhwc_pooled_fits(g, s)) return false;
  bool ran = false;
  dispatch_float(g.dtype, kBackward, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      constexpr int W = kVec16<T>;
      if (!aligned(bn.x, 16) || !aligned(dy, 16) || !aligned(bn.dx, 16) || !aligned(argmax, W)) return;
      const RowTiles t = row_tiles(g, W);
      const ChannelRanges blocks = pooled_blocks(launch, s);
      const dim3 grid(t.tiles, blocks.splits);
      const WorkspaceParts parts = workspace_parts(launch, workspace);
      const auto *tx = static_cast<const T*>(bn.x), *tdy = static_cast<const T*>(dy);
      nhwc_pooled_backward_kernel<T, W, false><<<grid, kReduceThreads, 0, stream>>>(
          tx, argmax, tdy, nullptr, bn.saved_mean, nullptr, pooled_index(s), blocks, t, parts.partials);
      DLB_KERNEL_LAUNCH_CHECK();
      // The finalize divides by the batch norm's values, N * H * W, not the blocks'.
      ChannelRanges r = blocks;
      r.values = static_cast<uint32_t>(g.batch * g.h * g.w);
      launch_backward_finalize(parts.partials, r, bn.gamma, bn.saved_mean, bn.saved_inv_std, bn.dgamma,
                               bn.dbeta, accumulate, parts.coefficients, stream);
      nhwc_pooled_backward_kernel<T, W, true>
          <<<grid, kReduceThreads, 0, stream>>>(tx, argmax, tdy, static_cast<T*>(bn.dx), nullptr,
                                                parts.coefficients, pooled_index(s), blocks, t, nullptr);
      DLB_KERNEL_LAUNCH_CHECK();
      ran = true;
    }
  });
  return ran;
}

}  // namespace dlbench::cuda::bn
