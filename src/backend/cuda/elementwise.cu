// Elementwise kernels (fill, add, scale, cast, ReLU, bias add, check_finite) and the bias gradient.
//
// All of them are memory-bound: one grid-stride pass with 16-byte loads and stores wherever every pointer
// is 16-byte aligned (arenas are 256-byte aligned), element by element otherwise and for the tail.
// Arithmetic is in f32 for f32/f16/bf16 and in f64 for f64; results are rounded to nearest even once.
#include <atomic>
#include <cmath>
#include <cstring>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace dlbench::cuda {
namespace detail {

int multiprocessor_count() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices];
  int device = 0;
  DLB_KERNEL_CHECK(cudaGetDevice(&device));
  if (device >= 0 && device < kMaxDevices) {
    if (const int count = cache[device].load(std::memory_order_relaxed)) return count;
  }
  int count = 0;
  DLB_KERNEL_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  count = std::max(count, 1);
  if (device >= 0 && device < kMaxDevices) cache[device].store(count, std::memory_order_relaxed);
  return count;
}

}  // namespace detail

namespace {

using namespace detail;

// ---- ops for the elementwise driver ----

template <typename T>
struct FillOp {
  T* x;
  double value;
  template <int W>
  __device__ void apply(int64_t e) const {
    const T v = narrow<T>(value);
    Vec<T, W> out;
#pragma unroll
    for (int j = 0; j < W; ++j) out.v[j] = v;
    store_vec<W>(x + e, out);
  }
};

template <typename T>
struct AddOp {
  const T* a;
  const T* b;
  T* y;  // may alias a or b: each element is read and written by one thread
  template <int W>
  __device__ void apply(int64_t e) const {
    const Vec<T, W> va = load_vec<W>(a + e), vb = load_vec<W>(b + e);
    Vec<T, W> out;
#pragma unroll
    for (int j = 0; j < W; ++j) out.v[j] = narrow<T>(widen(va.v[j]) + widen(vb.v[j]));
    store_vec<W>(y + e, out);
  }
};

template <typename T>
struct ScaleOp {
  T* x;
  Acc<T> alpha;
  template <int W>
  __device__ void apply(int64_t e) const {
    Vec<T, W> v = load_vec<W>(x + e);
#pragma unroll
    for (int j = 0; j < W; ++j) v.v[j] = narrow<T>(alpha * widen(v.v[j]));
    store_vec<W>(x + e, v);
  }
};

template <typename S, typename D>
struct CastOp {
  const S* src;
  D* dst;
  template <int W>
  __device__ void apply(int64_t e) const {
    const Vec<S, W> in = load_vec<W>(src + e);
    Vec<D, W> out;
    // widen() is exact, so each element is rounded once, straight from its source value.
#pragma unroll
    for (int j = 0; j < W; ++j) out.v[j] = narrow<D>(widen(in.v[j]));
    store_vec<W>(dst + e, out);
  }
};

template <typename T>
struct ReluForwardOp {
  const T* x;
  T* y;
  template <int W>
  __device__ void apply(int64_t e) const {
    Vec<T, W> v = load_vec<W>(x + e);
#pragma unroll
    for (int j = 0; j < W; ++j) {
      if (widen(v.v[j]) < 0) v.v[j] = narrow<T>(0.0f);  // NaN and -0 pass through, as in the reference
    }
    store_vec<W>(y + e, v);
  }
};

template <typename T>
struct ReluBackwardOp {
  const T* y;
  const T* dy;
  T* dx;
  template <int W>
  __device__ void apply(int64_t e) const {
    const Vec<T, W> vy = load_vec<W>(y + e);
    Vec<T, W> g = load_vec<W>(dy + e);
#pragma unroll
    for (int j = 0; j < W; ++j) {
      if (!(widen(vy.v[j]) > 0)) g.v[j] = narrow<T>(0.0f);
    }
    store_vec<W>(dx + e, g);
  }
};

// y[row, col] += bias[col]. With W > 1 a vector never crosses a row (cols % W == 0) and the bias is
// 16-byte aligned too. Index is uint32_t when rows * cols fits, so the column is a 32-bit remainder.
template <typename T, typename B, typename Index>
struct AddBiasOp {
  T* y;
  const B* bias;
  Index cols;
  template <int W>
  __device__ void apply(int64_t e) const {
    const Index col = static_cast<Index>(e) % cols;
    using A = decltype(widen(T{}));
    // The bias in accesses of at most 16 bytes (two for 8 f16 outputs with an f32 bias).
    constexpr int BV = W * sizeof(B) <= 16 ? W : static_cast<int>(16 / sizeof(B));
    Vec<T, W> v = load_vec<W>(y + e);
#pragma unroll
    for (int c = 0; c < W; c += BV) {
      const Vec<B, BV> b = load_vec<BV>(bias + col + c);
#pragma unroll
      for (int j = 0; j < BV; ++j) v.v[c + j] = narrow<T>(widen(v.v[c + j]) + static_cast<A>(widen(b.v[j])));
    }
    store_vec<W>(y + e, v);
  }
};

// Inf and NaN are the values whose exponent bits are all ones: tested on the raw bits.
template <typename T>
struct FiniteBits;
template <>
struct FiniteBits<float> {
  using Bits = uint32_t;
  static constexpr Bits kExponent = 0x7F800000u;
};
template <>
struct FiniteBits<double> {
  using Bits = uint64_t;
  static constexpr Bits kExponent = 0x7FF0000000000000ull;
};
template <>
struct FiniteBits<__half> {
  using Bits = uint16_t;
  static constexpr Bits kExponent = 0x7C00u;
};
template <>
struct FiniteBits<__nv_bfloat16> {
  using Bits = uint16_t;
  static constexpr Bits kExponent = 0x7F80u;
};

template <typename T>
struct CheckFiniteOp {
  using Bits = typename FiniteBits<T>::Bits;
  const Bits* x;
  int32_t* flag;
  template <int W>
  __device__ void apply(int64_t e) const {
    const Vec<Bits, W> v = load_vec<W>(x + e);
    bool bad = false;
#pragma unroll
    for (int j = 0; j < W; ++j) bad |= (v.v[j] & FiniteBits<T>::kExponent) == FiniteBits<T>::kExponent;
    if (bad) *flag = 1;  // every writer writes 1; nobody ever writes 0
  }
};

// ---- bias gradient: dbias[col] (=|+=) sum over rows of dy[row, col] ----
//
// One block of 1024 threads per tile of columns one 32-byte sector wide (8 f32, 16 f16/bf16, 4 f64
// columns). When dy is 16-byte aligned and cols a multiple of V = 16 / sizeof(T), two threads cover a row
// of the tile with one 16-byte load each (512 row lanes a block); otherwise each thread loads one element
// (32 / sizeof(T) threads a row). Either way every sector read is used whole, and the row lanes stride
// over the rows with several loads in flight. Their partial sums are then added by a shared-memory tree
// in a fixed order: no atomics, so the result does not depend on scheduling. 1000 f32 columns make 125
// blocks, about one per multiprocessor.
constexpr int kBiasThreads = 1024;

template <typename T, typename D, int V>
__global__ void __launch_bounds__(kBiasThreads)
    bias_backward_kernel(const T* __restrict__ dy, D* __restrict__ dbias, int64_t rows, int64_t cols,
                         bool accumulate) {
  using A = Acc<T>;
  constexpr int kTileCols = static_cast<int>(32 / sizeof(T));
  constexpr int kThreadsPerRow = kTileCols / V, kRowLanes = kBiasThreads / kThreadsPerRow;
  __shared__ A partial[V][kRowLanes][kThreadsPerRow];  // [v][lane][c]: a warp's accesses are consecutive
  const int c = threadIdx.x % kThreadsPerRow, row_lane = threadIdx.x / kThreadsPerRow;
  const int64_t col = int64_t(blockIdx.x) * kTileCols + c * V;  // first of this thread's V columns
  A sum[V];
#pragma unroll
  for (int v = 0; v < V; ++v) sum[v] = 0;
  if (col < cols) {  // with V > 1, cols % V == 0: all V columns exist
#pragma unroll 4
    for (int64_t row = row_lane; row < rows; row += kRowLanes) {
      const Vec<T, V> x = load_vec<V>(dy + row * cols + col);
#pragma unroll
      for (int v = 0; v < V; ++v) sum[v] += widen(x.v[v]);
    }
  }
#pragma unroll
  for (int v = 0; v < V; ++v) partial[v][row_lane][c] = sum[v];
  __syncthreads();
#pragma unroll
  for (int half = kRowLanes / 2; half > 0; half /= 2) {
    if (row_lane < half) {
#pragma unroll
      for (int v = 0; v < V; ++v) partial[v][row_lane][c] += partial[v][row_lane + half][c];
    }
    __syncthreads();
  }
  if (row_lane == 0 && col < cols) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      A total = partial[v][0][c];
      if (accumulate) total += static_cast<A>(widen(dbias[col + v]));
      dbias[col + v] = narrow<D>(total);
    }
  }
}

