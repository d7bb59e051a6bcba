// What dlbench's own batch-norm training kernels share across layouts (batchnorm_nchw.cu, batchnorm_nhwc.cu):
// the Welford merge of the statistics, the two finalize kernels that turn the per-(channel, split)
// partials into statistics and per-channel coefficients, the fusions' elementwise pieces, and the
// workspace layout. The layouts differ only in how a block walks its share of the tensor.
//
// Every reduction cuts each channel's M = N * H * W values into `splits` ranges of `chunk` values (NCHW:
// a contiguous range of the channel's values; NHWC: a range of rows, each row holding every channel), one
// partial per (channel, split) in the workspace; a finalize kernel (one warp per channel) merges a
// channel's partials in double, in a fixed order: no atomics, the results do not depend on scheduling.
#pragma once

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backend/cuda/batchnorm_launch.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"
#include "core/align.h"

namespace dlbench::cuda::bn {

using namespace detail;

// The splits of one launch, as the kernels see them. Index arithmetic inside a channel is 32-bit (M <
// 2^31, which the launch checks); offsets into the tensor are 64-bit.
struct ChannelRanges {
  int64_t channels;
  uint32_t hw;      // NCHW: the values of one (image, channel) row; NHWC: unused (1)
  uint32_t values;  // M: the values of one channel
  uint32_t splits, chunk;
};

inline ChannelRanges channel_ranges(const OwnBatchNormLaunch& launch) {
  const BatchNormGeometry& g = launch.geometry;
  return {g.channels, static_cast<uint32_t>(g.layout == Layout::nchw ? g.h * g.w : 1),
          static_cast<uint32_t>(g.batch * g.h * g.w), static_cast<uint32_t>(launch.splits),
          static_cast<uint32_t>(launch.chunk)};
}

// Where the workspace keeps what: per-channel coefficients first (16-byte aligned float4), then the
// per-(channel, split) partials, channel-major.
struct WorkspaceParts {
  float4* coefficients;  // backward: dx = k * g + a * (x - mean) + b (the forward's are held by the plan)
  float2* partials;      // forward: (mean, M2) of a range; backward: (sum g, sum g * (x - mean))
};

inline size_t coefficient_bytes(int64_t channels) {
  return align_up(static_cast<size_t>(channels) * sizeof(float4), size_t{256});
}

inline WorkspaceParts workspace_parts(const OwnBatchNormLaunch& launch, void* workspace) {
  auto* base = static_cast<unsigned char*>(workspace);
  return {reinterpret_cast<float4*>(base),
          reinterpret_cast<float2*>(base + coefficient_bytes(launch.geometry.channels))};
}

// Calls fn(fusion tag) with the fusion as a compile-time constant.
template <typename Fn>
void dispatch_fusion(BatchNormFusion fusion, Fn&& fn) {
  switch (fusion) {
    case BatchNormFusion::none:
      fn(std::integral_constant<BatchNormFusion, BatchNormFusion::none>{});
      return;
    case BatchNormFusion::relu:
      fn(std::integral_constant<BatchNormFusion, BatchNormFusion::relu>{});
      return;
    case BatchNormFusion::add_relu:
      fn(std::integral_constant<BatchNormFusion, BatchNormFusion::add_relu>{});
      return;
  }
}

// ---- walking a block's share ----

// Visits i = first, first + step, ... below `end`, R at a time where it can, all R loads issued before the
// first use (the loads in flight are what bounds these passes). `offset(i)` is element i's offset in the
// tensor; `load(offset)` returns what one position needs; `use(in, at)` gets U of those and their offsets,
// U being R or 1.
template <int R, typename Offset, typename Load, typename Use>
__device__ __forceinline__ void visit_in_flight(uint32_t first, uint32_t end, uint32_t step, Offset&& offset,
                                                Load&& load, Use&& use) {
  using Loaded = decltype(load(int64_t{0}));
  uint32_t i = first;
  for (; i + (R - 1) * step < end; i += R * step) {
    int64_t at[R];
    Loaded in[R];
#pragma unroll
    for (int u = 0; u < R; ++u) at[u] = offset(i + u * step);
#pragma unroll
    for (int u = 0; u < R; ++u) in[u] = load(at[u]);
    use(in, at);
  }
  for (; i < end; i += step) {
    const int64_t at[1] = {offset(i)};
    const Loaded in[1] = {load(at[0])};
    use(in, at);
  }
}

// ---- statistics ----

// Statistics: each thread keeps a Welford triple (count, mean, M2) in float and merges groups of values
// into it with Chan's formula; threads, warps and splits are merged the same way. Unlike sums of x and
// x^2, this does not cancel when the mean is large against the spread.
struct Welford {
  float count, mean, m2;
};

// Chan's merge of two partial results (either may be empty).
template <typename S>
__device__ __forceinline__ void chan_merge(S& count, S& mean, S& m2, S other_count, S other_mean,
                                           S other_m2) {
  const S total = count + other_count;
  if (total == S(0)) return;
  const S delta = other_mean - mean, other_share = other_count / total;
  mean += delta * other_share;
  m2 += other_m2 + delta * delta * count * other_share;
  count = total;
}

__device__ __forceinline__ void merge(Welford& a, const Welford& b) {
  chan_merge(a.count, a.mean, a.m2, b.count, b.mean, b.m2);
}

// The mean and M2 of K values (one division for the K of them).
template <int K>
__device__ __forceinline__ Welford group_of(const float (&v)[K]) {
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < K; ++j) sum += v[j];
  const float mean = sum * (1.f / K);
  float m2 = 0.f;
#pragma unroll
  for (int j = 0; j < K; ++j) m2 += (v[j] - mean) * (v[j] - mean);
  return {float(K), mean, m2};
}

