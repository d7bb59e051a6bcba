// Batch-norm training over NHWC tensors, one batch norm (with its ReLU or add + ReLU): the apply pass and
// the backward's two passes, and their host side (the statistics pass is batchnorm_nhwc_common.cuh's).
// batchnorm_own.cu has the entry points; the folded shortcut and the stem's pooled op have files of their
// own.
#include "backend/cuda/batchnorm_nhwc_common.cuh"

namespace dlbench::cuda::bn {
namespace {

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

}  // namespace dlbench::cuda::bn
