// Batch-norm training over NCHW tensors: forward (statistics, then normalise) and backward, with the
// fusions of BatchNormFusion (ReLU, residual add + ReLU) folded into the same passes.
//
// Why our own: cuDNN's NCHW batch norm (CUDNN_BATCHNORM_SPATIAL, with our separate add and ReLU kernels)
// ran 2-5x slower than the bytes it must move on an H200 (cuda_batchnorm.cc has the numbers). The passes
// here are the minimum: the forward reads x twice and writes y once (plus the residual), the backward
// reads x, dy (and y) twice and writes dx (and dresidual) once.
//
// A channel's M = N * HW values lie in N rows of HW consecutive elements (element (n, c, s) at
// n * C * HW + c * HW + s). The reductions cut each channel's M values into `splits` contiguous ranges of
// `chunk` values, one block each, so that C * splits blocks fill the GPU (about 4 per multiprocessor)
// whatever C is; a block writes its range's partial result to the workspace and a finalize kernel (one
// warp per channel) merges a channel's partials in double, in a fixed order: no atomics, the results do
// not depend on scheduling.
//
// Statistics: each thread keeps a Welford triple (count, mean, M2) in float and merges groups of values
// into it with Chan's formula; threads, warps and splits are merged the same way. Unlike sums of x and
// x^2, this does not cancel when the mean is large against the spread.
//
// Vectors: 4 elements per access (16 bytes in f32, 8 in f16/bf16) when HW % 4 == 0 and every pointer is
// aligned for them (a vector then never leaves its row, nor its channel), element by element otherwise.
#include <algorithm>
#include <cmath>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace dlbench::cuda {
namespace {

using namespace detail;

constexpr int kBnVec = 4;              // elements per vector access
constexpr int kReduceThreads = 256;    // block size of the partial reductions
constexpr int kReduceUnroll = 4;       // vectors a thread loads before it uses any (loads in flight)
constexpr int kBlocksPerSm = 4;        // what the splits aim for: C * splits ~ 4 blocks per multiprocessor
constexpr int kFinalizeThreads = 128;  // finalize kernels: one warp per channel
constexpr int kChannelsPerFinalizeBlock = kFinalizeThreads / 32;

// Where the workspace keeps what: per-channel coefficients first (16-byte aligned float4), then the
// per-(channel, split) partials.
struct WorkspaceParts {
  float4* coefficients;  // forward: (scale, shift, -, -); backward: dx = k * g + a * (x - mean) + b
  float2* partials;      // forward: (mean, M2) of a range; backward: (sum g, sum g * (x - mean))
};

size_t coefficient_bytes(int64_t channels) {
  constexpr size_t kAlign = 256;
  const size_t bytes = static_cast<size_t>(channels) * sizeof(float4);
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

WorkspaceParts workspace_parts(const BatchNormNchwLaunch& launch, void* workspace) {
  auto* base = static_cast<unsigned char*>(workspace);
  return {reinterpret_cast<float4*>(base),
          reinterpret_cast<float2*>(base + coefficient_bytes(launch.geometry.channels))};
}

// Index arithmetic inside a channel is 32-bit (M < 2^31, which the launcher checks); offsets into the
// tensor are 64-bit.
struct ChannelRanges {
  int64_t channels;
  uint32_t hw, values, splits, chunk;
};

ChannelRanges channel_ranges(const BatchNormNchwLaunch& launch) {
  const BatchNormGeometry& g = launch.geometry;
  return {g.channels, static_cast<uint32_t>(g.h * g.w), static_cast<uint32_t>(g.batch * g.h * g.w),
          static_cast<uint32_t>(launch.splits), static_cast<uint32_t>(launch.chunk)};
}

// Visits the vectors of W elements of range `split` of channel c, kReduceUnroll vectors at a time where
// it can, all loads issued before the first use (the loads in flight are what bounds a reduction).
// `load(offset)` returns what one vector needs; `use(in, at)` gets U of those and their offsets, U being
// kReduceUnroll or 1.
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
  using Loaded = decltype(load(int64_t{0}));
  uint32_t v = begin / W + threadIdx.x;
  for (; v + (kReduceUnroll - 1) * step < last; v += kReduceUnroll * step) {
    int64_t at[kReduceUnroll];
    Loaded in[kReduceUnroll];
#pragma unroll
    for (int u = 0; u < kReduceUnroll; ++u) at[u] = offset(v + u * step);
#pragma unroll
    for (int u = 0; u < kReduceUnroll; ++u) in[u] = load(at[u]);
    use(in, at);
  }
  for (; v < last; v += step) {
    const int64_t at[1] = {offset(v)};
    const Loaded in[1] = {load(at[0])};
    use(in, at);
  }
}

// ---- forward ----

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

// Merges K values into `acc`: their own mean and M2 first (one division for the K of them).
template <int K>
__device__ __forceinline__ void add_values(Welford& acc, const float (&v)[K]) {
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < K; ++j) sum += v[j];
  const float mean = sum * (1.f / K);
  float m2 = 0.f;
#pragma unroll
  for (int j = 0; j < K; ++j) m2 += (v[j] - mean) * (v[j] - mean);
  merge(acc, Welford{float(K), mean, m2});
}

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
        add_values(acc, values);
      });
  acc = block_merge(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = make_float2(acc.mean, acc.m2);
}