// The pixels of an NHWC tensor at a stride, element by element over the `dense` (gathered) tensor's or,
// for the overwriting scatter, over the full one's elements. I is the index type.
template <typename T, typename I>
struct StridedPixelsOp {
  enum class Mode { gather, scatter, scatter_add };
  const T* src;
  T* dst;
  I in_h, in_w, out_h, out_w, channels, stride;
  Mode mode;
  // The full tensor's element of the gathered element `i`.
  __device__ I full_index(I i) const {
    const I c = i % channels, pixel = i / channels, w = pixel % out_w, rest = pixel / out_w, h = rest % out_h,
            n = rest / out_h;
    return ((n * in_h + h * stride) * in_w + w * stride) * channels + c;
  }
  template <int W>
  __device__ void apply(int64_t e) const {
    static_assert(W == 1, "strided pixels run element by element");
    const I i = I(e);
    if (mode == Mode::gather) {
      dst[i] = src[full_index(i)];
    } else if (mode == Mode::scatter_add) {
      const I full = full_index(i);
      dst[full] = narrow<T>(widen(dst[full]) + widen(src[i]));
    } else {  // over the full tensor: its strided pixels take src's value, the others 0
      const I c = i % channels, pixel = i / channels, w = pixel % in_w, rest = pixel / in_w, h = rest % in_h,
              n = rest / in_h;
      const bool sampled = h % stride == 0 && w % stride == 0;
      dst[i] = sampled ? src[((n * out_h + h / stride) * out_w + w / stride) * channels + c]
                       : narrow<T>(Acc<T>(0));
    }
  }
};

