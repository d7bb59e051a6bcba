// What max_pool.cu's kernels share with the stem's fused batch norm + max pool (batchnorm_nhwc_pooled.cu):
// NHWC index arithmetic, which value takes over a window's maximum, a window's first maximum and its
// position, and the 2 x 2 block gather of the stem pool's backward. max_pool.cu says why these kernels and
// how they pool.
#pragma once

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace dlbench::cuda::pool {

using namespace detail;

// Indices in I (uint32_t when every tensor fits, else uint64_t: 64-bit division is several times slower).
template <typename I>
struct PoolIndex {
  I c, h, w, out_h, out_w, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
  explicit PoolIndex(const MaxPoolShape& s)
      : c(I(s.c)),
        h(I(s.h)),
        w(I(s.w)),
        out_h(I(s.out_h)),
        out_w(I(s.out_w)),
        kernel_h(I(s.kernel_h)),
        kernel_w(I(s.kernel_w)),
        stride_h(I(s.stride_h)),
        stride_w(I(s.stride_w)),
        pad_h(I(s.pad_h)),
        pad_w(I(s.pad_w)) {}
};

// The (n, h, w, c) of flat element i of an NHWC tensor with `channels`, `height` and `width`.
template <typename I>
struct NhwcIndex {
  I n, h, w, c;
  __device__ NhwcIndex(I i, I channels, I height, I width) {
    c = i % channels;
    i /= channels;
    w = i % width;
    i /= width;
    h = i % height;
    n = i / height;
  }
};

__device__ __forceinline__ bool takes_over(float candidate, float best) {
  // Strictly greater keeps the first maximum; a NaN replaces anything but an earlier NaN.
  return candidate > best || (candidate != candidate && best == best);
}

// The maximum of output pixel (n, p, q) over channels [c, c + W): its value and its position in the window.
// K > 0: a K x K window known at compile time, whose loads are all issued before the first comparison
// (0.30 against 0.32 ms for the run-time loop, FP16 stem pool). K = 0: any window, from g.
template <int K, int W, typename T, typename I>
__device__ __forceinline__ void window_max(const T* x, const PoolIndex<I>& g, I n, I p, I q, I c,
                                           Vec<T, W>& best, uint8_t (&where)[W]) {
  // Signed: the window may start in the padding (negative rows and columns).
  const int64_t h0 = int64_t(p) * g.stride_h - g.pad_h, w0 = int64_t(q) * g.stride_w - g.pad_w;
  float best_value[W];
  bool first = true;
  auto consider = [&](const Vec<T, W>& v, uint8_t here) {
#pragma unroll
    for (int j = 0; j < W; ++j) {
      const float value = widen(v.v[j]);
      if (first || takes_over(value, best_value[j])) {
        best_value[j] = value;
        best.v[j] = v.v[j];
        where[j] = here;
      }
    }
    first = false;
  };
  if constexpr (K > 0) {
    Vec<T, W> v[K * K];
    bool inside[K * K];
#pragma unroll
    for (int r = 0; r < K; ++r) {
#pragma unroll
      for (int s = 0; s < K; ++s) {
        const int64_t h = h0 + r, w = w0 + s;
        inside[r * K + s] = h >= 0 && h < int64_t(g.h) && w >= 0 && w < int64_t(g.w);
        if (inside[r * K + s]) v[r * K + s] = load_vec<W>(x + ((I(n) * g.h + I(h)) * g.w + I(w)) * g.c + c);
      }
    }
#pragma unroll
    for (int k = 0; k < K * K; ++k) {
      if (inside[k]) consider(v[k], static_cast<uint8_t>(k));
    }
  } else {
    const int64_t h_begin = h0 < 0 ? 0 : h0, w_begin = w0 < 0 ? 0 : w0;
    const int64_t h_end = min(h0 + int64_t(g.kernel_h), int64_t(g.h));
    const int64_t w_end = min(w0 + int64_t(g.kernel_w), int64_t(g.w));
    for (int64_t h = h_begin; h < h_end; ++h) {
      for (int64_t w = w_begin; w < w_end; ++w) {
        consider(load_vec<W>(x + ((I(n) * g.h + I(h)) * g.w + I(w)) * g.c + c),
                 static_cast<uint8_t>((h - h0) * g.kernel_w + (w - w0)));
      }
    }
  }
}

// ResNet's stem pool (3 x 3, stride 2, padding 1) backward from saved positions, a 2 x 2 block of input
// pixels at a time: input row 2p is the middle row of window p alone, row 2p + 1 the last row of window p
// and the first of window p + 1 (columns alike), so the block (2p.., 2q..) reads the four outputs (p, q),
// (p, q + 1), (p + 1, q), (p + 1, q + 1) once, all loads issued before any sum, where a per-pixel gather
// (MaxPoolBackwardOp) makes nine dependent reads for the same four pixels and divides per pixel. The sums
// go in the gather's order (window rows, then columns), so both give the same bits. max_pool.cu's backward
// and the stem's fused batch norm + max pool (batchnorm_nhwc_pooled.cu) both gather this way.
template <int W, typename T, typename I>
struct StemBlock {
  I n, p, q, c;
  bool next_row, next_col;
  // Outputs k = 0..3: (p, q), (p, q + 1), (p + 1, q), (p + 1, q + 1).
  Vec<uint8_t, W> where[4];
  Vec<T, W> grad[4];

  // The block of output element e ([n, out_h, out_w, c], c a multiple of W): its four outputs' saved
  // positions and gradients.
  __device__ __forceinline__ StemBlock(int64_t e, const uint8_t* argmax, const T* dy, const PoolIndex<I>& g) {
    const NhwcIndex<I> at(I(e), g.c, g.out_h, g.out_w);
    n = at.n, p = at.h, q = at.w, c = at.c;
    next_row = p + 1 < g.out_h, next_col = q + 1 < g.out_w;
    const bool present[4] = {true, next_col, next_row, next_row && next_col};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (!present[k]) continue;
      const I out = ((n * g.out_h + p + I(k / 2)) * g.out_w + q + I(k % 2)) * g.c + c;
      where[k] = load_vec<W>(argmax + out);
      grad[k] = load_vec<W>(dy + out);
    }
  }
  // Whether input pixel (2p + a, 2q + b) exists, and its element offset.
  __device__ __forceinline__ bool inside(int a, int b, const PoolIndex<I>& g) const {
    return 2 * p + I(a) < g.h && 2 * q + I(b) < g.w;
  }
  __device__ __forceinline__ I offset(int a, int b, const PoolIndex<I>& g) const {
    return ((n * g.h + 2 * p + I(a)) * g.w + 2 * q + I(b)) * g.c + c;
  }
  // The gradient reaching input pixel (2p + a, 2q + b): the sum of the gradients of the windows whose
  // maximum it is (its position r * 3 + s in each), in float.
  __device__ __forceinline__ void gather(int a, int b, float (&sum)[W]) const {
#pragma unroll
    for (int j = 0; j < W; ++j) sum[j] = 0.f;
    auto add = [&](int k, uint8_t mine) {
#pragma unroll
      for (int j = 0; j < W; ++j)
        if (where[k].v[j] == mine) sum[j] += widen(grad[k].v[j]);
    };
    if (a == 0 && b == 0) {
      add(0, 4);
    } else if (a == 0) {
      add(0, 5);
      if (next_col) add(1, 3);
    } else if (b == 0) {
      add(0, 7);
      if (next_row) add(2, 1);
    } else {
      add(0, 8);
      if (next_col) add(1, 6);
      if (next_row) add(2, 2);
      if (next_row && next_col) add(3, 0);
    }
  }
};

// Whether a pool is the stem's, whose every input pixel lies in one 2 x 2 block (StemBlock).
inline bool is_stem_pool(const MaxPoolShape& s) {
  return s.kernel_h == 3 && s.kernel_w == 3 && s.stride_h == 2 && s.stride_w == 2 && s.pad_h == 1 &&
         s.pad_w == 1 && s.out_h == (s.h + 1) / 2 && s.out_w == (s.w + 1) / 2;
}

}  // namespace dlbench::cuda::pool
