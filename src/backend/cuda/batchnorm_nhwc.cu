// Batch-norm training over NHWC tensors: the partial reductions and the elementwise passes
// (batchnorm_own.cu has the entry points and why these kernels exist; batchnorm_common.cuh what the
// layouts share).
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
#include "backend/cuda/batchnorm_common.cuh"
#include "backend/cuda/max_pool_common.cuh"

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

// Pass 3: y = act((x - mean) * scale + beta (+ residual)), and with add_relu the mask of where the ReLU
// passed. y may alias x or the residual: each element is read and written by one thread.
template <typename T, int W, BatchNormFusion F>
__global__ void __launch_bounds__(kReduceThreads, kResidentBlocks)
    nhwc_apply_kernel(const T* x, const T* residual, T* y, const float4* __restrict__ coefficients,
                      uint8_t* __restrict__ relu_mask, ChannelRanges r, RowTiles t) {
  const ThreadPlace p = thread_place(t, r.channels);
  if (!p.active) return;
  float4 k[W];
  load_coefficients(coefficients, p, k);
  struct Inputs {
    Vec<T, W> x, residual;
  };
  for_each_row<F == BatchNormFusion::add_relu ? kRowsReadingMore<W> : kReduceUnroll>(
      r, t, p,
      [&](int64_t at) {
        Inputs in{};
        in.x = load_vec<W>(x + at);
        if constexpr (F == BatchNormFusion::add_relu) in.residual = load_vec<W>(residual + at);
        return in;
      },
      [&]<int U>(const Inputs(&in)[U], const int64_t(&at)[U]) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          Vec<T, W> out;
#pragma unroll
          for (int j = 0; j < W; ++j) {
            float z = bn_affine(widen(in[u].x.v[j]), forward_coefficients(k[j]));
            if constexpr (F == BatchNormFusion::add_relu) z += widen(in[u].residual.v[j]);
            out.v[j] = narrow<T>(activate<F>(z));
          }
          store_vec<W>(y + at[u], out);
          if constexpr (kUsesMask<W, F>) relu_mask[mask_index<W>(at[u])] = positive_bits(out);
        }
      });
}

// ---- backward ----

template <typename T, int W>
struct BackwardInputs {
  Vec<T, W> x, dy, y;
  uint32_t mask;  // the ReLU mask's byte, in y's place (kUsesMask)
};

// The forward's mask from its output, where the forward ran element by element on a plan that keeps one
// (pointers not aligned for vectors): one thread per byte.
template <typename T>
__global__ void __launch_bounds__(kReduceThreads)
    nhwc_mask_from_output_kernel(const T* y, uint8_t* relu_mask, int64_t bytes, int vector) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < bytes; b += stride) {
    uint32_t bits = 0;
    for (int j = 0; j < vector; ++j) bits |= (widen(y[b * vector + j]) > 0.f ? 1u : 0u) << j;
    relu_mask[b] = static_cast<uint8_t>(bits);
  }
}

// Loads what the backward reads at one offset: with add_relu the forward's mask (vectors) or y (element
// by element); nothing of y otherwise (a plain ReLU's y is recomputed from x; without a ReLU y's memory
// may hold something else by now).
template <typename T, int W, BatchNormFusion F>
__device__ __forceinline__ BackwardInputs<T, W> load_backward(const T* x, const T* y,
                                                              const uint8_t* relu_mask, const T* dy,
                                                              int64_t at) {
  BackwardInputs<T, W> in{};
  in.x = load_vec<W>(x + at);
  in.dy = load_vec<W>(dy + at);
  if constexpr (kUsesMask<W, F>) {
    in.mask = relu_mask[mask_index<W>(at)];
  } else if constexpr (F == BatchNormFusion::add_relu) {
    in.y = load_vec<W>(y + at);
  }
  return in;
}

// The gradient reaching the batch norm's output at element j of a vector: dy masked where the ReLU passed,
// known from the mask or y (add_relu) or from y recomputed with the forward's coefficients (relu).
template <typename T, int W, BatchNormFusion F>
__device__ __forceinline__ float output_grad(const BackwardInputs<T, W>& in, int j,
                                             const ForwardCoefficients& forward) {
  if constexpr (F == BatchNormFusion::relu) {
    return bn_output_grad<F>(widen(in.dy.v[j]), relu_output<T>(widen(in.x.v[j]), forward));
  } else if constexpr (kUsesMask<W, F>) {
    return (in.mask >> j) & 1u ? widen(in.dy.v[j]) : 0.f;
  } else {
    return bn_output_grad<F>(widen(in.dy.v[j]), widen(in.y.v[j]));
  }
}