// The finalize kernels (batchnorm_own.cu), one warp per channel, launched on `stream`.
//
// Forward: merges each channel's partials in double in a fixed order — or, with `input_sums` (a
// convolution's sums of x, [2, C] f32: sums, then sums of squares), takes the statistics from those, and no
// partials were made — and writes the saved and running statistics and the channel's scale and shift for
// the apply pass.
void launch_stats_finalize(const float2* partials, const float* input_sums, const ChannelRanges& r,
                           const BatchNormGeometry& g, const float* gamma, const float* beta,
                           float* running_mean, float* running_var, float* saved_mean, float* saved_inv_std,
                           float4* coefficients, cudaStream_t stream);
// Backward: the channel's sums in double (fixed order), dgamma and dbeta written or added, and the
// coefficients of dx = k * g + a * (x - mean) + b, which is
//   gamma * inv_std * (g - mean(g) - xhat * mean(g * xhat)),  xhat = (x - mean) * inv_std.
void launch_backward_finalize(const float2* partials, const ChannelRanges& r, const float* gamma,
                              const float* saved_mean, const float* saved_inv_std, float* dgamma,
                              float* dbeta, bool accumulate, float4* coefficients, cudaStream_t stream);

// Inference: the coefficients of the apply (ForwardCoefficients) from the running statistics, one thread per
// channel: scale = gamma / sqrt(running_var + eps) (in double), shift beta, centre the running mean.
void launch_inference_coefficients(const BatchNormGeometry& g, const float* gamma, const float* beta,
                                   const float* running_mean, const float* running_var, float4* coefficients,
                                   cudaStream_t stream);

// ---- the fusions, element by element ----

template <BatchNormFusion F>
__device__ __forceinline__ float activate(float z) {
  if constexpr (F == BatchNormFusion::none) {
    return z;
  } else {
    return z < 0.f ? 0.f : z;  // NaN and -0 pass, as the reference's max(z, 0)
  }
}

// The forward's coefficients of a channel, as the finalize writes them: y = (x - mean) * scale + beta
// before any residual and ReLU (centring first: x * scale + (beta - mean * scale) cancels where the mean is
// large against the spread).
struct ForwardCoefficients {
  float scale, beta, mean;
};

__device__ __forceinline__ ForwardCoefficients forward_coefficients(float4 k) { return {k.x, k.y, k.z}; }

// The normalised, scaled and shifted value, before any residual and ReLU: the forward's apply pass and the
// ReLU backward's recomputation of it (below) both call this, so both round alike.
__device__ __forceinline__ float bn_affine(float x, const ForwardCoefficients& k) {
  return fmaf(x - k.mean, k.scale, k.beta);
}

