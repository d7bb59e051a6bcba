// Softmax cross-entropy against label-smoothed targets (see backend.h and reference_loss.cc).
//
// Forward, per row of logits x[K] with label L and smoothing s:
//   m = max x,  S = sum exp(x - m),  D = sum (x - m)
//   probs[j] = exp((x[j] - m) - log S)
//   row loss = (1 - s) * a + s * b,  a = log S - (x[L] - m) = -log probs[L],  b = log S - D / K
// (b is -mean_j log_softmax[j]: the smoothing term. Every quantity is a difference of nearby values or a
// small logarithm, so nothing cancels catastrophically, however large the logits.)
//
// Two launches, no workspace, deterministic:
//  1. The row kernel, one of two:
//     K <= 1024: warp_rows_kernel, a warp per row (8 rows a block), the row held in registers (ITEMS =
//       K / 32 rounded up to a power of two, a compile-time count), so logits are read once; reductions
//       are warp shuffles, no block barriers.
//     K > 1024: block_rows_kernel, a block of 256 per row, three passes over the row (max; sums of exp
//       and of x - m; probs), the second and third served from L1.
//     Both write every probability except two stash slots per row: probs[L] holds a and, when s > 0 and
//     K > 1, probs[(L + 1) % K] holds b.
//  2. finalize_kernel: ONE block reads the stashes (2 floats and 2 logits a row, 8 rows in flight per
//     thread), restores the two probabilities (probs[L] = exp(-a), probs[L'] = exp((x[L'] - x[L]) - a)),
//     and sums the row losses in f64 in a fixed order: loss[0] = sum / N. No float atomics, so the loss
//     does not depend on timing.
// Arithmetic is f32 for f32/f16/bf16 logits and f64 for f64 logits (a and b pass through f32 stashes).
//
// Backward: an elementwise pass, dlogits = (scale / N) * (probs - target), 16-byte loads of probs.
//
// Fused (the language model's loss, Backend::softmax_cross_entropy_fused): each row's loss into row_loss,
// then, with a gradient, the gradient written over the logits it was computed from; mean_of_rows_kernel
// sums the row losses in f64 in a fixed order. A row that fits in shared memory (GPT-2's 50,304 bf16
// logits: 98 KiB) is read from memory once, into shared memory, with its max and sum of exponentials
// taken in the same pass (online: each thread's running sum is rescaled when its max grows), and the
// gradient is written from that copy: one read and one write of the logits, 16 bytes an access
// (fused_rows_shared_kernel). Other rows take the block kernel's passes (fused_rows_kernel), three reads.
//
// A vocabulary padded to a round width (GPT-2's 50,257 tokens in rows of 50,304) runs the same kernels
// with a row stride: the statistics, stashes and smoothing cover the valid columns alone, and the padded
// columns get probability 0 and gradient 0.
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace dlbench::cuda {
namespace {

using namespace detail;

constexpr int kLossThreads = 256;

// Sum or max over a block of kLossThreads; every thread gets the result. The 8 warp results are combined
// through shared memory in a fixed order.
template <bool kMax, typename A>
__device__ __forceinline__ A block_reduce(A x, A* smem) {
  x = kMax ? warp_max(x) : warp_sum(x);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) smem[warp] = x;
  __syncthreads();
  x = smem[0];
#pragma unroll
  for (int w = 1; w < kLossThreads / 32; ++w) x = kMax ? max(x, smem[w]) : x + smem[w];
  __syncthreads();  // smem is reused by the next reduction
  return x;
}

__device__ __forceinline__ float exp_acc(float x) { return expf(x); }
__device__ __forceinline__ double exp_acc(double x) { return exp(x); }
__device__ __forceinline__ float log_acc(float x) { return logf(x); }
__device__ __forceinline__ double log_acc(double x) { return log(x); }

// Writes the probabilities of one row (except the stash slots) and the stashes; d(j) = x[j] - m.
template <typename A, typename T>
__device__ __forceinline__ void write_stashes(const T* x, float* p, int64_t k, int64_t label,
                                              bool stash_smoothing, A m, A log_s, A sum_diff) {
  p[label] = static_cast<float>(log_s - (widen(x[label]) - m));  // a = -log probs[label]
  if (stash_smoothing) {
    const int64_t second = label + 1 == k ? 0 : label + 1;
    p[second] = static_cast<float>(log_s - sum_diff / static_cast<A>(k));  // b = -mean log_softmax
  }
}

template <typename T, int ITEMS>
__global__ void __launch_bounds__(kLossThreads)
    warp_rows_kernel(const T* __restrict__ logits, const int32_t* __restrict__ labels, int64_t n, int64_t k,
                     int64_t ld, float smoothing, float* __restrict__ probs) {
  using A = Acc<T>;
  const int64_t row = int64_t(blockIdx.x) * (kLossThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;  // the whole warp leaves together
  const T* x = logits + row * ld;
  float* p = probs + row * ld;
  for (int64_t j = k + lane; j < ld; j += 32) p[j] = 0.f;  // padded columns: absent classes
  const int64_t label = labels[row];

  A v[ITEMS];
  A m = -INFINITY;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int64_t j = lane + 32 * i;
    v[i] = j < k ? widen(x[j]) : A(-INFINITY);
    m = max(m, v[i]);
  }
  m = warp_max(m);
  A sum_exp = 0, sum_diff = 0;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    if (lane + 32 * i < k) {
      v[i] -= m;
      sum_exp += exp_acc(v[i]);
      sum_diff += v[i];
    }
  }
  sum_exp = warp_sum(sum_exp);
  sum_diff = warp_sum(sum_diff);
  const A log_s = log_acc(sum_exp);
  const bool stash_smoothing = smoothing != 0.f && k > 1;
  const int64_t second = label + 1 == k ? 0 : label + 1;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int64_t j = lane + 32 * i;
    if (j < k && j != label && !(stash_smoothing && j == second))
      p[j] = static_cast<float>(exp_acc(v[i] - log_s));
  }
  if (lane == 0) write_stashes(x, p, k, label, stash_smoothing, m, log_s, sum_diff);
}

