// Causal self-attention on dlbench's own kernels: what runs where cuDNN's fused attention does not (f32,
// and any shape cuDNN refuses), so that every dtype works. Correct first, not fast: O(T^2 d) work with
// warp-wide dot products, no tensor cores.
//
// Forward: one warp per query row (b, h, t), four rows a block. Lane l holds features l, l + 32, ... of
// the row's query (scaled) and of its output accumulator; the keys j <= t stream past in order with the
// online softmax (running maximum m and sum l, the accumulator rescaled when m grows), so no [T, T] score
// matrix exists. stats = m + log(l), the natural-log log-sum-exp of the scaled scores: what the backward
// rebuilds the softmax from (p = exp(s - stats)), and what cuDNN's SDPA saves as Stats.
//
// Backward, with D[t] = dout[t] . out[t]:  p = exp(s - stats),  dp = dout[t] . v[j],  ds = p (dp - D[t])
//   dq[t] = scale sum_{j <= t} ds k[j]        (one warp per query row t)
//   dk[j] = scale sum_{t >= j} ds q[t],  dv[j] = sum_{t >= j} p dout[t]   (one warp per key row j)
// Each gradient row is summed by one warp in a fixed order and written once: no atomics, the same bits on
// every run, and dqkv is overwritten as the interface says.
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace dlbench::cuda {
namespace {

using namespace detail;

constexpr int kWarpsPerBlock = 4;

struct AttentionDims {
  int64_t B, T, C, H, d;
  float scale;
  __device__ int64_t rows() const { return B * H * T; }
};

// The row (b, h, t) of warp `w` (t fastest).
struct HeadRow {
  int64_t b, h, t;
};
__device__ __forceinline__ HeadRow head_row(const AttentionDims& s, int64_t w) {
  const int64_t t = w % s.T, bh = w / s.T;
  return {bh / s.H, bh % s.H, t};
}

// Lane's PER features of head h of part (0 q, 1 k, 2 v) at (b, t) of qkv.
template <int PER, typename T>
__device__ __forceinline__ void load_head(const T* qkv, const AttentionDims& s, int64_t b, int64_t t,
                                          int part, int64_t h, float (&x)[PER], float factor = 1.f) {
  const T* row = qkv + (b * s.T + t) * 3 * s.C + part * s.C + h * s.d;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int64_t f = lane + 32 * i;
    x[i] = f < s.d ? widen(row[f]) * factor : 0.f;
  }
}

// The same from a [B, T, C] tensor (out, dout).
template <int PER, typename T>
__device__ __forceinline__ void load_row(const T* y, const AttentionDims& s, int64_t b, int64_t t, int64_t h,
                                         float (&x)[PER]) {
  const T* row = y + (b * s.T + t) * s.C + h * s.d;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int64_t f = lane + 32 * i;
    x[i] = f < s.d ? widen(row[f]) : 0.f;
  }
}

template <int PER, typename T>
__device__ __forceinline__ void store_row(T* row, const AttentionDims& s, const float (&x)[PER],
                                          float factor) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int64_t f = lane + 32 * i;
    if (f < s.d) row[f] = narrow<T>(x[i] * factor);
  }
}

template <int PER>
__device__ __forceinline__ float dot(const float (&a)[PER], const float (&b)[PER]) {
  float sum = 0;
#pragma unroll
  for (int i = 0; i < PER; ++i) sum += a[i] * b[i];
  return warp_sum(sum);
}

template <typename T, int PER>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    forward_kernel(const T* __restrict__ qkv, T* __restrict__ out, float* __restrict__ stats,
                   AttentionDims s) {
  const int64_t w = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (w >= s.rows()) return;
  const HeadRow r = head_row(s, w);
  float q[PER], k[PER], v[PER], acc[PER];
  load_head<PER>(qkv, s, r.b, r.t, 0, r.h, q, s.scale);
#pragma unroll
  for (int i = 0; i < PER; ++i) acc[i] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int64_t j = 0; j <= r.t; ++j) {
    load_head<PER>(qkv, s, r.b, j, 1, r.h, k);
    load_head<PER>(qkv, s, r.b, j, 2, r.h, v);
    const float score = dot(q, k);
    const float m_new = max(m, score);
    const float correction = expf(m - m_new), p = expf(score - m_new);
    l = l * correction + p;
#pragma unroll
    for (int i = 0; i < PER; ++i) acc[i] = acc[i] * correction + p * v[i];
    m = m_new;
  }
  store_row(out + (r.b * s.T + r.t) * s.C + r.h * s.d, s, acc, 1.f / l);
  if (threadIdx.x % 32 == 0) stats[(r.b * s.H + r.h) * s.T + r.t] = m + logf(l);
}

