// A projection block's shortcut batch norm folded into its closing one over NHWC tensors
// (Backend::batchnorm_shortcut_*): y = relu(bn(x) + bn_s(s)) and its backward, kernels and host side.
#include "backend/cuda/batchnorm_nhwc_common.cuh"

namespace dlbench::cuda::bn {
namespace {

// ---- a projection block's shortcut batch norm folded in (Backend::batchnorm_shortcut_*) ----
//
// y = relu(bn(x) + bn_s(s)) from both batch norms' forward coefficients; the backward sums for both in one
// pass (sum g is the same for both) and writes dx and ds in another. Vectors only, add_relu's mask always
// (the host composes the single ops otherwise). Two sets of per-channel coefficients a thread: 2 blocks a
// multiprocessor (128 registers).
constexpr int kFoldedResidentBlocks = 2;

template <typename T, int W>
__global__ void __launch_bounds__(kReduceThreads, kFoldedResidentBlocks)
    nhwc_folded_apply_kernel(const T* x, const T* s, T* y, const float4* __restrict__ coefficients,
                             const float4* __restrict__ s_coefficients, uint8_t* __restrict__ relu_mask,
                             ChannelRanges r, RowTiles t) {
  const ThreadPlace p = thread_place(t, r.channels);
  if (!p.active) return;
  float4 k[W], ks[W];
  load_coefficients(coefficients, p, k);
  load_coefficients(s_coefficients, p, ks);
  struct Inputs {
    Vec<T, W> x, s;
  };
  for_each_row<kRowsReadingMore<W>>(
      r, t, p,
      [&](int64_t at) {
        return Inputs{load_vec<W>(x + at), load_vec<W>(s + at)};
      },
      [&]<int U>(const Inputs(&in)[U], const int64_t(&at)[U]) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          Vec<T, W> out;
#pragma unroll
          for (int j = 0; j < W; ++j) {
            const float z = bn_affine(widen(in[u].x.v[j]), forward_coefficients(k[j])) +
                            bn_affine(widen(in[u].s.v[j]), forward_coefficients(ks[j]));
            out.v[j] = narrow<T>(activate<BatchNormFusion::relu>(z));
          }
          store_vec<W>(y + at[u], out);
          relu_mask[mask_index<W>(at[u])] = positive_bits(out);
        }
      });
}

template <typename T, int W>
struct FoldedInputs {
  Vec<T, W> x, s, dy;
  uint32_t mask;
};

template <typename T, int W>
__device__ __forceinline__ FoldedInputs<T, W> load_folded(const T* x, const T* s, const uint8_t* relu_mask,
                                                          const T* dy, int64_t at) {
  return {load_vec<W>(x + at), load_vec<W>(s + at), load_vec<W>(dy + at), relu_mask[mask_index<W>(at)]};
}