// A row's statistics over its first k entries, by a block of kLossThreads (two passes): m = max x,
// S = sum exp(x - m), D = sum (x - m). Every thread gets them.
template <typename A>
struct RowStatistics {
  A max, sum_exp, sum_diff;
};
template <typename A, typename T>
__device__ RowStatistics<A> row_statistics(const T* x, int64_t k, A* smem) {
  A m = -INFINITY;
  for (int64_t j = threadIdx.x; j < k; j += kLossThreads) m = max(m, widen(x[j]));
  m = block_reduce<true>(m, smem);
  A sum_exp = 0, sum_diff = 0;
  for (int64_t j = threadIdx.x; j < k; j += kLossThreads) {
    const A d = widen(x[j]) - m;
    sum_exp += exp_acc(d);
    sum_diff += d;
  }
  return {m, block_reduce<false>(sum_exp, smem), block_reduce<false>(sum_diff, smem)};
}

template <typename T>
__global__ void __launch_bounds__(kLossThreads)
    block_rows_kernel(const T* __restrict__ logits, const int32_t* __restrict__ labels, int64_t n, int64_t k,
                      int64_t ld, float smoothing, float* __restrict__ probs) {
  using A = Acc<T>;
  __shared__ A smem[kLossThreads / 32];
  const int64_t row = blockIdx.x;
  const int t = threadIdx.x;
  const T* x = logits + row * ld;
  float* p = probs + row * ld;
  for (int64_t j = k + t; j < ld; j += kLossThreads) p[j] = 0.f;  // padded columns: absent classes

  const RowStatistics<A> r = row_statistics(x, k, smem);
  const A m = r.max, sum_diff = r.sum_diff, log_s = log_acc(r.sum_exp);
  const int64_t label = labels[row];
  const bool stash_smoothing = smoothing != 0.f && k > 1;
  const int64_t second = label + 1 == k ? 0 : label + 1;
  for (int64_t j = t; j < k; j += kLossThreads) {
    if (j == label || (stash_smoothing && j == second)) continue;
    p[j] = static_cast<float>(exp_acc((widen(x[j]) - m) - log_s));
  }
  if (t == 0) write_stashes(x, p, k, label, stash_smoothing, m, log_s, sum_diff);
}