// The number of values of range `split` (the last one may be short).
__device__ __forceinline__ double range_count(const ChannelRanges& r, uint32_t split) {
  return double(min(r.chunk, r.values - split * r.chunk));
}

// Pass 2 of the forward, one warp per channel: merges the channel's partials in double (lane l takes
// splits l, l + 32, ...; then the lanes in a fixed tree), writes the saved and running statistics and the
// channel's scale and shift for the apply pass.
__global__ void __launch_bounds__(kFinalizeThreads)
    bn_stats_finalize_kernel(const float2* __restrict__ partials, ChannelRanges r, double epsilon,
                             double momentum, const float* __restrict__ gamma, const float* __restrict__ beta,
                             float* __restrict__ running_mean, float* __restrict__ running_var,
                             float* __restrict__ saved_mean, float* __restrict__ saved_inv_std,
                             float4* __restrict__ coefficients) {
  const int64_t c = int64_t(blockIdx.x) * kChannelsPerFinalizeBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (c >= r.channels) return;  // the whole warp leaves: shuffles below see full warps only
  double count = 0, mean = 0, m2 = 0;
  for (uint32_t s = lane; s < r.splits; s += 32) {
    const float2 p = partials[c * r.splits + s];
    chan_merge(count, mean, m2, range_count(r, s), double(p.x), double(p.y));
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const double other_count = __shfl_down_sync(0xffffffffu, count, offset),
                 other_mean = __shfl_down_sync(0xffffffffu, mean, offset),
                 other_m2 = __shfl_down_sync(0xffffffffu, m2, offset);
    chan_merge(count, mean, m2, other_count, other_mean, other_m2);
  }
  if (lane != 0) return;
  const double values = double(r.values);
  const double var = m2 / values;  // biased: what normalises the batch
  const double inv_std = 1.0 / sqrt(var + epsilon);
  saved_mean[c] = float(mean);
  saved_inv_std[c] = float(inv_std);
  running_mean[c] = float((1.0 - momentum) * double(running_mean[c]) + momentum * mean);
  // The running variance tracks the unbiased estimate (the contract, as PyTorch).
  running_var[c] = float((1.0 - momentum) * double(running_var[c]) + momentum * var * values / (values - 1));
  const double scale = double(gamma[c]) * inv_std;
  coefficients[c] = make_float4(float(scale), float(double(beta[c]) - mean * scale), 0.f, 0.f);
}

template <BatchNormFusion F>
__device__ __forceinline__ float activate(float z) {
  if constexpr (F == BatchNormFusion::none) {
    return z;
  } else {
    return z < 0.f ? 0.f : z;  // NaN and -0 pass, as the reference's max(z, 0)
  }
}

// Pass 3 of the forward, for the elementwise driver: y = act(x * scale[c] + shift[c] (+ residual)).
// I is uint32_t when the tensor's element count fits.
template <typename T, typename I, BatchNormFusion F>
struct BnApplyOp {
  const T* x;
  const T* residual;  // add_relu only
  T* y;               // may alias x or residual: each element is read and written by one thread
  const float4* coefficients;
  I hw, channels;
  template <int W>
  __device__ void apply(int64_t e) const {
    const float4 k = coefficients[(I(e) / hw) % channels];
    const Vec<T, W> vx = load_vec<W>(x + e);
    Vec<T, W> out;
    if constexpr (F == BatchNormFusion::add_relu) {
      const Vec<T, W> vr = load_vec<W>(residual + e);
#pragma unroll
      for (int j = 0; j < W; ++j)
        out.v[j] = narrow<T>(activate<F>(fmaf(widen(vx.v[j]), k.x, k.y) + widen(vr.v[j])));
    } else {
#pragma unroll
      for (int j = 0; j < W; ++j) out.v[j] = narrow<T>(activate<F>(fmaf(widen(vx.v[j]), k.x, k.y)));
    }
    store_vec<W>(y + e, out);
  }
};