// Pass 1: per (channel, split), sum g, sum g * (x - mean) and sum g * (s - mean_s), g the masked dy.
template <typename T, int W>
__global__ void __launch_bounds__(kReduceThreads, kFoldedResidentBlocks)
    nhwc_folded_backward_partial_kernel(const T* x, const T* s, const uint8_t* __restrict__ relu_mask,
                                        const T* dy, const float* __restrict__ saved_mean,
                                        const float* __restrict__ s_saved_mean, ChannelRanges r, RowTiles t,
                                        float2* __restrict__ partials, float2* __restrict__ s_partials) {
  __shared__ float2 merge_slots[kMergeSlots];  // (sum g, sum g * (x - mean))
  __shared__ float s_slots[kMergeSlots];       // sum g * (s - mean_s)
  const ThreadPlace p = thread_place(t, r.channels);
  float mean[W], s_mean[W], sum_g[W], sum_g_xc[W], sum_g_sc[W];
#pragma unroll
  for (int j = 0; j < W; ++j) {
    mean[j] = p.active ? saved_mean[p.channel + j] : 0.f;
    s_mean[j] = p.active ? s_saved_mean[p.channel + j] : 0.f;
    sum_g[j] = sum_g_xc[j] = sum_g_sc[j] = 0.f;
  }
  if (p.active) {
    for_each_row<kRowsReadingMore<W>>(
        r, t, p, [&](int64_t at) { return load_folded<T, W>(x, s, relu_mask, dy, at); },
        [&]<int U>(const FoldedInputs<T, W>(&in)[U], const int64_t(&)[U]) {
#pragma unroll
          for (int u = 0; u < U; ++u)
#pragma unroll
            for (int j = 0; j < W; ++j) {
              const float g = (in[u].mask >> j) & 1u ? widen(in[u].dy.v[j]) : 0.f;
              sum_g[j] += g;
              sum_g_xc[j] += g * (widen(in[u].x.v[j]) - mean[j]);
              sum_g_sc[j] += g * (widen(in[u].s.v[j]) - s_mean[j]);
            }
        });
  }
  const uint32_t tile_channels = t.columns * W;
  if (p.lane < t.lanes) {
#pragma unroll
    for (int j = 0; j < W; ++j) {
      const uint32_t slot = p.lane * tile_channels + p.column * W + j;
      merge_slots[slot] = make_float2(sum_g[j], sum_g_xc[j]);
      s_slots[slot] = sum_g_sc[j];
    }
  }
  __syncthreads();
  const uint32_t k = threadIdx.x, channel = blockIdx.x * tile_channels + k;
  if (k >= tile_channels || channel >= r.channels) return;
  float2 total = make_float2(0.f, 0.f);
  float s_total = 0.f;
  for (uint32_t lane = 0; lane < t.lanes; ++lane) {
    const float2 slot = merge_slots[lane * tile_channels + k];
    total.x += slot.x;
    total.y += slot.y;
    s_total += s_slots[lane * tile_channels + k];
  }
  const int64_t at = int64_t(channel) * r.splits + blockIdx.y;
  partials[at] = total;
  s_partials[at] = make_float2(total.x, s_total);
}

// Pass 3: dx = k * g + a * (x - mean) + b and ds likewise with the shortcut's coefficients.
template <typename T, int W>
__global__ void __launch_bounds__(kReduceThreads, kFoldedResidentBlocks)
    nhwc_folded_backward_data_kernel(const T* x, const T* s, const uint8_t* __restrict__ relu_mask,
                                     const T* dy, T* dx, T* ds, const float4* __restrict__ coefficients,
                                     const float4* __restrict__ s_coefficients, ChannelRanges r, RowTiles t) {
  const ThreadPlace p = thread_place(t, r.channels);
  if (!p.active) return;
  float4 k[W], ks[W];
  load_coefficients(coefficients, p, k);
  load_coefficients(s_coefficients, p, ks);
  for_each_row<kRowsReadingMore<W>>(
      r, t, p, [&](int64_t at) { return load_folded<T, W>(x, s, relu_mask, dy, at); },
      [&]<int U>(const FoldedInputs<T, W>(&in)[U], const int64_t(&at)[U]) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          Vec<T, W> out, s_out;
#pragma unroll
          for (int j = 0; j < W; ++j) {
            const float g = (in[u].mask >> j) & 1u ? widen(in[u].dy.v[j]) : 0.f;
            out.v[j] = narrow<T>(fmaf(k[j].x, g, fmaf(k[j].y, widen(in[u].x.v[j]) - k[j].w, k[j].z)));
            s_out.v[j] = narrow<T>(fmaf(ks[j].x, g, fmaf(ks[j].y, widen(in[u].s.v[j]) - ks[j].w, ks[j].z)));
          }
          store_vec<W>(dx + at[u], out);
          store_vec<W>(ds + at[u], s_out);
        }
      });
}

}  // namespace

