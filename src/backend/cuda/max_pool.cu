// Max pooling over NHWC tensors, forward and backward.
//
// Why not cuDNN's: on an H200, cudnnPoolingBackward took 1.74 ms for ResNet-50's stem pool at batch 256
// (3x3, stride 2, 64 x 112 x 112 inputs) in FP16 and in TF32 — 5% of an FP16 step, where the bytes it must
// move take ~0.15 ms at HBM speed; its forward 0.34 ms (FP16) for ~0.13 ms of traffic. These kernels: 0.30
// and 0.60 ms in FP16, a 0.34 ms forward in TF32 (bench/results/2026-11-30-gpu-2xh200-maxpool-power). Both
// still take twice the traffic's time or more: room left.
//
// The forward writes, besides y, the position of each output's maximum inside its window (one byte,
// r * kernel_w + s); the backward then gathers: every input element looks at the at most
// ceil(k / stride)^2 windows covering it and sums the gradients of those whose maximum it is. A gather
// writes each dx element once (no atomics, deterministic, no zero fill first). Without saved positions
// (nullptr) the backward finds each window's maximum again from x.
//
// The maximum is the first one in scan order (row by row), as the reference backend takes it: after a
// ReLU many windows hold only zeros, and the gradient must go to the same pixel on every backend. A NaN
// wins over any number (the first NaN of the window), so it propagates to y and check_finite sees it.
//
// Each thread handles W consecutive channels of one pixel (16 bytes when C allows), so a warp reads and
// writes whole cache lines along C.
#include <type_traits>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace dlbench::cuda {
namespace {

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

template <int K, typename T, typename I>
struct MaxPoolForwardOp {
  const T* x;
  T* y;
  uint8_t* argmax;  // may be null
  PoolIndex<I> g;
  template <int W>
  __device__ void apply(int64_t e) const {
    const NhwcIndex<I> at(I(e), g.c, g.out_h, g.out_w);
    const I n = at.n, p = at.h, q = at.w, c = at.c;
    Vec<T, W> best;
    uint8_t where[W];
    window_max<K, W>(x, g, n, p, q, c, best, where);
    store_vec<W>(y + e, best);
    if (argmax) {
      Vec<uint8_t, W> packed;
#pragma unroll
      for (int j = 0; j < W; ++j) packed.v[j] = where[j];
      store_vec<W>(argmax + e, packed);
    }
  }
};

// The backward keeps run-time loops over the (at most ceil(k / stride)^2) covering windows: a version with
// the stem's 3 x 3 stride 2 fixed at compile time and all loads issued first measured slower on an H200
// (1.09 against 0.60 ms for the stem pool's backward in FP16, batch 256).
template <int K, typename T, typename I>
struct MaxPoolBackwardOp {
  const T* x;             // read only without argmax
  const uint8_t* argmax;  // may be null
  const T* dy;
  T* dx;
  PoolIndex<I> g;
  template <int W>
  __device__ void apply(int64_t e) const {
    const NhwcIndex<I> at(I(e), g.c, g.h, g.w);
    const I n = at.n, h = at.h, w = at.w, c = at.c;
    // Windows p covering row h: p * stride - pad <= h < p * stride - pad + kernel.
    const I hp = h + g.pad_h, wp = w + g.pad_w;
    const I p_begin = hp < g.kernel_h ? 0 : (hp - g.kernel_h) / g.stride_h + 1;
    const I q_begin = wp < g.kernel_w ? 0 : (wp - g.kernel_w) / g.stride_w + 1;
    const I p_end = min(hp / g.stride_h + 1, g.out_h), q_end = min(wp / g.stride_w + 1, g.out_w);
    float sum[W];
#pragma unroll
    for (int j = 0; j < W; ++j) sum[j] = 0.f;
    for (I p = p_begin; p < p_end; ++p) {
      for (I q = q_begin; q < q_end; ++q) {
        const I out = ((n * g.out_h + p) * g.out_w + q) * g.c + c;
        // This input's position in window (p, q), and where the window's maximum is.
        const uint8_t mine = static_cast<uint8_t>((hp - p * g.stride_h) * g.kernel_w + (wp - q * g.stride_w));
        uint8_t where[W];
        if (argmax) {
          const Vec<uint8_t, W> saved = load_vec<W>(argmax + out);
#pragma unroll
          for (int j = 0; j < W; ++j) where[j] = saved.v[j];
        } else {
          Vec<T, W> unused;
          window_max<K, W>(x, g, n, p, q, c, unused, where);
        }
        const Vec<T, W> grad = load_vec<W>(dy + out);
#pragma unroll
        for (int j = 0; j < W; ++j) {
          if (where[j] == mine) sum[j] += widen(grad.v[j]);
        }
      }
    }
    Vec<T, W> result;
#pragma unroll
    for (int j = 0; j < W; ++j) result.v[j] = narrow<T>(sum[j]);
    store_vec<W>(dx + e, result);
  }
};

// The backward of ResNet's stem pool (3 x 3, stride 2, padding 1) from saved positions, a 2 x 2 block of
// input pixels per thread: input row 2p is the middle row of window p alone, row 2p + 1 the last row of
// window p and the first of window p + 1 (columns alike), so the block (2p.., 2q..) reads the four outputs
// (p, q), (p, q + 1), (p + 1, q), (p + 1, q + 1) once, all loads issued before any sum, where the per-pixel
// gather (MaxPoolBackwardOp) makes nine dependent reads for the same four pixels and divides per pixel.
// The sums go in the gather's order (window rows, then columns), so both give the same bits.
template <typename T, typename I>
struct StemPoolBackwardOp {
  const uint8_t* argmax;
  const T* dy;
  T* dx;
  PoolIndex<I> g;
  template <int W>
  __device__ void apply(int64_t e) const {
    // e runs over [n, out_h, out_w, c]: one block of input pixels per output pixel.
    const NhwcIndex<I> at(I(e), g.c, g.out_h, g.out_w);
    const I n = at.n, p = at.h, q = at.w, c = at.c;
    const bool next_row = p + 1 < g.out_h, next_col = q + 1 < g.out_w;
    // Outputs k = 0..3: (p, q), (p, q + 1), (p + 1, q), (p + 1, q + 1).
    Vec<uint8_t, W> where[4];
    Vec<T, W> grad[4];
    const bool present[4] = {true, next_col, next_row, next_row && next_col};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (!present[k]) continue;
      const I out = ((n * g.out_h + p + I(k / 2)) * g.out_w + q + I(k % 2)) * g.c + c;
      where[k] = load_vec<W>(argmax + out);
      grad[k] = load_vec<W>(dy + out);
    }
    // Input pixel (2p + a, 2q + b): the outputs covering it and its position in each window (r * 3 + s).
    auto pixel = [&](int a, int b) {
      const I h = 2 * p + I(a), w = 2 * q + I(b);
      if (h >= g.h || w >= g.w) return;
      float sum[W];
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
      Vec<T, W> result;
#pragma unroll
      for (int j = 0; j < W; ++j) result.v[j] = narrow<T>(sum[j]);
      store_vec<W>(dx + ((n * g.h + h) * g.w + w) * g.c + c, result);
    };
    pixel(0, 0);
    pixel(0, 1);
    pixel(1, 0);
    pixel(1, 1);
  }
};