constexpr int kFinalizeThreads = 512;  // 128 registers a thread: the f64 version does not spill

// loss[0] = (the block's threads' `total`s summed in a fixed order) / n; one block of kFinalizeThreads.
template <typename L>
__device__ void write_mean(double total, int64_t n, double* warp_totals, L* loss) {
  total = warp_sum(total);
  if (threadIdx.x % 32 == 0) warp_totals[threadIdx.x / 32] = total;
  __syncthreads();
  if (threadIdx.x == 0) {
    double sum = 0;
    for (int w = 0; w < kFinalizeThreads / 32; ++w) sum += warp_totals[w];
    loss[0] = static_cast<L>(sum / static_cast<double>(n));
  }
}

template <typename T>
__global__ void __launch_bounds__(kFinalizeThreads)
    finalize_kernel(const T* __restrict__ logits, const int32_t* __restrict__ labels, int64_t n, int64_t k,
                    int64_t ld, float smoothing, float* __restrict__ probs, float* __restrict__ loss) {
  using A = Acc<T>;
  __shared__ double warp_totals[kFinalizeThreads / 32];
  const bool stash_smoothing = smoothing != 0.f && k > 1;
  double total = 0;
  // kUnroll rows per thread per iteration, their loads issued before any use: the dependent chain
  // (label, then stash and logit) costs two memory latencies per iteration, not per row.
  constexpr int kUnroll = 8;
  for (int64_t base = threadIdx.x; base < n; base += int64_t(kUnroll) * kFinalizeThreads) {
    int64_t label[kUnroll], second[kUnroll];
    float a[kUnroll], b[kUnroll];
    A x_label[kUnroll], x_second[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t row = base + int64_t(u) * kFinalizeThreads;
      label[u] = row < n ? row * ld + labels[row] : 0;  // flat index of the label's slot
      second[u] = row < n ? row * ld + (labels[row] + 1 == k ? 0 : labels[row] + 1) : 0;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t row = base + int64_t(u) * kFinalizeThreads;
      if (row < n) {
        a[u] = probs[label[u]];
        if (stash_smoothing) {
          b[u] = probs[second[u]];
          x_label[u] = widen(logits[label[u]]);
          x_second[u] = widen(logits[second[u]]);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t row = base + int64_t(u) * kFinalizeThreads;
      if (row >= n) continue;
      const A a_u = static_cast<A>(a[u]);  // -log probs[label]
      probs[label[u]] = static_cast<float>(exp_acc(-a_u));
      A row_loss = a_u;
      if (stash_smoothing) {
        probs[second[u]] = static_cast<float>(exp_acc((x_second[u] - x_label[u]) - a_u));
        row_loss =
            (A(1) - static_cast<A>(smoothing)) * a_u + static_cast<A>(smoothing) * static_cast<A>(b[u]);
      }
      total += static_cast<double>(row_loss);
    }
  }
  write_mean(total, n, warp_totals, loss);
}

// The fused op (Backend::softmax_cross_entropy_fused): a block of 256 per row, the block kernel's two
// passes for m, S and D, the row's loss from them and x[L] (read before anything is written), and, with a
// gradient, a third pass that writes each element's gradient over the element it read:
//   g[j] = c * (exp((x[j] - m) - log S) - target[j]),  c = scale * loss_scale / N.
template <typename T>
__global__ void __launch_bounds__(kLossThreads)
    fused_rows_kernel(T* __restrict__ logits, const int32_t* __restrict__ labels, int64_t n, int64_t k,
                      int64_t ld, float smoothing, bool write_gradient, float c, const float* loss_scale,
                      float* __restrict__ row_loss) {
  using A = Acc<T>;
  __shared__ A smem[kLossThreads / 32];
  const int64_t row = blockIdx.x;
  const int t = threadIdx.x;
  T* x = logits + row * ld;

  const RowStatistics<A> r = row_statistics(x, k, smem);  // its closing barrier: every read is done
  const A m = r.max, sum_diff = r.sum_diff, log_s = log_acc(r.sum_exp);
  const int64_t label = labels[row];
  const A s = static_cast<A>(smoothing);
  if (t == 0) {
    const A a = log_s - (widen(x[label]) - m), b = log_s - sum_diff / static_cast<A>(k);
    row_loss[row] = static_cast<float>((A(1) - s) * a + s * b);
  }
  if (!write_gradient) return;
  __syncthreads();  // thread 0 has read x[label]
  const A scale = static_cast<A>(loss_scale ? c * *loss_scale : c), other = s / static_cast<A>(k),
          hit = (A(1) - s) + other;
  for (int64_t j = t; j < k; j += kLossThreads) {
    const A p = exp_acc((widen(x[j]) - m) - log_s);
    x[j] = narrow<T>(scale * (p - (j == label ? hit : other)));
  }
  for (int64_t j = k + t; j < ld; j += kLossThreads) x[j] = narrow<T>(A(0));
}

constexpr int kSharedRowThreads = 512;

// 2^x by the SFU's approximation (relative error ~2^-22, results below 2^-126 flushed to zero). The shared
// row kernel takes its exponentials as exp(x - m) = 2^(x log2(e) - m log2(e)): one FFMA and one MUFU.EX2
// where expf spends some eight instructions. Its instructions, more than the memory, set its time: at
// [16384, 50304] bf16 on an H100 1,937 -> 1,547 us (57% -> 72% of the copy rate; bench/results/gpt2-fusions).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
constexpr float kLog2e = 1.4426950408889634f;

// A running max and sum of exponentials relative to it (the online softmax's statistics).
struct MaxSum {
  float max, sum;
};
__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  if (a.max == -INFINITY) return b;
  if (b.max == -INFINITY) return a;
  const float m = fmaxf(a.max, b.max);
  return {m, a.sum * fast_exp2((a.max - m) * kLog2e) + b.sum * fast_exp2((b.max - m) * kLog2e)};
}

// fused_rows_kernel's results with the row read once (see the top of the file): f32, f16, bf16 logits
// whose row stride `ld` is a whole number of 16-byte vectors, one row a block, the row in dynamic shared
// memory (ld * sizeof(T) bytes). Vectors wholly inside the k valid columns take a path without a
// per-element bound check; only the last one or two of a padded row take the checked one.
template <typename T>
__global__ void __launch_bounds__(kSharedRowThreads)
    fused_rows_shared_kernel(T* __restrict__ logits, const int32_t* __restrict__ labels, int64_t k,
                             int64_t ld, float smoothing, bool write_gradient, float c,
                             const float* loss_scale, float* __restrict__ row_loss) {
  constexpr int W = 16 / sizeof(T);
  constexpr int kWarps = kSharedRowThreads / 32;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  T* row = reinterpret_cast<T*>(shared_bytes);
  __shared__ MaxSum warp_stats[kWarps];
  __shared__ float warp_sums[kWarps];
  T* x = logits + int64_t(blockIdx.x) * ld;
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int64_t vectors = ld / W, full_vectors = k / W;

  // One pass: the row into shared memory; each thread's max, sum of exp(x - max) and sum of x.
  MaxSum stats{-INFINITY, 0.f};
  float sum_x = 0.f;
  for (int64_t v = t; v < vectors; v += kSharedRowThreads) {
    const Vec<T, W> chunk = load_vec<W>(x + v * W);
    store_vec<W>(row + v * W, chunk);
    const bool full = v < full_vectors;
    float a[W], local = -INFINITY;
#pragma unroll
    for (int j = 0; j < W; ++j) {
      a[j] = full || v * W + j < k ? widen(chunk.v[j]) : -INFINITY;
      local = fmaxf(local, a[j]);
    }
    if (local == -INFINITY) continue;  // padded columns only
    const float m = fmaxf(stats.max, local), m2 = m * kLog2e;
    float s = stats.max == -INFINITY ? 0.f : stats.sum * fast_exp2(stats.max * kLog2e - m2);
#pragma unroll
    for (int j = 0; j < W; ++j) {
      if (full || v * W + j < k) {
        s += fast_exp2(fmaf(a[j], kLog2e, -m2));
        sum_x += a[j];
      }
    }
    stats = {m, s};
  }
  // The block's statistics: warps by shuffles, then the warps' in a fixed order.
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const MaxSum other{__shfl_xor_sync(0xffffffffu, stats.max, offset),
                       __shfl_xor_sync(0xffffffffu, stats.sum, offset)};
    stats = combine(stats, other);
  }
  sum_x = warp_sum(sum_x);
  if (lane == 0) warp_stats[warp] = stats, warp_sums[warp] = sum_x;
  __syncthreads();  // also: the whole row is in shared memory
  stats = warp_stats[0];
  sum_x = warp_sums[0];
  for (int w = 1; w < kWarps; ++w) stats = combine(stats, warp_stats[w]), sum_x += warp_sums[w];
  const float m = stats.max, log_s = logf(stats.sum);
  const int64_t label = labels[blockIdx.x];
  if (t == 0) {
    // D = sum (x - m) = sum x - k m: the smoothing term's mean of log-probabilities.
    const float a = log_s - (widen(row[label]) - m), b = log_s - (sum_x - float(k) * m) / float(k);
    row_loss[blockIdx.x] = (1.f - smoothing) * a + smoothing * b;
  }
  if (!write_gradient) return;
  // g = scale * (p - target) = scale * p - scale * other, and scale * (p - hit) in the label's column.
  const float scale = loss_scale ? c * *loss_scale : c, other = smoothing / float(k),
              hit = (1.f - smoothing) + other, scaled_other = scale * other,
              shift = (m + log_s) * kLog2e;  // p = 2^(x log2(e) - shift)
  for (int64_t v = t; v < vectors; v += kSharedRowThreads) {
    const Vec<T, W> chunk = load_vec<W>(row + v * W);
    const bool full = v < full_vectors;
    Vec<T, W> g;
#pragma unroll
    for (int j = 0; j < W; ++j) {
      const float p = fast_exp2(fmaf(widen(chunk.v[j]), kLog2e, -shift));
      g.v[j] = narrow<T>(full || v * W + j < k ? fmaf(scale, p, -scaled_other) : 0.f);
    }
    if (label >= v * W && label < v * W + W) {  // one thread of the block
#pragma unroll
      for (int j = 0; j < W; ++j)
        if (v * W + j == label)
          g.v[j] = narrow<T>(scale * (fast_exp2(fmaf(widen(chunk.v[j]), kLog2e, -shift)) - hit));
    }
    store_vec<W>(x + v * W, g);
  }
}