template <typename T, typename Op>
void launch_16(int64_t n, bool vector_ok, const Op& op, cudaStream_t stream) {
  launch_elementwise<kVec16<T>>(n, vector_ok, op, stream);
}

void require_n(const char* op, int64_t n) { DLB_KERNEL_REQUIRE(n >= 0, op, "the element count is negative"); }

}  // namespace

void fill(void* x, DType dtype, int64_t n, double value, cudaStream_t stream) {
  require_n("fill", n);
  const bool vector_ok = aligned(x, 16);
  if (dtype == DType::i32) {
    DLB_KERNEL_REQUIRE(value == std::trunc(value) && std::abs(value) <= 2147483647.0, "fill",
                       "the value does not fit i32");
    launch_16<int32_t>(n, vector_ok, FillOp<int32_t>{static_cast<int32_t*>(x), value}, stream);
    return;
  }
  dispatch_float(dtype, "fill", [&](auto tag) {
    using T = decltype(tag);
    launch_16<T>(n, vector_ok, FillOp<T>{static_cast<T*>(x), value}, stream);
  });
}

void add(const void* a, const void* b, void* y, DType dtype, int64_t n, cudaStream_t stream) {
  require_n("add", n);
  const bool vector_ok = aligned(a, 16) && aligned(b, 16) && aligned(y, 16);
  dispatch_float(dtype, "add", [&](auto tag) {
    using T = decltype(tag);
    launch_16<T>(n, vector_ok,
                 AddOp<T>{static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y)}, stream);
  });
}

void scale(void* x, DType dtype, int64_t n, double alpha, cudaStream_t stream) {
  require_n("scale", n);
  dispatch_float(dtype, "scale", [&](auto tag) {
    using T = decltype(tag);
    launch_16<T>(n, aligned(x, 16), ScaleOp<T>{static_cast<T*>(x), static_cast<Acc<T>>(alpha)}, stream);
  });
}