void require_shape(const char* op, const MaxPoolShape& s) {
  DLB_KERNEL_REQUIRE(s.n > 0 && s.c > 0 && s.h > 0 && s.w > 0 && s.out_h > 0 && s.out_w > 0, op,
                     "sizes must be positive");
  DLB_KERNEL_REQUIRE(s.kernel_h > 0 && s.kernel_w > 0 && s.stride_h > 0 && s.stride_w > 0, op,
                     "kernel and stride must be positive");
  DLB_KERNEL_REQUIRE(s.pad_h >= 0 && s.pad_w >= 0 && s.pad_h < s.kernel_h && s.pad_w < s.kernel_w, op,
                     "padding must be in [0, kernel)");
  DLB_KERNEL_REQUIRE(max_pool_positions_fit(s), op, "a window of more than 256 pixels");
}

template <int N>
using Constant = std::integral_constant<int, N>;

// Runs `launch(I{}, K{})`: 32-bit indices I when every element index and padded coordinate fits them; the
// window size K as a constant for the 3 x 3 stride-2 pool of ResNet's stem, else 0 (read from the shape at
// run time).
template <typename Fn>
void dispatch_shape(const MaxPoolShape& s, Fn&& launch) {
  const int64_t largest =
      std::max(s.n * s.h * s.w * s.c, s.n * s.out_h * s.out_w * s.c) + std::max(s.h + s.pad_h, s.w + s.pad_w);
  const bool stem = s.kernel_h == 3 && s.kernel_w == 3 && s.stride_h == 2 && s.stride_w == 2;
  auto with_window = [&](auto index_tag) {
    if (stem) {
      launch(index_tag, Constant<3>{});
    } else {
      launch(index_tag, Constant<0>{});
    }
  };
  if (largest < int64_t(UINT32_MAX)) {
    with_window(uint32_t{});
  } else {
    with_window(uint64_t{});
  }
}

}  // namespace

