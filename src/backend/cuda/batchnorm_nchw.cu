// Batch-norm training over NCHW tensors: the per-channel partial reductions and the elementwise passes
// (batchnorm_own.cu has the entry points and why these kernels exist; batchnorm_common.cuh what the
// layouts share).
//
// A channel's M = N * HW values lie in N rows of HW consecutive elements (element (n, c, s) at
// n * C * HW + c * HW + s). The reductions cut each channel's M values into `splits` contiguous ranges of
// `chunk` values, one block each, so that C * splits blocks fill the GPU (about 4 per multiprocessor)
// whatever C is.
//
// Vectors: 4 elements per access (16 bytes in f32, 8 in f16/bf16) when HW % 4 == 0 and every pointer is
// aligned for them (a vector then never leaves its row, nor its channel), element by element otherwise.
#include "backend/cuda/batchnorm_common.cuh"

namespace dlbench::cuda::bn {
namespace {

constexpr int kBnVec = kNchwVector;

// Visits the vectors of W elements of range `split` of channel c a thread takes, kReduceUnroll in flight
// (visit_in_flight).
template <int W, typename Load, typename Use>
__device__ __forceinline__ void for_each_range_vector(const ChannelRanges& r, int64_t c, uint32_t split,
                                                      Load&& load, Use&& use) {
  const uint32_t begin = split * r.chunk, end = min(begin + r.chunk, r.values);
  // W divides chunk and HW (the host's doing), so the range is whole vectors, none across two rows.
  const uint32_t row_vectors = r.hw / W, last = end / W, step = blockDim.x;
  auto offset = [&](uint32_t v) {
    const uint32_t n = v / row_vectors, s = (v - n * row_vectors) * W;
    return (int64_t(n) * r.channels + c) * r.hw + s;
  };
  visit_in_flight<kReduceUnroll>(begin / W + threadIdx.x, last, step, offset, load, use);
}

// ---- forward ----

// The block's merged triple, valid in thread 0.
__device__ Welford block_merge(Welford w) {
  __shared__ Welford per_warp[kReduceThreads / 32];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const Welford other{__shfl_down_sync(0xffffffffu, w.count, offset),
                        __shfl_down_sync(0xffffffffu, w.mean, offset),
                        __shfl_down_sync(0xffffffffu, w.m2, offset)};
    merge(w, other);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) per_warp[warp] = w;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int i = 1; i < int(blockDim.x / 32); ++i) merge(w, per_warp[i]);
  }
  return w;
}

// Pass 1 of the forward: the (mean, M2) of each (channel, split) range. Block b handles channel
// b / splits, range b % splits.
template <typename T, int W>
__global__ void __launch_bounds__(kReduceThreads)
    bn_stats_partial_kernel(const T* __restrict__ x, ChannelRanges r, float2* __restrict__ partials) {
  const int64_t c = blockIdx.x / r.splits;
  const uint32_t split = blockIdx.x % r.splits;
  Welford acc{0.f, 0.f, 0.f};
  for_each_range_vector<W>(
      r, c, split, [&](int64_t at) { return load_vec<W>(x + at); },
      [&]<int U>(const Vec<T, W>(&in)[U], const int64_t(&)[U]) {
        float values[U * W];
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int j = 0; j < W; ++j) values[u * W + j] = widen(in[u].v[j]);
        merge(acc, group_of(values));
      });
  acc = block_merge(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = make_float2(acc.mean, acc.m2);
}

// Pass 3 of the forward, for the elementwise driver: y = act((x - mean[c]) * scale[c] + beta[c] (+
// residual)). I is uint32_t when the tensor's element count fits.
template <typename T, typename I, BatchNormFusion F>
struct BnApplyOp {
  const T* x;
  const T* residual;  // add_relu only
  T* y;               // may alias x or residual: each element is read and written by one thread
  const float4* coefficients;
  I hw, channels;
  template <int W>
  __device__ void apply(int64_t e) const {
    const ForwardCoefficients k = forward_coefficients(coefficients[(I(e) / hw) % channels]);
    const Vec<T, W> vx = load_vec<W>(x + e);
    Vec<T, W> out;
    if constexpr (F == BatchNormFusion::add_relu) {
      const Vec<T, W> vr = load_vec<W>(residual + e);
#pragma unroll
      for (int j = 0; j < W; ++j)
        out.v[j] = narrow<T>(activate<F>(bn_affine(widen(vx.v[j]), k) + widen(vr.v[j])));
    } else {
#pragma unroll
      for (int j = 0; j < W; ++j) out.v[j] = narrow<T>(activate<F>(bn_affine(widen(vx.v[j]), k)));
    }
    store_vec<W>(y + e, out);
  }
};

// ---- backward ----

// The vectors of x, dy and y (y read with add_relu only) at one offset.
template <typename T, int W>
struct BackwardInputs {
  Vec<T, W> x, dy, y;
};