// ---- backward ----

// The gradient reaching the batch norm's output: dy, masked by the ReLU (y > 0) when there is one.
template <BatchNormFusion F>
__device__ __forceinline__ float bn_output_grad(float dy, float y) {
  if constexpr (F == BatchNormFusion::none) {
    return dy;
  } else {
    return y > 0.f ? dy : 0.f;
  }
}

// The vectors of x, dy and y (y read only with a ReLU) at one offset.
template <typename T, int W>
struct BackwardInputs {
  Vec<T, W> x, dy, y;
};

// Pass 1 of the backward: per (channel, split) range, sum g and sum g * (x - mean), with g the masked dy;
// with add_relu, g is also the residual's gradient, written here (dresidual = g).
template <typename T, int W, BatchNormFusion F>
__global__ void __launch_bounds__(kReduceThreads)
    bn_backward_partial_kernel(const T* x, const T* y, const T* dy, T* dresidual, const float* saved_mean,
                               ChannelRanges r, float2* __restrict__ partials) {
  const int64_t c = blockIdx.x / r.splits;
  const uint32_t split = blockIdx.x % r.splits;
  const float mean = saved_mean[c];
  float sum_g = 0.f, sum_g_xc = 0.f;
  for_each_range_vector<W>(
      r, c, split,
      [&](int64_t at) {
        BackwardInputs<T, W> in{};  // y stays zero (and unread) without a ReLU
        in.x = load_vec<W>(x + at);
        in.dy = load_vec<W>(dy + at);
        if constexpr (F != BatchNormFusion::none) in.y = load_vec<W>(y + at);
        return in;
      },
      [&]<int U>(const BackwardInputs<T, W>(&in)[U], const int64_t(&at)[U]) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          Vec<T, W> g;
#pragma unroll
          for (int j = 0; j < W; ++j) {
            const float gj = bn_output_grad<F>(widen(in[u].dy.v[j]), widen(in[u].y.v[j]));
            g.v[j] = narrow<T>(gj);  // exact: gj is an element of dy or 0
            sum_g += gj;
            sum_g_xc += gj * (widen(in[u].x.v[j]) - mean);
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

// Pass 2 of the backward, one warp per channel: the channel's sums in double (fixed order), dgamma and
// dbeta written or added, and the coefficients of dx = k * g + a * (x - mean) + b, which is
//   gamma * inv_std * (g - mean(g) - xhat * mean(g * xhat)),  xhat = (x - mean) * inv_std.
__global__ void __launch_bounds__(kFinalizeThreads)
    bn_backward_finalize_kernel(const float2* __restrict__ partials, ChannelRanges r,
                                const float* __restrict__ gamma, const float* __restrict__ saved_mean,
                                const float* __restrict__ saved_inv_std, float* __restrict__ dgamma,
                                float* __restrict__ dbeta, bool accumulate,
                                float4* __restrict__ coefficients) {
  const int64_t c = int64_t(blockIdx.x) * kChannelsPerFinalizeBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (c >= r.channels) return;  // the whole warp leaves
  double sum_g = 0, sum_g_xc = 0;
  for (uint32_t s = lane; s < r.splits; s += 32) {
    const float2 p = partials[c * r.splits + s];
    sum_g += double(p.x);
    sum_g_xc += double(p.y);
  }
  sum_g = warp_sum(sum_g);
  sum_g_xc = warp_sum(sum_g_xc);
  if (lane != 0) return;
  const double inv_std = double(saved_inv_std[c]), values = double(r.values);
  const double channel_dgamma = inv_std * sum_g_xc;  // sum g * xhat
  dbeta[c] = float(accumulate ? double(dbeta[c]) + sum_g : sum_g);
  dgamma[c] = float(accumulate ? double(dgamma[c]) + channel_dgamma : channel_dgamma);
  const double k = double(gamma[c]) * inv_std;
  coefficients[c] = make_float4(float(k), float(-k * inv_std * channel_dgamma / values),
                                float(-k * sum_g / values), saved_mean[c]);
}

// Pass 3 of the backward, for the elementwise driver: dx = k * g + a * (x - mean) + b per channel, g
// recomputed from dy and y (relu), read back from dresidual (add_relu: pass 1 wrote it), or dy itself.
template <typename T, typename I, BatchNormFusion F>
struct BnBackwardDataOp {
  const T* x;
  const T* y;          // relu only
  const T* dy;         // relu and none
  const T* dresidual;  // add_relu only
  T* dx;               // may alias the inputs: each element is read and written by one thread
  const float4* coefficients;
  I hw, channels;
  template <int W>
  __device__ void apply(int64_t e) const {
    const float4 k = coefficients[(I(e) / hw) % channels];
    const Vec<T, W> vx = load_vec<W>(x + e);
    Vec<T, W> g;
    if constexpr (F == BatchNormFusion::add_relu) {
      g = load_vec<W>(dresidual + e);
    } else if constexpr (F == BatchNormFusion::relu) {
      const Vec<T, W> vy = load_vec<W>(y + e);
      g = load_vec<W>(dy + e);
#pragma unroll
      for (int j = 0; j < W; ++j) g.v[j] = narrow<T>(bn_output_grad<F>(widen(g.v[j]), widen(vy.v[j])));
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

constexpr const char* kForward = "batchnorm_nchw_forward_training";
constexpr const char* kBackward = "batchnorm_nchw_backward";

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

void check_launch(const BatchNormNchwLaunch& launch, const char* op) {
  const BatchNormGeometry& g = launch.geometry;
  DLB_KERNEL_REQUIRE(g.layout == Layout::nchw, op, "the layout is not NCHW");
  DLB_KERNEL_REQUIRE(g.dtype == DType::f32 || g.dtype == DType::f16 || g.dtype == DType::bf16, op,
                     "the dtype is not f32, f16 or bf16");
  DLB_KERNEL_REQUIRE(g.batch * g.h * g.w > 1, op, "training needs more than one value per channel");
  DLB_KERNEL_REQUIRE(
      launch.splits >= 1 && launch.chunk % kBnVec == 0 && launch.splits * launch.chunk >= g.batch * g.h * g.w,
      op, "the launch was not made by batchnorm_nchw_launch");
}

unsigned finalize_blocks(int64_t channels) {
  return static_cast<unsigned>((channels + kChannelsPerFinalizeBlock - 1) / kChannelsPerFinalizeBlock);
}

}  // namespace

BatchNormNchwLaunch batchnorm_nchw_launch(const BatchNormGeometry& g) {
  const char* op = "batchnorm_nchw_launch";
  DLB_KERNEL_REQUIRE(g.batch > 0 && g.channels > 0 && g.h > 0 && g.w > 0, op, "sizes must be positive");
  const int64_t values = g.batch * g.h * g.w;
  // Index arithmetic inside a channel is 32-bit; the grid is one block per (channel, split).
  DLB_KERNEL_REQUIRE(values <= int64_t(INT32_MAX) - kBnVec, op, "more than 2^31 values per channel");
  DLB_KERNEL_REQUIRE(g.channels <= int64_t(INT32_MAX) / 4, op, "too many channels");
  BatchNormNchwLaunch launch;
  launch.geometry = g;
  const int64_t wanted_blocks = int64_t(multiprocessor_count()) * kBlocksPerSm;
  // Enough splits for the blocks wanted, but no range shorter than one unrolled load of every thread.
  const int64_t most_splits = std::max<int64_t>(1, values / (kReduceThreads * kReduceUnroll * kBnVec));
  const int64_t splits = std::clamp<int64_t>((wanted_blocks + g.channels - 1) / g.channels, 1, most_splits);
  // Ranges of whole vectors (also when the vector path is not taken: it costs nothing).
  const int64_t per_split = (values + splits - 1) / splits;
  launch.chunk = (per_split + kBnVec - 1) / kBnVec * kBnVec;
  launch.splits = (values + launch.chunk - 1) / launch.chunk;
  return launch;
}

size_t batchnorm_nchw_workspace_bytes(const BatchNormNchwLaunch& launch) {
  return coefficient_bytes(launch.geometry.channels) +
         static_cast<size_t>(launch.geometry.channels * launch.splits) * sizeof(float2);
}

void batchnorm_nchw_forward_training(const BatchNormNchwLaunch& launch, const void* x, const void* residual,
                                     const float* gamma, const float* beta, void* y, float* running_mean,
                                     float* running_var, float* saved_mean, float* saved_inv_std,
                                     void* workspace, cudaStream_t stream) {
  check_launch(launch, kForward);
  const BatchNormGeometry& g = launch.geometry;
  const bool add = g.fusion == BatchNormFusion::add_relu;
  DLB_KERNEL_REQUIRE(!add || residual != nullptr, kForward, "add_relu needs the residual");
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
      if (r.hw % kBnVec == 0 && aligned(x, kVecBytes)) {
        bn_stats_partial_kernel<T, kBnVec>
            <<<reduce_blocks, kReduceThreads, 0, stream>>>(in, r, parts.partials);
      } else {
        bn_stats_partial_kernel<T, 1><<<reduce_blocks, kReduceThreads, 0, stream>>>(in, r, parts.partials);
      }
      DLB_KERNEL_LAUNCH_CHECK();
      bn_stats_finalize_kernel<<<finalize_blocks(g.channels), kFinalizeThreads, 0, stream>>>(
          parts.partials, r, g.epsilon, g.momentum, gamma, beta, running_mean, running_var, saved_mean,
          saved_inv_std, parts.coefficients);
      DLB_KERNEL_LAUNCH_CHECK();
      dispatch_fusion(g.fusion, [&](auto fusion_tag) {
        constexpr BatchNormFusion F = decltype(fusion_tag)::value;
        dispatch_index(elements, [&](auto index_tag) {
          using I = decltype(index_tag);
          const BnApplyOp<T, I, F> apply{in,
                                         static_cast<const T*>(residual),
                                         static_cast<T*>(y),
                                         parts.coefficients,
                                         I(g.h * g.w),
                                         I(g.channels)};
          launch_elementwise<kBnVec>(elements, vector_ok, apply, stream);
        });
      });
    }
  });
}

void batchnorm_nchw_backward(const BatchNormNchwLaunch& launch, const void* x, const void* y, const void* dy,
                             const float* gamma, const float* saved_mean, const float* saved_inv_std,
                             void* dx, void* dresidual, float* dgamma, float* dbeta, bool accumulate,
                             void* workspace, cudaStream_t stream) {
  check_launch(launch, kBackward);
  const BatchNormGeometry& g = launch.geometry;
  const bool add = g.fusion == BatchNormFusion::add_relu, relu = g.fusion != BatchNormFusion::none;
  DLB_KERNEL_REQUIRE(!add || dresidual != nullptr, kBackward, "add_relu needs dresidual");
  const ChannelRanges r = channel_ranges(launch);
  const WorkspaceParts parts = workspace_parts(launch, workspace);
  const int64_t elements = g.batch * g.channels * g.h * g.w;
  const unsigned reduce_blocks = static_cast<unsigned>(g.channels * launch.splits);
  dispatch_float(g.dtype, kBackward, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      constexpr size_t kVecBytes = kBnVec * sizeof(T);
      // y is read only with a ReLU (without one its memory may hold something else by now).
      const bool vector_ok = r.hw % kBnVec == 0 && aligned(x, kVecBytes) && aligned(dy, kVecBytes) &&
                             aligned(dx, kVecBytes) && (!relu || aligned(y, kVecBytes)) &&
                             (!add || aligned(dresidual, kVecBytes));
      const T *tx = static_cast<const T*>(x), *ty = static_cast<const T*>(y),
              *tdy = static_cast<const T*>(dy);
      T* tdres = static_cast<T*>(dresidual);
      dispatch_fusion(g.fusion, [&](auto fusion_tag) {
        constexpr BatchNormFusion F = decltype(fusion_tag)::value;
        if (vector_ok) {
          bn_backward_partial_kernel<T, kBnVec, F><<<reduce_blocks, kReduceThreads, 0, stream>>>(
              tx, ty, tdy, tdres, saved_mean, r, parts.partials);
        } else {
          bn_backward_partial_kernel<T, 1, F><<<reduce_blocks, kReduceThreads, 0, stream>>>(
              tx, ty, tdy, tdres, saved_mean, r, parts.partials);
        }
        DLB_KERNEL_LAUNCH_CHECK();
        bn_backward_finalize_kernel<<<finalize_blocks(g.channels), kFinalizeThreads, 0, stream>>>(
            parts.partials, r, gamma, saved_mean, saved_inv_std, dgamma, dbeta, accumulate,
            parts.coefficients);
        DLB_KERNEL_LAUNCH_CHECK();
        dispatch_index(elements, [&](auto index_tag) {
          using I = decltype(index_tag);
          const BnBackwardDataOp<T, I, F> op{
              tx, ty, tdy, tdres, static_cast<T*>(dx), parts.coefficients, I(g.h * g.w), I(g.channels)};
          launch_elementwise<kBnVec>(elements, vector_ok, op, stream);
        });
      });
    }
  });
}

}  // namespace dlbench::cuda