void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n, cudaStream_t stream) {
  require_n("cast", n);
  if (n == 0) return;
  if (src_dtype == dst_dtype) {
    DLB_KERNEL_REQUIRE(src_dtype != DType::i32, "cast", "i32 is not a float dtype");
    if (src != dst) {
      DLB_KERNEL_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(src_dtype),
                                       cudaMemcpyDeviceToDevice, stream));
    }
    return;
  }
  dispatch_float(src_dtype, "cast", [&](auto src_tag) {
    dispatch_float(dst_dtype, "cast", [&](auto dst_tag) {
      using S = decltype(src_tag);
      using D = decltype(dst_tag);
      if constexpr (!std::is_same_v<S, D>) {  // equal dtypes were copied above
        // One vector is 16 bytes of the wider of the two types.
        constexpr int V = kVec16<S> < kVec16<D> ? kVec16<S> : kVec16<D>;
        const bool vector_ok = aligned(src, V * sizeof(S)) && aligned(dst, V * sizeof(D));
        launch_elementwise<V>(n, vector_ok, CastOp<S, D>{static_cast<const S*>(src), static_cast<D*>(dst)},
                              stream);
      }
    });
  });
}

void relu_forward(const void* x, void* y, DType dtype, int64_t n, cudaStream_t stream) {
  require_n("relu_forward", n);
  dispatch_float(dtype, "relu_forward", [&](auto tag) {
    using T = decltype(tag);
    launch_16<T>(n, aligned(x, 16) && aligned(y, 16),
                 ReluForwardOp<T>{static_cast<const T*>(x), static_cast<T*>(y)}, stream);
  });
}

void relu_backward(const void* y, const void* dy, void* dx, DType dtype, int64_t n, cudaStream_t stream) {
  require_n("relu_backward", n);
  dispatch_float(dtype, "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    launch_16<T>(n, aligned(y, 16) && aligned(dy, 16) && aligned(dx, 16),
                 ReluBackwardOp<T>{static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx)},
                 stream);
  });
}

void add_bias(void* y, DType y_dtype, const void* bias, DType bias_dtype, int64_t rows, int64_t cols,
              cudaStream_t stream) {
  DLB_KERNEL_REQUIRE(rows >= 0 && cols >= 0, "add_bias", "rows and cols must not be negative");
  DLB_KERNEL_REQUIRE(bias_dtype == y_dtype || bias_dtype == DType::f32, "add_bias",
                     "bias must be f32 or the dtype of y");
  const int64_t n = rows * cols;
  if (n == 0) return;
  dispatch_float(y_dtype, "add_bias", [&](auto y_tag) {
    dispatch_float(bias_dtype, "add_bias", [&](auto bias_tag) {
      using T = decltype(y_tag);
      using B = decltype(bias_tag);
      if constexpr (std::is_same_v<B, T> || std::is_same_v<B, float>) {
        constexpr int V = kVec16<T>;
        const bool vector_ok = aligned(y, 16) && aligned(bias, 16) && cols % V == 0;
        if (n <= int64_t(UINT32_MAX)) {
          launch_elementwise<V>(n, vector_ok,
                                AddBiasOp<T, B, uint32_t>{static_cast<T*>(y), static_cast<const B*>(bias),
                                                          static_cast<uint32_t>(cols)},
                                stream);
        } else {
          launch_elementwise<V>(n, vector_ok,
                                AddBiasOp<T, B, uint64_t>{static_cast<T*>(y), static_cast<const B*>(bias),
                                                          static_cast<uint64_t>(cols)},
                                stream);
        }
      }
    });
  });
}