bool nhwc_folded_forward_training(const OwnBatchNormSide& main, const OwnBatchNormSide& shortcut, void* y,
                                  void* workspace, cudaStream_t stream) {
  const OwnBatchNormLaunch& launch = *main.launch;
  const BatchNormGeometry& g = launch.geometry;
  const int vector = nhwc_vector(g.dtype, g.channels);
  bool ran = false;
  dispatch_float(g.dtype, kForward, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      constexpr int W = kVec16<T>;
      if (vector != W) return;
      for (const void* q : {main.x, shortcut.x, static_cast<const void*>(y)})
        if (!aligned(q, 16)) return;
      const RowTiles t = row_tiles(g, W);
      // Each batch norm's statistics and forward coefficients, as its own forward makes them.
      for (const OwnBatchNormSide* side : {&shortcut, &main})
        launch_side_statistics<T, W>(*side, workspace, stream);
      nhwc_folded_apply_kernel<T, W><<<pass_grid(t, launch), kReduceThreads, 0, stream>>>(
          static_cast<const T*>(main.x), static_cast<const T*>(shortcut.x), static_cast<T*>(y),
          static_cast<const float4*>(main.held), static_cast<const float4*>(shortcut.held),
          relu_mask_of(launch, static_cast<const float4*>(main.held)), channel_ranges(launch), t);
      DLB_KERNEL_LAUNCH_CHECK();
      ran = true;
    }
  });
  return ran;
}

bool nhwc_folded_backward(const OwnBatchNormSide& main, const OwnBatchNormSide& shortcut, const void* dy,
                          bool accumulate, void* workspace, cudaStream_t stream) {
  const OwnBatchNormLaunch& launch = *main.launch;
  const BatchNormGeometry& g = launch.geometry;
  const int vector = nhwc_vector(g.dtype, g.channels);
  bool ran = false;
  dispatch_float(g.dtype, kBackward, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      constexpr int W = kVec16<T>;
      // Both partial sets are cut as the closing batch norm's (one shape, so one launch).
      if (vector != W || shortcut.launch->splits != launch.splits) return;
      for (const void* q :
           {main.x, shortcut.x, dy, static_cast<const void*>(main.dx), static_cast<const void*>(shortcut.dx)})
        if (!aligned(q, 16)) return;
      const RowTiles t = row_tiles(g, W);
      const ChannelRanges r = channel_ranges(launch);
      // Two workspaces side by side: the closing batch norm's, then the shortcut's.
      const WorkspaceParts parts = workspace_parts(launch, workspace);
      const WorkspaceParts s_parts = workspace_parts(
          *shortcut.launch, static_cast<unsigned char*>(workspace) + own_batchnorm_workspace_bytes(launch));
      const uint8_t* relu_mask = relu_mask_of(launch, static_cast<const float4*>(main.held));
      nhwc_folded_backward_partial_kernel<T, W><<<pass_grid(t, launch), kReduceThreads, 0, stream>>>(
          static_cast<const T*>(main.x), static_cast<const T*>(shortcut.x), relu_mask,
          static_cast<const T*>(dy), main.saved_mean, shortcut.saved_mean, r, t, parts.partials,
          s_parts.partials);
      DLB_KERNEL_LAUNCH_CHECK();
      launch_backward_finalize(parts.partials, r, main.gamma, main.saved_mean, main.saved_inv_std,
                               main.dgamma, main.dbeta, accumulate, parts.coefficients, stream);
      launch_backward_finalize(s_parts.partials, channel_ranges(*shortcut.launch), shortcut.gamma,
                               shortcut.saved_mean, shortcut.saved_inv_std, shortcut.dgamma, shortcut.dbeta,
                               accumulate, s_parts.coefficients, stream);
      nhwc_folded_backward_data_kernel<T, W><<<pass_grid(t, launch), kReduceThreads, 0, stream>>>(
          static_cast<const T*>(main.x), static_cast<const T*>(shortcut.x), relu_mask,
          static_cast<const T*>(dy), static_cast<T*>(main.dx), static_cast<T*>(shortcut.dx),
          parts.coefficients, s_parts.coefficients, r, t);
      DLB_KERNEL_LAUNCH_CHECK();
      ran = true;
    }
  });
  return ran;
}

}  // namespace dlbench::cuda::bn