// The forward's output for the plain ReLU fusion, recomputed from x with the forward's coefficients (the
// plan keeps them): the same operations and rounding as the apply pass, so it is y exactly, and the
// ReLU's backward needs no y — two passes over the activation fewer. (add_relu cannot: its y also depends
// on the residual, which the backward does not get.)
template <typename T>
__device__ __forceinline__ float relu_output(float x, const ForwardCoefficients& k) {
  return widen(narrow<T>(activate<BatchNormFusion::relu>(bn_affine(x, k))));
}

// The gradient reaching the batch norm's output: dy, masked by the ReLU (y > 0) when there is one.
template <BatchNormFusion F>
__device__ __forceinline__ float bn_output_grad(float dy, float y) {
  if constexpr (F == BatchNormFusion::none) {
    return dy;
  } else {
    return y > 0.f ? dy : 0.f;
  }
}

// ---- the layouts' passes (batchnorm_nchw.cu, batchnorm_nhwc.cu): each runs its partial reduction, the
// finalize kernel above and its elementwise pass; the launch and the pointers were checked by the caller.

// `forward` is the plan's held memory: the forward's coefficients, which the forward writes and the ReLU
// backward reads. With `input_sums` (a convolution's sums of x) the forward's statistics come from them,
// without the partial pass over x.
void nchw_forward_training(const OwnBatchNormLaunch& launch, const void* x, const void* residual,
                           const float* gamma, const float* beta, void* y, float* running_mean,
                           float* running_var, float* saved_mean, float* saved_inv_std, void* workspace,
                           float4* forward, cudaStream_t stream, const float* input_sums);
void nchw_backward(const OwnBatchNormLaunch& launch, const void* x, const void* y, const void* dy,
                   const float* gamma, const float* saved_mean, const float* saved_inv_std, void* dx,
                   void* dresidual, float* dgamma, float* dbeta, bool accumulate, void* workspace,
                   const float4* forward, cudaStream_t stream);
void nhwc_forward_training(const OwnBatchNormLaunch& launch, const void* x, const void* residual,
                           const float* gamma, const float* beta, void* y, float* running_mean,
                           float* running_var, float* saved_mean, float* saved_inv_std, void* workspace,
                           float4* forward, cudaStream_t stream, const float* input_sums);
void nhwc_backward(const OwnBatchNormLaunch& launch, const void* x, const void* y, const void* dy,
                   const float* gamma, const float* saved_mean, const float* saved_inv_std, void* dx,
                   void* dresidual, float* dgamma, float* dbeta, bool accumulate, void* workspace,
                   const float4* forward, cudaStream_t stream);

// A projection block's shortcut folded into its closing batch norm (NHWC; batchnorm_nhwc_folded.cu). False,
// with nothing launched, where the kernels cannot take the tensors (channels not in whole 16-byte vectors,
// pointers not aligned for them): the caller composes the single ops.
bool nhwc_folded_forward_training(const OwnBatchNormSide& main, const OwnBatchNormSide& shortcut, void* y,
                                  void* workspace, cudaStream_t stream);
bool nhwc_folded_backward(const OwnBatchNormSide& main, const OwnBatchNormSide& shortcut, const void* dy,
                          bool accumulate, void* workspace, cudaStream_t stream);

// The ImageNet stem's batch norm (relu) + 3 x 3 stride-2 max pool as one op (batchnorm_nhwc_pooled.cu).
// False, with nothing launched, where the kernels cannot take it (nhwc_pooled_fits, pointers not aligned for
// vectors).
bool nhwc_pooled_fits(const BatchNormGeometry& g, const MaxPoolShape& pool);
bool nhwc_pooled_forward_training(const OwnBatchNormSide& bn, const MaxPoolShape& pool, void* y,
                                  uint8_t* argmax, void* workspace, cudaStream_t stream);
bool nhwc_pooled_forward_inference(const BatchNormGeometry& g, const void* x, const float* gamma,
                                   const float* beta, const float* running_mean, const float* running_var,
                                   const MaxPoolShape& pool, void* y, float4* coefficients,
                                   cudaStream_t stream);
bool nhwc_pooled_backward(const OwnBatchNormSide& bn, const MaxPoolShape& pool, const void* dy,
                          const uint8_t* argmax, bool accumulate, void* workspace, cudaStream_t stream);

}  // namespace dlbench::cuda::bn