// Pass 1 of the backward: per (channel, split) range, sum g and sum g * (x - mean), with g the masked dy
// (the ReLU's y recomputed from x and the forward's coefficients, or read with add_relu); with add_relu,
// g is also the residual's gradient, written here (dresidual = g).
template <typename T, int W, BatchNormFusion F>
__global__ void __launch_bounds__(kReduceThreads)
    bn_backward_partial_kernel(const T* x, const T* y, const T* dy, T* dresidual, const float* saved_mean,
                               const float4* __restrict__ forward, ChannelRanges r,
                               float2* __restrict__ partials) {
  const int64_t c = blockIdx.x / r.splits;
  const uint32_t split = blockIdx.x % r.splits;
  const float mean = saved_mean[c];
  const ForwardCoefficients fk = forward_coefficients(F == BatchNormFusion::relu ? forward[c] : float4{});
  float sum_g = 0.f, sum_g_xc = 0.f;
  for_each_range_vector<W>(
      r, c, split,
      [&](int64_t at) {
        BackwardInputs<T, W> in{};  // y stays zero (and unread) but with add_relu
        in.x = load_vec<W>(x + at);
        in.dy = load_vec<W>(dy + at);
        if constexpr (F == BatchNormFusion::add_relu) in.y = load_vec<W>(y + at);
        return in;
      },
      [&]<int U>(const BackwardInputs<T, W>(&in)[U], const int64_t(&at)[U]) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          Vec<T, W> g;
#pragma unroll
          for (int j = 0; j < W; ++j) {
            const float xj = widen(in[u].x.v[j]);
            const float yj = F == BatchNormFusion::relu ? relu_output<T>(xj, fk) : widen(in[u].y.v[j]);
            const float gj = bn_output_grad<F>(widen(in[u].dy.v[j]), yj);
            g.v[j] = narrow<T>(gj);  // exact: gj is an element of dy or 0
            sum_g += gj;
            sum_g_xc += gj * (xj - mean);
          }
          if constexpr (F == BatchNormFusion::add_relu) store_vec<W>(dresidual + at[u], g);
        }
      });
  // Block sums in a fixed order: warps by shuffles, then warp 0 over the warps' results.
  __shared__ float2 per_warp[kReduceThreads / 32];
  sum_g = warp_sum(sum_g);
  sum_g_xc = warp_sum(sum_g_xc);
  if (threadIdx.x % 32 == 0) per_warp[threadIdx.x / 32] = make_float2(sum_g, sum_g_xc);
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int i = 1; i < int(blockDim.x / 32); ++i) sum_g += per_warp[i].x, sum_g_xc += per_warp[i].y;
    partials[blockIdx.x] = make_float2(sum_g, sum_g_xc);
  }
}

// Pass 3 of the backward, for the elementwise driver: dx = k * g + a * (x - mean) + b per channel, g
// the masked dy (relu: y recomputed from x), read back from dresidual (add_relu: pass 1 wrote it), or dy
// itself.
template <typename T, typename I, BatchNormFusion F>
struct BnBackwardDataOp {
  const T* x;
  const T* dy;         // relu and none
  const T* dresidual;  // add_relu only
  T* dx;               // may alias the inputs: each element is read and written by one thread
  const float4* coefficients;
  const float4* forward;  // relu only: the forward's (scale, beta, mean)
  I hw, channels;
  template <int W>
  __device__ void apply(int64_t e) const {
    const I c = (I(e) / hw) % channels;
    const float4 k = coefficients[c];
    const Vec<T, W> vx = load_vec<W>(x + e);
    Vec<T, W> g;
    if constexpr (F == BatchNormFusion::add_relu) {
      g = load_vec<W>(dresidual + e);
    } else if constexpr (F == BatchNormFusion::relu) {
      const ForwardCoefficients fk = forward_coefficients(forward[c]);
      g = load_vec<W>(dy + e);
#pragma unroll
      for (int j = 0; j < W; ++j)
        g.v[j] = narrow<T>(bn_output_grad<F>(widen(g.v[j]), relu_output<T>(widen(vx.v[j]), fk)));
    } else {
      g = load_vec<W>(dy + e);
    }
    Vec<T, W> out;
#pragma unroll
    for (int j = 0; j < W; ++j) {
      out.v[j] = narrow<T>(fmaf(k.x, widen(g.v[j]), fmaf(k.y, widen(vx.v[j]) - k.w, k.z)));
    }
    store_vec<W>(dx + e, out);
  }
};

// ---- host side ----

constexpr const char* kForward = "own_batchnorm_forward_training (NCHW)";
constexpr const char* kBackward = "own_batchnorm_backward (NCHW)";

}  // namespace

