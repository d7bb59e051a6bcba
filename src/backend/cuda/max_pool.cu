// Max pooling over NHWC tensors, forward and backward.
//
// Why not cuDNN's: on an H200, cudnnPoolingBackward took 1.74 ms for ResNet-50's stem pool at batch 256
// (3x3, stride 2, 64 x 112 x 112 inputs) in FP16 and in TF32 — 5% of an FP16 step, where the bytes it must
// move take ~0.15 ms at HBM speed; its forward 0.34 ms (FP16) for ~0.13 ms of traffic. These kernels: 0.30
// and 0.60 ms in FP16, a 0.34 ms forward in TF32 (bench/results/pooling-kernels). Both
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

#include "backend/cuda/max_pool_common.cuh"

namespace dlbench::cuda {
namespace {

using namespace pool;

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

// The backward of the stem pool from saved positions, a 2 x 2 block of input pixels per thread
// (StemBlock, max_pool_common.cuh).
template <typename T, typename I>
struct StemPoolBackwardOp {
  const uint8_t* argmax;
  const T* dy;
  T* dx;
  PoolIndex<I> g;
  template <int W>
  __device__ void apply(int64_t e) const {
    // e runs over [n, out_h, out_w, c]: one block of input pixels per output pixel.
    const StemBlock<W, T, I> block(e, argmax, dy, g);
    auto pixel = [&](int a, int b) {
      if (!block.inside(a, b, g)) return;
      float sum[W];
      block.gather(a, b, sum);
      Vec<T, W> result;
#pragma unroll
      for (int j = 0; j < W; ++j) result.v[j] = narrow<T>(sum[j]);
      store_vec<W>(dx + block.offset(a, b, g), result);
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
    const bool stem_blocks = argmax && is_stem_pool(s);
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