// The forward's coefficients of the thread's channels, for a plain ReLU (else nothing is read).
template <int W, BatchNormFusion F>
__device__ __forceinline__ void load_forward(const float4* forward, const ThreadPlace& p,
                                             ForwardCoefficients (&fk)[W]) {
#pragma unroll
  for (int j = 0; j < W; ++j)
    fk[j] = forward_coefficients(F == BatchNormFusion::relu && p.active ? forward[p.channel + j] : float4{});
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

// Pass 1: per (channel, split), sum g and sum g * (x - mean), with g the masked dy; with add_relu, g is
// also the residual's gradient, written here (dresidual = g).
template <typename T, int W, BatchNormFusion F>
__global__ void __launch_bounds__(kReduceThreads, kBackwardResidentBlocks<W, F>)
    nhwc_backward_partial_kernel(const T* x, const T* y, const uint8_t* __restrict__ relu_mask, const T* dy,
                                 T* dresidual, const float* __restrict__ saved_mean,
                                 const float4* __restrict__ forward, ChannelRanges r, RowTiles t,
                                 float2* __restrict__ partials) {
  __shared__ float2 merge_slots[kMergeSlots];  // (sum g, sum g * (x - mean))
  const ThreadPlace p = thread_place(t, r.channels);
  float mean[W], sum_g[W], sum_g_xc[W];
  ForwardCoefficients fk[W];
  load_forward<W, F>(forward, p, fk);
#pragma unroll
  for (int j = 0; j < W; ++j) {
    // A ReLU's coefficients hold the saved mean too: one register for both.
    mean[j] = F == BatchNormFusion::relu ? fk[j].mean : p.active ? saved_mean[p.channel + j] : 0.f;
    sum_g[j] = sum_g_xc[j] = 0.f;
  }
  if (p.active) {
    for_each_row<kRowsReadingMore<W>>(
        r, t, p, [&](int64_t at) { return load_backward<T, W, F>(x, y, relu_mask, dy, at); },
        [&]<int U>(const BackwardInputs<T, W>(&in)[U], const int64_t(&at)[U]) {
#pragma unroll
          for (int u = 0; u < U; ++u) {
            Vec<T, W> g;
#pragma unroll
            for (int j = 0; j < W; ++j) {
              const float gj = output_grad<T, W, F>(in[u], j, fk[j]);
              g.v[j] = narrow<T>(gj);  // exact: gj is an element of dy or 0
              sum_g[j] += gj;
              sum_g_xc[j] += gj * (widen(in[u].x.v[j]) - mean[j]);
            }
            if constexpr (F == BatchNormFusion::add_relu) store_vec<W>(dresidual + at[u], g);
          }
        });
  }
  write_backward_partials<W>(merge_slots, p, t, sum_g, sum_g_xc, r, partials);
}

// Pass 3: dx = k * g + a * (x - mean) + b per channel, g the masked dy (relu: y recomputed from x), read
// back from dresidual (add_relu: pass 1 wrote it), or dy itself. dx may alias the inputs.
template <typename T, int W, BatchNormFusion F>
__global__ void __launch_bounds__(kReduceThreads, kBackwardResidentBlocks<W, F>)
    nhwc_backward_data_kernel(const T* x, const T* dy, const T* dresidual, T* dx,
                              const float4* __restrict__ coefficients, const float4* __restrict__ forward,
                              ChannelRanges r, RowTiles t) {
  const ThreadPlace p = thread_place(t, r.channels);
  if (!p.active) return;
  float4 k[W];
  ForwardCoefficients fk[W];
  load_coefficients(coefficients, p, k);
  load_forward<W, F>(forward, p, fk);
  // With add_relu the masked gradient is dresidual: read it in dy's place, and no y.
  constexpr BatchNormFusion kRead = F == BatchNormFusion::add_relu ? BatchNormFusion::none : F;
  const T* g_source = F == BatchNormFusion::add_relu ? dresidual : dy;
  for_each_row<kRowsReadingMore<W>>(
      r, t, p, [&](int64_t at) { return load_backward<T, W, kRead>(x, nullptr, nullptr, g_source, at); },
      [&]<int U>(const BackwardInputs<T, W>(&in)[U], const int64_t(&at)[U]) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          Vec<T, W> out;
#pragma unroll
          for (int j = 0; j < W; ++j) {
            // The saved mean, from whichever coefficients the thread holds anyway.
            const float mean = F == BatchNormFusion::relu ? fk[j].mean : k[j].w;
            const float g = output_grad<T, W, kRead>(in[u], j, fk[j]);
            out.v[j] = narrow<T>(fmaf(k[j].x, g, fmaf(k[j].y, widen(in[u].x.v[j]) - mean, k[j].z)));
          }
          store_vec<W>(dx + at[u], out);
        }
      });
}

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

dim3 pass_grid(const RowTiles& t, const OwnBatchNormLaunch& launch) {
  return dim3(t.tiles, static_cast<unsigned>(launch.splits));
}