void bias_backward(const void* dy, DType dy_dtype, void* dbias, DType dbias_dtype, int64_t rows, int64_t cols,
                   bool accumulate, cudaStream_t stream) {
  DLB_KERNEL_REQUIRE(rows >= 0 && cols >= 0, "bias_backward", "rows and cols must not be negative");
  DLB_KERNEL_REQUIRE(dbias_dtype == dy_dtype || dbias_dtype == DType::f32, "bias_backward",
                     "dbias must be f32 or the dtype of dy");
  if (cols == 0) return;
  dispatch_float(dy_dtype, "bias_backward", [&](auto dy_tag) {
    dispatch_float(dbias_dtype, "bias_backward", [&](auto dbias_tag) {
      using T = decltype(dy_tag);
      using D = decltype(dbias_tag);
      if constexpr (std::is_same_v<D, T> || std::is_same_v<D, float>) {
        constexpr int kTileCols = static_cast<int>(32 / sizeof(T)), V = kVec16<T>;
        const int64_t tiles = (cols + kTileCols - 1) / kTileCols;
        DLB_KERNEL_REQUIRE(tiles <= int64_t(INT32_MAX), "bias_backward", "too many columns");
        const T* in = static_cast<const T*>(dy);
        D* out = static_cast<D*>(dbias);
        if (aligned(dy, 16) && cols % V == 0) {
          bias_backward_kernel<T, D, V>
              <<<static_cast<unsigned>(tiles), kBiasThreads, 0, stream>>>(in, out, rows, cols, accumulate);
        } else {
          bias_backward_kernel<T, D, 1>
              <<<static_cast<unsigned>(tiles), kBiasThreads, 0, stream>>>(in, out, rows, cols, accumulate);
        }
        DLB_KERNEL_LAUNCH_CHECK();
      }
    });
  });
}

namespace {
void launch_strided_pixels(const void* src, int64_t batch, int64_t in_h, int64_t in_w, int64_t channels,
                           int64_t stride, void* dst, DType dtype, int mode, const char* op,
                           cudaStream_t stream) {
  DLB_KERNEL_REQUIRE(batch >= 0 && in_h > 0 && in_w > 0 && channels > 0 && stride > 0, op,
                     "sizes and the stride must be positive");
  const int64_t out_h = (in_h - 1) / stride + 1, out_w = (in_w - 1) / stride + 1;
  const int64_t full = batch * in_h * in_w * channels, dense = batch * out_h * out_w * channels;
  // The overwriting scatter writes every element of the full tensor; the others go over the dense one.
  const int64_t n = mode == 1 ? full : dense;
  if (n == 0) return;
  dispatch_float(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(full, [&](auto index_tag) {
      using I = decltype(index_tag);
      using Op = StridedPixelsOp<T, I>;
      launch_elementwise<1>(n, false,
                            Op{static_cast<const T*>(src), static_cast<T*>(dst), I(in_h), I(in_w), I(out_h),
                               I(out_w), I(channels), I(stride), static_cast<typename Op::Mode>(mode)},
                            stream);
    });
  });
}
}  // namespace

void gather_strided_pixels(const void* src, int64_t batch, int64_t in_h, int64_t in_w, int64_t channels,
                           int64_t stride, void* dst, DType dtype, cudaStream_t stream) {
  launch_strided_pixels(src, batch, in_h, in_w, channels, stride, dst, dtype, 0, "gather_strided_pixels",
                        stream);
}

void scatter_strided_pixels(const void* src, int64_t batch, int64_t in_h, int64_t in_w, int64_t channels,
                            int64_t stride, void* dst, DType dtype, bool accumulate, cudaStream_t stream) {
  launch_strided_pixels(src, batch, in_h, in_w, channels, stride, dst, dtype, accumulate ? 2 : 1,
                        "scatter_strided_pixels", stream);
}

namespace {
__global__ void hold_kernel(uint64_t nanoseconds) {
  uint64_t start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < nanoseconds);
}
}  // namespace

void hold_stream(double microseconds, cudaStream_t stream) {
  hold_kernel<<<1, 1, 0, stream>>>(static_cast<uint64_t>(microseconds * 1000.0));
  DLB_KERNEL_CHECK(cudaGetLastError());
}

void check_finite(const void* x, DType dtype, int64_t n, int32_t* flag, cudaStream_t stream) {
  require_n("check_finite", n);
  dispatch_float(dtype, "check_finite", [&](auto tag) {
    using T = decltype(tag);
    using Bits = typename FiniteBits<T>::Bits;
    launch_16<T>(n, aligned(x, 16), CheckFiniteOp<T>{static_cast<const Bits*>(x), flag}, stream);
  });
}

}  // namespace dlbench::cuda
