// What the NHWC batch-norm kernels share (batchnorm_nhwc.cu, batchnorm_nhwc_folded.cu,
// batchnorm_nhwc_pooled.cu): where a thread works, the row walk, the statistics pass, the ReLU mask's
// helpers and the host side's dispatch. batchnorm_own.cu has the entry points and why these kernels exist;
// batchnorm_common.cuh what the layouts share.
//
// The tensor is M = N * H * W rows of C channels. Every pass runs on the same grid: blockIdx.x picks a
// tile of channels, blockIdx.y a range of `chunk` rows (a split). Thread t of a block always handles the
// same vector of channels (column t % columns of its tile) and walks rows lane, lane + lanes, ... of the
// range (lane = t / columns), so that what depends on the channel — the mean, the scale, the
// backward's coefficients — is loaded once per thread, and a warp's loads cover whole rows of the tile.
//
// The reductions keep one Welford triple (forward) or two sums (backward) per channel of the thread's
// vector; a block merges its lanes in shared memory in a fixed order, one thread per channel, and writes
// one partial per (channel, split). add_relu's forward also writes a bit mask of where the ReLU passed,
// which its backward reads in y's place (keeps_relu_mask).
#pragma once

#include "backend/cuda/batchnorm_common.cuh"

namespace dlbench::cuda::bn {
namespace {

// Where a thread works: its channels [channel, channel + W) and its lane, and whether it has any.
struct ThreadPlace {
  uint32_t column, lane, channel;
  bool active;
};

__device__ __forceinline__ ThreadPlace thread_place(const RowTiles& t, uint32_t channels) {
  ThreadPlace p;
  p.column = threadIdx.x % t.columns;
  p.lane = threadIdx.x / t.columns;
  p.channel = (blockIdx.x * t.columns + p.column) * t.vector;
  p.active = p.lane < t.lanes && p.channel < channels;
  return p;
}

// Visits the rows of this block's range a thread takes, R in flight (visit_in_flight).
template <int R, typename Load, typename Use>
__device__ __forceinline__ void for_each_row(const ChannelRanges& r, const RowTiles& t, const ThreadPlace& p,
                                             Load&& load, Use&& use) {
  const uint32_t begin = blockIdx.y * r.chunk, end = min(begin + r.chunk, r.values);
  const uint32_t step = t.lanes;
  auto offset = [&](uint32_t row) { return int64_t(row) * r.channels + p.channel; };
  visit_in_flight<R>(begin + p.lane, end, step, offset, load, use);
}

// Blocks each multiprocessor keeps resident (64 registers a thread at most): the grid is about two waves
// of them (kNhwcBlocksPerSm), so that a multiprocessor a collective holds takes fewer blocks and the
// others more, instead of all waiting for its last one.
constexpr int kResidentBlocks = 4;

// Rows a thread loads before it uses any: kReduceUnroll where a pass reads one tensor. The backward and
// the add_relu forward read two or three, and four rows of those vectors spill at 64 registers: two.
template <int W>
constexpr int kRowsReadingMore = W > 1 ? 2 : kReduceUnroll;

// The ReLU backward keeps the forward's coefficients too (and its last pass the backward's): it spills at
// 64 registers, so 3 blocks a multiprocessor (85) there.
template <int W, BatchNormFusion F>
constexpr int kBackwardResidentBlocks = F == BatchNormFusion::relu ? 3 : kResidentBlocks;

// The widest vector: 16 bytes of 16-bit elements.
constexpr int kMostVector = 8;
// Shared memory of a block's merge: one slot per (lane, channel of the tile).
constexpr int kMergeSlots = kReduceThreads * kMostVector;

// ---- forward ----

// Pass 1: the (mean, M2) of each (channel, split).
template <typename T, int W>
__global__ void __launch_bounds__(kReduceThreads, kResidentBlocks)
    nhwc_stats_partial_kernel(const T* __restrict__ x, ChannelRanges r, RowTiles t,
                              float2* __restrict__ partials) {
  __shared__ float2 merge_slots[kMergeSlots];  // (mean, M2)
  __shared__ float lane_counts[kReduceThreads];
  const ThreadPlace p = thread_place(t, r.channels);
  // Every channel of a thread has seen the same rows: one count.
  float count = 0.f, mean[W], m2[W];
#pragma unroll
  for (int j = 0; j < W; ++j) mean[j] = m2[j] = 0.f;
  if (p.active) {
    for_each_row<kReduceUnroll>(
        r, t, p, [&](int64_t at) { return load_vec<W>(x + at); },
        [&]<int U>(const Vec<T, W>(&in)[U], const int64_t(&)[U]) {
#pragma unroll
          for (int j = 0; j < W; ++j) {
            float values[U];
#pragma unroll
            for (int u = 0; u < U; ++u) values[u] = widen(in[u].v[j]);
            const Welford group = group_of(values);
            float seen = count;
            chan_merge(seen, mean[j], m2[j], group.count, group.mean, group.m2);
          }
          count += float(U);
        });
  }
  const uint32_t tile_channels = t.columns * W;
  if (p.lane < t.lanes) {
#pragma unroll
    for (int j = 0; j < W; ++j)
      merge_slots[p.lane * tile_channels + p.column * W + j] = make_float2(mean[j], m2[j]);
    if (p.column == 0) lane_counts[p.lane] = count;
  }
  __syncthreads();
  // One thread per channel of the tile merges the lanes in order.
  const uint32_t k = threadIdx.x, channel = blockIdx.x * tile_channels + k;
  if (k >= tile_channels || channel >= r.channels) return;
  Welford acc{0.f, 0.f, 0.f};
  for (uint32_t lane = 0; lane < t.lanes; ++lane) {
    const float2 slot = merge_slots[lane * tile_channels + k];
    merge(acc, Welford{lane_counts[lane], slot.x, slot.y});
  }
  partials[int64_t(channel) * r.splits + blockIdx.y] = make_float2(acc.mean, acc.m2);
}

// The coefficient of each channel of the thread's vector (inactive threads read nothing).
template <int W>
__device__ __forceinline__ void load_coefficients(const float4* coefficients, const ThreadPlace& p,
                                                  float4 (&k)[W]) {
#pragma unroll
  for (int j = 0; j < W; ++j) k[j] = p.active ? coefficients[p.channel + j] : make_float4(0.f, 0.f, 0.f, 0.f);
}

// Whether a pass over vectors of W reads or writes the ReLU mask (keeps_relu_mask) in y's place.
template <int W, BatchNormFusion F>
constexpr bool kUsesMask = F == BatchNormFusion::add_relu&& W > 1;

// The mask's byte for the vector at element offset `at`, and its bits from the output vector.
template <int W>
__device__ __forceinline__ int64_t mask_index(int64_t at) {
  return at / W;
}
template <typename T, int W>
__device__ __forceinline__ uint8_t positive_bits(const Vec<T, W>& out) {
  uint32_t bits = 0;
#pragma unroll
  for (int j = 0; j < W; ++j) bits |= (widen(out.v[j]) > 0.f ? 1u : 0u) << j;
  return static_cast<uint8_t>(bits);
}

// The end of a backward reduction: the block merges its lanes' (sum g, sum g * (x - mean)) in shared memory
// in a fixed order, one thread per channel of the tile, and writes one partial per (channel, split).
template <int W>
__device__ __forceinline__ void write_backward_partials(float2* merge_slots, const ThreadPlace& p,
                                                        const RowTiles& t, const float (&sum_g)[W],
                                                        const float (&sum_g_xc)[W], const ChannelRanges& r,
                                                        float2* partials) {
  const uint32_t tile_channels = t.columns * W;
  if (p.lane < t.lanes) {
#pragma unroll
    for (int j = 0; j < W; ++j)
      merge_slots[p.lane * tile_channels + p.column * W + j] = make_float2(sum_g[j], sum_g_xc[j]);
  }
  __syncthreads();
  const uint32_t k = threadIdx.x, channel = blockIdx.x * tile_channels + k;
  if (k >= tile_channels || channel >= r.channels) return;
  float2 total = make_float2(0.f, 0.f);
  for (uint32_t lane = 0; lane < t.lanes; ++lane) {
    const float2 slot = merge_slots[lane * tile_channels + k];
    total.x += slot.x;
    total.y += slot.y;
  }
  partials[int64_t(channel) * r.splits + blockIdx.y] = total;
}

// ---- host side ----

constexpr const char* kForward = "own_batchnorm_forward_training (NHWC)";
constexpr const char* kBackward = "own_batchnorm_backward (NHWC)";

// Calls fn(width tag) with the vector width the channels and every pointer allow: kVec16<T> or 1.
template <typename T, typename Fn>
void dispatch_vector(const BatchNormGeometry& g, std::initializer_list<const void*> pointers, Fn&& fn) {
  bool whole = nhwc_vector(g.dtype, g.channels) == kVec16<T>;
  for (const void* q : pointers) whole = whole && (q == nullptr || aligned(q, 16));
  if (whole) {
    fn(std::integral_constant<int, kVec16<T>>{});
  } else {
    fn(std::integral_constant<int, 1>{});
  }
}

inline dim3 pass_grid(const RowTiles& t, const OwnBatchNormLaunch& launch) {
  return dim3(t.tiles, static_cast<unsigned>(launch.splits));
}

// The ReLU mask in the plan's held memory, after the forward's coefficients (null when the plan keeps
// none).
inline uint8_t* relu_mask_of(const OwnBatchNormLaunch& launch, const float4* forward) {
  if (!keeps_relu_mask(launch.geometry)) return nullptr;
  return reinterpret_cast<uint8_t*>(const_cast<float4*>(forward)) +
         coefficient_bytes(launch.geometry.channels);
}

// One side's training statistics and forward coefficients (in its held memory), as its own forward makes
// them: from x's sums where it has them, else a partial pass over x in vectors of W and the finalize.
template <typename T, int W>
void launch_side_statistics(const OwnBatchNormSide& side, void* workspace, cudaStream_t stream) {
  const OwnBatchNormLaunch& launch = *side.launch;
  const ChannelRanges r = channel_ranges(launch);
  const WorkspaceParts parts = workspace_parts(launch, workspace);
  if (!side.input_sums) {
    const RowTiles t = row_tiles(launch.geometry, W);
    nhwc_stats_partial_kernel<T, W><<<pass_grid(t, launch), kReduceThreads, 0, stream>>>(
        static_cast<const T*>(side.x), r, t, parts.partials);
    DLB_KERNEL_LAUNCH_CHECK();
  }
  launch_stats_finalize(parts.partials, side.input_sums, r, launch.geometry, side.gamma, side.beta,
                        side.running_mean, side.running_var, side.saved_mean, side.saved_inv_std,
                        static_cast<float4*>(side.held), stream);
}

}  // namespace
}  // namespace dlbench::cuda::bn