// Launches fused_rows_shared_kernel<T> where its row fits (and lets it take that much shared memory);
// false where it does not, and nothing is launched.
template <typename T>
bool launch_shared_rows(T* logits, const int32_t* labels, int64_t n, int64_t k, int64_t ld, float smoothing,
                        bool write_gradient, float c, const float* loss_scale, float* row_loss,
                        cudaStream_t stream) {
  if constexpr (std::is_same_v<T, double>) {
    return false;
  } else {
    constexpr int W = 16 / sizeof(T);
    const size_t bytes = static_cast<size_t>(ld) * sizeof(T);
    if (ld % W != 0 || reinterpret_cast<uintptr_t>(logits) % 16 != 0 || bytes + 1024 > shared_memory_opt_in())
      return false;
    // Not an operation on the stream: allowed while a step is being recorded.
    DLB_KERNEL_CHECK(cudaFuncSetAttribute(
        fused_rows_shared_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    fused_rows_shared_kernel<T><<<static_cast<unsigned>(n), kSharedRowThreads, bytes, stream>>>(
        logits, labels, k, ld, smoothing, write_gradient, c, loss_scale, row_loss);
    DLB_KERNEL_LAUNCH_CHECK();
    return true;
  }
}

// loss[0] = the mean of row_loss[0, n), summed in f64 in a fixed order (no atomics): one block.
template <typename L>
__global__ void __launch_bounds__(kFinalizeThreads)
    mean_of_rows_kernel(const float* __restrict__ row_loss, int64_t n, L* __restrict__ loss) {
  __shared__ double warp_totals[kFinalizeThreads / 32];
  double total = 0;
  for (int64_t row = threadIdx.x; row < n; row += kFinalizeThreads)
    total += static_cast<double>(row_loss[row]);
  write_mean(total, n, warp_totals, loss);
}

// dlogits[e] = c * (probs[e] - target), target = hit for the label's column, other elsewhere; 0 in the
// padded columns.
template <typename D>
struct XentBackwardOp {
  const float* probs;
  const int32_t* labels;
  D* dlogits;
  int64_t n, k, valid;  // rows of k columns, the first `valid` of them classes
  float c, hit, other;
  const float* loss_scale;  // device memory, or null
  template <int W>
  __device__ void apply(int64_t e) const {
    const float c = loss_scale ? this->c * *loss_scale : this->c;
    const Vec<float, W> p = load_vec<W>(probs + e);
    int64_t row = e / k, col = e - row * k;
    int64_t label = labels[row];
    Vec<D, W> out;
#pragma unroll
    for (int j = 0; j < W; ++j) {
      out.v[j] = col < valid ? narrow<D>(c * (p.v[j] - (col == label ? hit : other))) : narrow<D>(0.f);
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
  softmax_cross_entropy_padded_forward(logits, logits_dtype, labels, n, k, k, label_smoothing, probs, loss,
                                       stream);
}

void softmax_cross_entropy_padded_forward(const void* logits, DType logits_dtype, const int32_t* labels,
                                          int64_t n, int64_t ld, int64_t k, float label_smoothing,
                                          float* probs, float* loss, cudaStream_t stream) {
  // Inside: k counts the classes (the launcher's `valid`), ld the columns of a row.
  const char* op = "softmax_cross_entropy_forward";
  require_shape(op, n, k, label_smoothing);
  DLB_KERNEL_REQUIRE(n > 0 && k > 0, op, "the logits are empty (the mean over no rows is undefined)");
  DLB_KERNEL_REQUIRE(k <= ld, op, "more valid classes than columns");
  dispatch_float(logits_dtype, op, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(logits);
    constexpr int kRows = kLossThreads / 32;
    const unsigned warp_blocks = static_cast<unsigned>((n + kRows - 1) / kRows);
    DLB_KERNEL_REQUIRE(n <= int64_t(INT32_MAX), op, "too many rows");
    const float s = label_smoothing;
    if (k <= 32) {
      warp_rows_kernel<T, 1><<<warp_blocks, kLossThreads, 0, stream>>>(x, labels, n, k, ld, s, probs);
    } else if (k <= 64) {
      warp_rows_kernel<T, 2><<<warp_blocks, kLossThreads, 0, stream>>>(x, labels, n, k, ld, s, probs);
    } else if (k <= 128) {
      warp_rows_kernel<T, 4><<<warp_blocks, kLossThreads, 0, stream>>>(x, labels, n, k, ld, s, probs);
    } else if (k <= 256) {
      warp_rows_kernel<T, 8><<<warp_blocks, kLossThreads, 0, stream>>>(x, labels, n, k, ld, s, probs);
    } else if (k <= 512) {
      warp_rows_kernel<T, 16><<<warp_blocks, kLossThreads, 0, stream>>>(x, labels, n, k, ld, s, probs);
    } else if (k <= 1024) {
      warp_rows_kernel<T, 32><<<warp_blocks, kLossThreads, 0, stream>>>(x, labels, n, k, ld, s, probs);
    } else {
      block_rows_kernel<T>
          <<<static_cast<unsigned>(n), kLossThreads, 0, stream>>>(x, labels, n, k, ld, s, probs);
    }
    DLB_KERNEL_LAUNCH_CHECK();
    finalize_kernel<T><<<1, kFinalizeThreads, 0, stream>>>(x, labels, n, k, ld, label_smoothing, probs, loss);
    DLB_KERNEL_LAUNCH_CHECK();
  });
}

void softmax_cross_entropy_backward(const float* probs, const int32_t* labels, int64_t n, int64_t k,
                                    float label_smoothing, float scale, const float* loss_scale,
                                    void* dlogits, DType dlogits_dtype, cudaStream_t stream) {
  softmax_cross_entropy_padded_backward(probs, labels, n, k, k, label_smoothing, scale, loss_scale, dlogits,
                                        dlogits_dtype, stream);
}

void softmax_cross_entropy_padded_backward(const float* probs, const int32_t* labels, int64_t n, int64_t k,
                                           int64_t valid, float label_smoothing, float scale,
                                           const float* loss_scale, void* dlogits, DType dlogits_dtype,
                                           cudaStream_t stream) {
  const char* op = "softmax_cross_entropy_backward";
  require_shape(op, n, k, label_smoothing);
  DLB_KERNEL_REQUIRE(valid > 0 && valid <= k, op, "valid classes outside [1, k]");
  if (n == 0 || k == 0) return;
  const double s = label_smoothing;
  const float c = static_cast<float>(static_cast<double>(scale) / static_cast<double>(n));
  const float hit = static_cast<float>((1.0 - s) + s / static_cast<double>(valid));
  const float other = static_cast<float>(s / static_cast<double>(valid));
  dispatch_float(dlogits_dtype, op, [&](auto tag) {
    using D = decltype(tag);
    constexpr int V = 4;  // 16 bytes of probs
    const bool vector_ok = aligned(probs, 16) && aligned(dlogits, V * sizeof(D));
    launch_elementwise<V>(
        n * k, vector_ok,
        XentBackwardOp<D>{probs, labels, static_cast<D*>(dlogits), n, k, valid, c, hit, other, loss_scale},
        stream);
  });
}

void softmax_cross_entropy_fused(void* logits, DType logits_dtype, const int32_t* labels, int64_t n,
                                 int64_t ld, int64_t k, float label_smoothing, float* row_loss, void* loss,
                                 bool write_gradient, float scale, const float* loss_scale,
                                 cudaStream_t stream) {
  const char* op = "softmax_cross_entropy_fused";
  require_shape(op, n, k, label_smoothing);
  DLB_KERNEL_REQUIRE(n > 0 && k > 0, op, "the logits are empty (the mean over no rows is undefined)");
  DLB_KERNEL_REQUIRE(k <= ld, op, "more valid classes than columns");
  DLB_KERNEL_REQUIRE(n <= int64_t(INT32_MAX), op, "too many rows");
  const float c = static_cast<float>(static_cast<double>(scale) / static_cast<double>(n));
  dispatch_float(logits_dtype, op, [&](auto tag) {
    using T = decltype(tag);
    if (!launch_shared_rows(static_cast<T*>(logits), labels, n, k, ld, label_smoothing, write_gradient, c,
                            loss_scale, row_loss, stream)) {
      fused_rows_kernel<T><<<static_cast<unsigned>(n), kLossThreads, 0, stream>>>(
          static_cast<T*>(logits), labels, n, k, ld, label_smoothing, write_gradient, c, loss_scale,
          row_loss);
      DLB_KERNEL_LAUNCH_CHECK();
    }
    using L = std::conditional_t<std::is_same_v<T, double>, double, float>;
    mean_of_rows_kernel<L><<<1, kFinalizeThreads, 0, stream>>>(row_loss, n, static_cast<L*>(loss));
    DLB_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace dlbench::cuda