template <typename T, int PER>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    dq_kernel(const T* __restrict__ qkv, const T* __restrict__ out, const float* __restrict__ stats,
              const T* __restrict__ dout, T* __restrict__ dqkv, AttentionDims s) {
  const int64_t w = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (w >= s.rows()) return;
  const HeadRow r = head_row(s, w);
  float q[PER], o[PER], dy[PER], k[PER], v[PER], dq[PER];
  load_head<PER>(qkv, s, r.b, r.t, 0, r.h, q);
  load_row<PER>(out, s, r.b, r.t, r.h, o);
  load_row<PER>(dout, s, r.b, r.t, r.h, dy);
  const float D = dot(dy, o), lse = stats[(r.b * s.H + r.h) * s.T + r.t];
#pragma unroll
  for (int i = 0; i < PER; ++i) dq[i] = 0.f;
  for (int64_t j = 0; j <= r.t; ++j) {
    load_head<PER>(qkv, s, r.b, j, 1, r.h, k);
    load_head<PER>(qkv, s, r.b, j, 2, r.h, v);
    const float p = expf(dot(q, k) * s.scale - lse);
    const float ds = p * (dot(dy, v) - D);
#pragma unroll
    for (int i = 0; i < PER; ++i) dq[i] += ds * k[i];
  }
  store_row(dqkv + (r.b * s.T + r.t) * 3 * s.C + r.h * s.d, s, dq, s.scale);
}

template <typename T, int PER>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    dkv_kernel(const T* __restrict__ qkv, const T* __restrict__ out, const float* __restrict__ stats,
               const T* __restrict__ dout, T* __restrict__ dqkv, AttentionDims s) {
  const int64_t w = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (w >= s.rows()) return;
  const HeadRow r = head_row(s, w);  // r.t is the key's position j
  float k[PER], v[PER], q[PER], o[PER], dy[PER], dk[PER], dv[PER];
  load_head<PER>(qkv, s, r.b, r.t, 1, r.h, k);
  load_head<PER>(qkv, s, r.b, r.t, 2, r.h, v);
#pragma unroll
  for (int i = 0; i < PER; ++i) dk[i] = dv[i] = 0.f;
  for (int64_t t = r.t; t < s.T; ++t) {
    load_head<PER>(qkv, s, r.b, t, 0, r.h, q);
    load_row<PER>(out, s, r.b, t, r.h, o);
    load_row<PER>(dout, s, r.b, t, r.h, dy);
    const float D = dot(dy, o), lse = stats[(r.b * s.H + r.h) * s.T + t];
    const float p = expf(dot(q, k) * s.scale - lse);
    const float ds = p * (dot(dy, v) - D);
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      dv[i] += p * dy[i];
      dk[i] += ds * q[i];
    }
  }
  T* row = dqkv + (r.b * s.T + r.t) * 3 * s.C + r.h * s.d;
  store_row(row + s.C, s, dk, s.scale);
  store_row(row + 2 * s.C, s, dv, 1.f);
}

AttentionDims dims_of(const char* op, int64_t B, int64_t T, int64_t C, int64_t H) {
  DLB_KERNEL_REQUIRE(B > 0 && T > 0 && C > 0 && H > 0 && C % H == 0, op, "bad attention sizes");
  const int64_t d = C / H;
  DLB_KERNEL_REQUIRE(d <= kOwnAttentionMaxHead, op, "the head size is larger than the own kernels take");
  DLB_KERNEL_REQUIRE(ceil_div<int64_t>(B * H * T, kWarpsPerBlock) <= int64_t(INT32_MAX), op, "too many rows");
  return {B, T, C, H, d, static_cast<float>(1.0 / std::sqrt(double(d)))};
}

// Calls fn(PER tag) with the features per lane the head size needs.
template <typename Fn>
void dispatch_head(int64_t d, Fn&& fn) {
  if (d <= 32) {
    fn(std::integral_constant<int, 1>{});
  } else if (d <= 64) {
    fn(std::integral_constant<int, 2>{});
  } else if (d <= 128) {
    fn(std::integral_constant<int, 4>{});
  } else {
    fn(std::integral_constant<int, 8>{});
  }
}

}  // namespace

void attention_forward(const void* qkv, void* out, float* stats, int64_t batch, int64_t time,
                       int64_t channels, int64_t heads, DType dtype, cudaStream_t stream) {
  const char* op = "attention_forward";
  const AttentionDims s = dims_of(op, batch, time, channels, heads);
  const unsigned blocks = static_cast<unsigned>(ceil_div<int64_t>(batch * heads * time, kWarpsPerBlock));
  dispatch_float(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    dispatch_head(s.d, [&](auto per) {
      forward_kernel<T, decltype(per)::value><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(
          static_cast<const T*>(qkv), static_cast<T*>(out), stats, s);
      DLB_KERNEL_LAUNCH_CHECK();
    });
  });
}

void attention_backward(const void* qkv, const void* out, const float* stats, const void* dout, void* dqkv,
                        int64_t batch, int64_t time, int64_t channels, int64_t heads, DType dtype,
                        cudaStream_t stream) {
  const char* op = "attention_backward";
  const AttentionDims s = dims_of(op, batch, time, channels, heads);
  const unsigned blocks = static_cast<unsigned>(ceil_div<int64_t>(batch * heads * time, kWarpsPerBlock));
  dispatch_float(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(qkv);
    const T* y = static_cast<const T*>(out);
    const T* dy = static_cast<const T*>(dout);
    T* dx = static_cast<T*>(dqkv);
    dispatch_head(s.d, [&](auto per) {
      constexpr int PER = decltype(per)::value;
      dq_kernel<T, PER><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(x, y, stats, dy, dx, s);
      DLB_KERNEL_LAUNCH_CHECK();
      dkv_kernel<T, PER><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(x, y, stats, dy, dx, s);
      DLB_KERNEL_LAUNCH_CHECK();
    });
  });
}

}  // namespace dlbench::cuda
