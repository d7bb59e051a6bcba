// Softmax cross-entropy against label-smoothed targets (see backend.h and reference_loss.cc).
//
// Forward, per row of logits x[K] with label L and smoothing s:
//   m = max x,  S = sum exp(x - m),  D = sum (x - m),  lse = m + log S
//   probs[j] = exp(x[j] - lse)
//   row loss = (1 - s) * (lse - x[L]) + s * (lse - mean x) = (1 - s) * (lse - x[L]) + s * (log S - D / K)
// (the smoothing term is -(s/K) sum_j log_softmax[j]; every term is a difference of nearby values, so
// nothing cancels catastrophically).
//
// Two launches, no workspace, deterministic:
//  1. rows_kernel: a group of 32 threads (K <= 256) or a whole block of 256 (larger K) per row; three
//     passes over the row (max; sum of exp and of x - m; probs), the second and third served from L1.
//     It writes every probability except two stash slots per row: probs[L] holds lse and, when s > 0 and
//     K > 1, probs[(L + 1) % K] holds log S - D / K.
//  2. finalize_kernel: ONE block reads the stashes (2 floats and 2 logits a row), restores the two
//     probabilities with the very expression rows_kernel uses (bit-identical), and sums the row losses in
//     f64 in a fixed order: loss[0] = sum / N. No float atomics, so the loss does not depend on timing.
// Arithmetic is f32 for f32/f16/bf16 logits and f64 for f64 logits; lse is rounded to f32 once (it is
// stashed in f32 probs) and both kernels use that rounded value.
//
// Backward: an elementwise pass, dlogits = (scale / N) * (probs - target), 16-byte loads of probs.
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace dlbench::cuda {
namespace {

using namespace detail;

constexpr int kLossThreads = 256;

// Sum or max over the TPR threads of a row group; every thread of the group gets the result. For
// TPR == 256 (one row per block) the 8 warp results are combined through shared memory in a fixed order.
template <int TPR, bool kMax, typename A>
__device__ __forceinline__ A group_reduce(A x, A* smem) {
  x = kMax ? warp_max(x) : warp_sum(x);
  if constexpr (TPR == 32) {
    return x;
  } else {
    static_assert(TPR == kLossThreads);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) smem[warp] = x;
    __syncthreads();
    x = smem[0];
#pragma unroll
    for (int w = 1; w < TPR / 32; ++w) x = kMax ? max(x, smem[w]) : x + smem[w];
    __syncthreads();  // smem is reused by the next reduction
    return x;
  }
}

__device__ __forceinline__ float exp_acc(float x) { return expf(x); }
__device__ __forceinline__ double exp_acc(double x) { return exp(x); }
__device__ __forceinline__ float log_acc(float x) { return logf(x); }
__device__ __forceinline__ double log_acc(double x) { return log(x); }

template <typename T, int TPR>
__global__ void __launch_bounds__(kLossThreads)
    rows_kernel(const T* __restrict__ logits, const int32_t* __restrict__ labels, int64_t n, int64_t k,
                float smoothing, float* __restrict__ probs) {
  using A = Acc<T>;
  __shared__ A smem[kLossThreads / 32];
  constexpr int kRowsPerBlock = kLossThreads / TPR;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / TPR;
  const int t = threadIdx.x % TPR;
  if (row >= n) return;  // a whole group (for TPR == 256, the whole block) leaves together
  const T* x = logits + row * k;
  float* p = probs + row * k;

  A m = -INFINITY;
  for (int64_t j = t; j < k; j += TPR) m = max(m, widen(x[j]));
  m = group_reduce<TPR, true>(m, smem);

  A sum_exp = 0, sum_diff = 0;
  for (int64_t j = t; j < k; j += TPR) {
    const A d = widen(x[j]) - m;
    sum_exp += exp_acc(d);
    sum_diff += d;
  }
  sum_exp = group_reduce<TPR, false>(sum_exp, smem);
  sum_diff = group_reduce<TPR, false>(sum_diff, smem);

  const A log_s = log_acc(sum_exp);
  const float lse = static_cast<float>(m + log_s);
  const int64_t label = labels[row];
  const bool stash_smoothing = smoothing != 0.f && k > 1;
  const int64_t second = label + 1 == k ? 0 : label + 1;
  for (int64_t j = t; j < k; j += TPR) {
    if (j == label || (stash_smoothing && j == second)) continue;
    p[j] = static_cast<float>(exp_acc(widen(x[j]) - static_cast<A>(lse)));
  }
  if (t == 0) {
    p[label] = lse;
    if (stash_smoothing) p[second] = static_cast<float>(log_s - sum_diff / static_cast<A>(k));
  }
}

constexpr int kFinalizeThreads = 1024;

template <typename T>
__global__ void __launch_bounds__(kFinalizeThreads)
    finalize_kernel(const T* __restrict__ logits, const int32_t* __restrict__ labels, int64_t n, int64_t k,
                    float smoothing, float* __restrict__ probs, float* __restrict__ loss) {
  using A = Acc<T>;
  __shared__ double warp_totals[kFinalizeThreads / 32];
  const bool stash_smoothing = smoothing != 0.f && k > 1;
  double total = 0;
  // kUnroll rows per thread per iteration, their loads issued before any use: the dependent chain
  // (label, then stash and logit) costs two memory latencies per iteration, not per row.
  constexpr int kUnroll = 4;
  for (int64_t base = threadIdx.x; base < n; base += int64_t(kUnroll) * kFinalizeThreads) {
    int64_t label[kUnroll], second[kUnroll];
    float lse[kUnroll], b[kUnroll];
    A x_label[kUnroll], x_second[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t row = base + int64_t(u) * kFinalizeThreads;
      label[u] = row < n ? row * k + labels[row] : 0;  // flat index of the label's slot
      second[u] = row < n ? row * k + (labels[row] + 1 == k ? 0 : labels[row] + 1) : 0;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t row = base + int64_t(u) * kFinalizeThreads;
      if (row < n) {
        lse[u] = probs[label[u]];
        x_label[u] = widen(logits[label[u]]);
        if (stash_smoothing) {
          b[u] = probs[second[u]];
          x_second[u] = widen(logits[second[u]]);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t row = base + int64_t(u) * kFinalizeThreads;
      if (row >= n) continue;
      const A a = static_cast<A>(lse[u]) - x_label[u];  // -log_softmax[label]
      probs[label[u]] = static_cast<float>(exp_acc(x_label[u] - static_cast<A>(lse[u])));
      A row_loss = a;
      if (stash_smoothing) {  // b = lse - mean x
        probs[second[u]] = static_cast<float>(exp_acc(x_second[u] - static_cast<A>(lse[u])));
        row_loss = (A(1) - static_cast<A>(smoothing)) * a + static_cast<A>(smoothing) * static_cast<A>(b[u]);
      }
      total += static_cast<double>(row_loss);
    }
  }
  total = warp_sum(total);
  if (threadIdx.x % 32 == 0) warp_totals[threadIdx.x / 32] = total;
  __syncthreads();
  if (threadIdx.x == 0) {
    double sum = 0;
    for (int w = 0; w < kFinalizeThreads / 32; ++w) sum += warp_totals[w];
    loss[0] = static_cast<float>(sum / static_cast<double>(n));
  }
}

// dlogits[e] = c * (probs[e] - target), target = hit for the label's column, other elsewhere.
template <typename D>
struct XentBackwardOp {
  const float* probs;
  const int32_t* labels;
  D* dlogits;
  int64_t n, k;
  float c, hit, other;
  template <int W>
  __device__ void apply(int64_t e) const {
    const Vec<float, W> p = load_vec<W>(probs + e);
    int64_t row = e / k, col = e - row * k;
    int64_t label = labels[row];
    Vec<D, W> out;
#pragma unroll
    for (int j = 0; j < W; ++j) {
      out.v[j] = narrow<D>(c * (p.v[j] - (col == label ? hit : other)));
      if (++col == k && j + 1 < W) {  // the next element starts a row (k may be smaller than W)
        col = 0;
        if (++row < n) label = labels[row];
      }
    }
    store_vec<W>(dlogits + e, out);
  }
};

void require_shape(const char* op, int64_t n, int64_t k, float smoothing) {
  DLB_KERNEL_REQUIRE(n >= 0 && k >= 0, op, "n and k must not be negative");
  DLB_KERNEL_REQUIRE(smoothing >= 0.f && smoothing <= 1.f, op, "label_smoothing is outside [0, 1]");
}

}  // namespace

void softmax_cross_entropy_forward(const void* logits, DType logits_dtype, const int32_t* labels, int64_t n,
                                   int64_t k, float label_smoothing, float* probs, float* loss,
                                   cudaStream_t stream) {
  const char* op = "softmax_cross_entropy_forward";
  require_shape(op, n, k, label_smoothing);
  DLB_KERNEL_REQUIRE(n > 0 && k > 0, op, "the logits are empty (the mean over no rows is undefined)");
  dispatch_float(logits_dtype, op, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(logits);
    if (k <= 256) {
      constexpr int kRows = kLossThreads / 32;
      const int64_t blocks = (n + kRows - 1) / kRows;
      DLB_KERNEL_REQUIRE(blocks <= int64_t(INT32_MAX), op, "too many rows");
      rows_kernel<T, 32><<<static_cast<unsigned>(blocks), kLossThreads, 0, stream>>>(x, labels, n, k,
                                                                                   label_smoothing, probs);
    } else {
      DLB_KERNEL_REQUIRE(n <= int64_t(INT32_MAX), op, "too many rows");
      rows_kernel<T, kLossThreads><<<static_cast<unsigned>(n), kLossThreads, 0, stream>>>(
          x, labels, n, k, label_smoothing, probs);
    }
    DLB_KERNEL_LAUNCH_CHECK();
    finalize_kernel<T><<<1, kFinalizeThreads, 0, stream>>>(x, labels, n, k, label_smoothing, probs, loss);
    DLB_KERNEL_LAUNCH_CHECK();
  });
}

void softmax_cross_entropy_backward(const float* probs, const int32_t* labels, int64_t n, int64_t k,
                                    float label_smoothing, float scale, void* dlogits, DType dlogits_dtype,
                                    cudaStream_t stream) {
  const char* op = "softmax_cross_entropy_backward";
  require_shape(op, n, k, label_smoothing);
  if (n == 0 || k == 0) return;
  const double s = label_smoothing;
  const float c = static_cast<float>(static_cast<double>(scale) / static_cast<double>(n));
  const float hit = static_cast<float>((1.0 - s) + s / static_cast<double>(k));
  const float other = static_cast<float>(s / static_cast<double>(k));
  dispatch_float(dlogits_dtype, op, [&](auto tag) {
    using D = decltype(tag);
    constexpr int V = 4;  // 16 bytes of probs
    const bool vector_ok = aligned(probs, 16) && aligned(dlogits, V * sizeof(D));
    launch_elementwise<V>(n * k, vector_ok,
                          XentBackwardOp<D>{probs, labels, static_cast<D*>(dlogits), n, k, c, hit, other}, stream);
  });
}

}  // namespace dlbench::cuda