// The ReLU mask in the plan's held memory, after the forward's coefficients (null when the plan keeps
// none).
uint8_t* relu_mask_of(const OwnBatchNormLaunch& launch, const float4* forward) {
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

void nhwc_forward_training(const OwnBatchNormLaunch& launch, const void* x, const void* residual,
                           const float* gamma, const float* beta, void* y, float* running_mean,
                           float* running_var, float* saved_mean, float* saved_inv_std, void* workspace,
                           float4* forward, cudaStream_t stream, const float* input_sums) {
  const BatchNormGeometry& g = launch.geometry;
  const ChannelRanges r = channel_ranges(launch);
  const WorkspaceParts parts = workspace_parts(launch, workspace);
  const void* read_residual = g.fusion == BatchNormFusion::add_relu ? residual : nullptr;
  dispatch_float(g.dtype, kForward, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      const T* in = static_cast<const T*>(x);
      // The statistics read x alone: vectors whenever x allows, whatever y and the residual.
      if (!input_sums) {
        dispatch_vector<T>(g, {x}, [&](auto width) {
          constexpr int W = decltype(width)::value;
          const RowTiles t = row_tiles(g, W);
          nhwc_stats_partial_kernel<T, W>
              <<<pass_grid(t, launch), kReduceThreads, 0, stream>>>(in, r, t, parts.partials);
          DLB_KERNEL_LAUNCH_CHECK();
        });
      }
      launch_stats_finalize(parts.partials, input_sums, r, g, gamma, beta, running_mean, running_var,
                            saved_mean, saved_inv_std, forward, stream);
      uint8_t* relu_mask = relu_mask_of(launch, forward);
      dispatch_vector<T>(g, {x, y, read_residual}, [&](auto width) {
        constexpr int W = decltype(width)::value;
        const RowTiles t = row_tiles(g, W);
        dispatch_fusion(g.fusion, [&](auto fusion_tag) {
          constexpr BatchNormFusion F = decltype(fusion_tag)::value;
          nhwc_apply_kernel<T, W, F><<<pass_grid(t, launch), kReduceThreads, 0, stream>>>(
              in, static_cast<const T*>(read_residual), static_cast<T*>(y), forward, relu_mask, r, t);
          DLB_KERNEL_LAUNCH_CHECK();
          if constexpr (!kUsesMask<W, F>) {
            if (relu_mask != nullptr) {  // element by element on a plan that keeps a mask: fill it from y
              const int vector = nhwc_vector(g.dtype, g.channels);
              const int64_t bytes = g.batch * g.h * g.w * g.channels / vector;
              nhwc_mask_from_output_kernel<T><<<grid_for(bytes, kReduceThreads), kReduceThreads, 0, stream>>>(
                  static_cast<const T*>(y), relu_mask, bytes, vector);
              DLB_KERNEL_LAUNCH_CHECK();
            }
          }
        });
      });
    }
  });
}

void nhwc_backward(const OwnBatchNormLaunch& launch, const void* x, const void* y, const void* dy,
                   const float* gamma, const float* saved_mean, const float* saved_inv_std, void* dx,
                   void* dresidual, float* dgamma, float* dbeta, bool accumulate, void* workspace,
                   const float4* forward, cudaStream_t stream) {
  const BatchNormGeometry& g = launch.geometry;
  const bool add = g.fusion == BatchNormFusion::add_relu;
  const ChannelRanges r = channel_ranges(launch);
  const WorkspaceParts parts = workspace_parts(launch, workspace);
  dispatch_float(g.dtype, kBackward, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      const T *tx = static_cast<const T*>(x), *ty = static_cast<const T*>(y),
              *tdy = static_cast<const T*>(dy);
      T* tdres = static_cast<T*>(dresidual);
      // One width for both passes: pass 1 writes dresidual with the vectors pass 3 reads it with. With the
      // vectors, add_relu reads the forward's mask; element by element, y.
      dispatch_vector<T>(g, {x, dy, dx, add ? y : nullptr, add ? dresidual : nullptr}, [&](auto width) {
        constexpr int W = decltype(width)::value;
        const RowTiles t = row_tiles(g, W);
        dispatch_fusion(g.fusion, [&](auto fusion_tag) {
          constexpr BatchNormFusion F = decltype(fusion_tag)::value;
          nhwc_backward_partial_kernel<T, W, F><<<pass_grid(t, launch), kReduceThreads, 0, stream>>>(
              tx, ty, relu_mask_of(launch, forward), tdy, tdres, saved_mean, forward, r, t, parts.partials);
          DLB_KERNEL_LAUNCH_CHECK();
          launch_backward_finalize(parts.partials, r, gamma, saved_mean, saved_inv_std, dgamma, dbeta,
                                   accumulate, parts.coefficients, stream);
          nhwc_backward_data_kernel<T, W, F><<<pass_grid(t, launch), kReduceThreads, 0, stream>>>(
              tx, tdy, tdres, static_cast<T*>(dx), parts.coefficients, forward, r, t);
          DLB_KERNEL_LAUNCH_CHECK();
        });
      });
    }
  });
}

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