void nchw_forward_training(const OwnBatchNormLaunch& launch, const void* x, const void* residual,
                           const float* gamma, const float* beta, void* y, float* running_mean,
                           float* running_var, float* saved_mean, float* saved_inv_std, void* workspace,
                           float4* forward, cudaStream_t stream, const float* input_sums) {
  const BatchNormGeometry& g = launch.geometry;
  const bool add = g.fusion == BatchNormFusion::add_relu;
  const ChannelRanges r = channel_ranges(launch);
  const WorkspaceParts parts = workspace_parts(launch, workspace);
  const int64_t elements = g.batch * g.channels * g.h * g.w;
  const unsigned reduce_blocks = static_cast<unsigned>(g.channels * launch.splits);
  dispatch_float(g.dtype, kForward, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      constexpr size_t kVecBytes = kBnVec * sizeof(T);
      const T* in = static_cast<const T*>(x);
      const bool vector_ok = r.hw % kBnVec == 0 && aligned(x, kVecBytes) && aligned(y, kVecBytes) &&
                             (!add || aligned(residual, kVecBytes));
      // The statistics read x alone: vectors whenever x allows, whatever y and the residual.
      if (!input_sums) {
        if (r.hw % kBnVec == 0 && aligned(x, kVecBytes)) {
          bn_stats_partial_kernel<T, kBnVec>
              <<<reduce_blocks, kReduceThreads, 0, stream>>>(in, r, parts.partials);
        } else {
          bn_stats_partial_kernel<T, 1><<<reduce_blocks, kReduceThreads, 0, stream>>>(in, r, parts.partials);
        }
        DLB_KERNEL_LAUNCH_CHECK();
      }
      launch_stats_finalize(parts.partials, input_sums, r, g, gamma, beta, running_mean, running_var,
                            saved_mean, saved_inv_std, forward, stream);
      dispatch_fusion(g.fusion, [&](auto fusion_tag) {
        constexpr BatchNormFusion F = decltype(fusion_tag)::value;
        dispatch_index(elements, [&](auto index_tag) {
          using I = decltype(index_tag);
          const BnApplyOp<T, I, F> apply{
              in, static_cast<const T*>(residual), static_cast<T*>(y), forward, I(g.h * g.w), I(g.channels)};
          launch_elementwise<kBnVec>(elements, vector_ok, apply, stream);
        });
      });
    }
  });
}

void nchw_backward(const OwnBatchNormLaunch& launch, const void* x, const void* y, const void* dy,
                   const float* gamma, const float* saved_mean, const float* saved_inv_std, void* dx,
                   void* dresidual, float* dgamma, float* dbeta, bool accumulate, void* workspace,
                   const float4* forward, cudaStream_t stream) {
  const BatchNormGeometry& g = launch.geometry;
  const bool add = g.fusion == BatchNormFusion::add_relu;
  const ChannelRanges r = channel_ranges(launch);
  const WorkspaceParts parts = workspace_parts(launch, workspace);
  const int64_t elements = g.batch * g.channels * g.h * g.w;
  const unsigned reduce_blocks = static_cast<unsigned>(g.channels * launch.splits);
  dispatch_float(g.dtype, kBackward, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      constexpr size_t kVecBytes = kBnVec * sizeof(T);
      // y is read with add_relu only (without it its memory may hold something else by now).
      const bool vector_ok = r.hw % kBnVec == 0 && aligned(x, kVecBytes) && aligned(dy, kVecBytes) &&
                             aligned(dx, kVecBytes) &&
                             (!add || (aligned(y, kVecBytes) && aligned(dresidual, kVecBytes)));
      const T *tx = static_cast<const T*>(x), *ty = static_cast<const T*>(y),
              *tdy = static_cast<const T*>(dy);
      T* tdres = static_cast<T*>(dresidual);
      dispatch_fusion(g.fusion, [&](auto fusion_tag) {
        constexpr BatchNormFusion F = decltype(fusion_tag)::value;
        if (vector_ok) {
          bn_backward_partial_kernel<T, kBnVec, F><<<reduce_blocks, kReduceThreads, 0, stream>>>(
              tx, ty, tdy, tdres, saved_mean, forward, r, parts.partials);
        } else {
          bn_backward_partial_kernel<T, 1, F><<<reduce_blocks, kReduceThreads, 0, stream>>>(
              tx, ty, tdy, tdres, saved_mean, forward, r, parts.partials);
        }
        DLB_KERNEL_LAUNCH_CHECK();
        launch_backward_finalize(parts.partials, r, gamma, saved_mean, saved_inv_std, dgamma, dbeta,
                                 accumulate, parts.coefficients, stream);
        dispatch_index(elements, [&](auto index_tag) {
          using I = decltype(index_tag);
          const BnBackwardDataOp<T, I, F> op{
              tx, tdy, tdres, static_cast<T*>(dx), parts.coefficients, forward, I(g.h * g.w), I(g.channels)};
          launch_elementwise<kBnVec>(elements, vector_ok, op, stream);
        });
      });
    }
  });
}

}  // namespace dlbench::cuda::bn