bool max_pool_positions_fit(const MaxPoolShape& s) { return s.kernel_h * s.kernel_w <= 256; }

void max_pool_forward_nhwc(const void* x, void* y, uint8_t* argmax, DType dtype, const MaxPoolShape& s,
                           cudaStream_t stream) {
  require_shape("max_pool_forward_nhwc", s);
  dispatch_float(dtype, "max_pool_forward_nhwc", [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    // Vectors of V channels: C a multiple of V and every row start aligned.
    const bool vector_ok =
        s.c % V == 0 && aligned(x, 16) && aligned(y, 16) && (!argmax || aligned(argmax, V));
    dispatch_shape(s, [&](auto index_tag, auto k) {
      using I = decltype(index_tag);
      launch_elementwise<V>(s.n * s.out_h * s.out_w * s.c, vector_ok,
                            MaxPoolForwardOp<decltype(k)::value, T, I>{
                                static_cast<const T*>(x), static_cast<T*>(y), argmax, PoolIndex<I>(s)},
                            stream);
    });
  });
}

void max_pool_backward_nhwc(const void* x, const uint8_t* argmax, const void* dy, void* dx, DType dtype,
                            const MaxPoolShape& s, cudaStream_t stream) {
  require_shape("max_pool_backward_nhwc", s);
  dispatch_float(dtype, "max_pool_backward_nhwc", [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    const bool vector_ok = s.c % V == 0 && aligned(x, 16) && aligned(dy, 16) && aligned(dx, 16) &&
                           (!argmax || aligned(argmax, V));
    // 3 x 3, stride 2, padding 1 (so out_h = ceil(h / 2)): every input pixel lies in one 2 x 2 block.
    const bool stem_blocks = argmax && s.kernel_h == 3 && s.kernel_w == 3 && s.stride_h == 2 &&
                             s.stride_w == 2 && s.pad_h == 1 && s.pad_w == 1 && s.out_h == (s.h + 1) / 2 &&
                             s.out_w == (s.w + 1) / 2;
    dispatch_shape(s, [&](auto index_tag, auto k) {
      using I = decltype(index_tag);
      if (stem_blocks) {
        launch_elementwise<V>(
            s.n * s.out_h * s.out_w * s.c, vector_ok,
            StemPoolBackwardOp<T, I>{argmax, static_cast<const T*>(dy), static_cast<T*>(dx), PoolIndex<I>(s)},
            stream);
        return;
      }
      launch_elementwise<V>(s.n * s.h * s.w * s.c, vector_ok,
                            MaxPoolBackwardOp<decltype(k)::value, T, I>{static_cast<const T*>(x), argmax,
                                                                        static_cast<const T*>(dy),
                                                                        static_cast<T*>(dx), PoolIndex<I>(s)},
                            stream);
    });
  });
}

}  // namespace dlbench::cuda
