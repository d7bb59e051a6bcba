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
// Two launches, deterministic. The first splits dy into tiles of 32 * V columns (V = 16 / sizeof(T)
// where dy is 16-byte aligned and cols a multiple of V, else 1) by chunks of rows, a block of 8 warps a
// tile and chunk: each warp reads its rows a whole tile wide, a lane V consecutive columns in one access,
// so a warp's access is 512 contiguous bytes of a row (bf16) and the read streams at the memory's rate.
// The block adds its warps' sums in warp order and writes its chunk's partial sums to the scratch; the
// second adds the chunks' partials of each column in chunk order and writes (or adds to) dbias. No
// atomics: the same bits on every run. (The kernel before it gave a block one 32-byte column tile and all
// rows, a row's 32 bytes at a time: 64-67% of the copy rate at GPT-2's widths on an H200,
// bench/results/gpt2-gemm-choice.)
constexpr int kBiasWarps = 8;
constexpr int64_t kBiasMaxChunks = 64, kBiasMinChunkRows = 64;

// The most chunks of rows: none under kBiasMinChunkRows rows, at most kBiasMaxChunks (what the scratch
// holds partials for).
int64_t bias_max_chunks(int64_t rows) {
  return std::clamp<int64_t>(rows / kBiasMinChunkRows, 1, kBiasMaxChunks);
}

// The chunks of rows for `tiles` column tiles: enough blocks for ~4 a multiprocessor.
int64_t bias_chunks(int64_t rows, int64_t tiles) {
  const int64_t wanted = ceil_div<int64_t>(4 * int64_t(multiprocessor_count()), std::max<int64_t>(tiles, 1));
  return std::clamp<int64_t>(wanted, 1, bias_max_chunks(rows));
}

template <typename T, int V>
__global__ void __launch_bounds__(kBiasWarps * 32)
    bias_partials_kernel(const T* __restrict__ dy, int64_t row_stride, Acc<T>* __restrict__ partials,
                         int64_t rows, int64_t cols, int64_t chunk_rows) {
  using A = Acc<T>;
  constexpr int kTileCols = 32 * V;
  __shared__ A warp_sums[kBiasWarps][kTileCols];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t col = int64_t(blockIdx.x) * kTileCols + lane * V;  // this lane's first column
  const int64_t first = int64_t(blockIdx.y) * chunk_rows, last = min(rows, first + chunk_rows);
  A sum[V];
#pragma unroll
  for (int v = 0; v < V; ++v) sum[v] = 0;
  if (col < cols) {  // with V > 1, cols % V == 0: all V columns exist
#pragma unroll 4
    for (int64_t row = first + warp; row < last; row += kBiasWarps) {
      const Vec<T, V> x = load_vec<V>(dy + row * row_stride + col);
#pragma unroll
      for (int v = 0; v < V; ++v) sum[v] += widen(x.v[v]);
    }
  }
#pragma unroll
  for (int v = 0; v < V; ++v) warp_sums[warp][lane * V + v] = sum[v];
  __syncthreads();
  for (int c = threadIdx.x; c < kTileCols; c += kBiasWarps * 32) {
    const int64_t out = int64_t(blockIdx.x) * kTileCols + c;
    if (out >= cols) break;
    A total = 0;
#pragma unroll
    for (int w = 0; w < kBiasWarps; ++w) total += warp_sums[w][c];
    partials[int64_t(blockIdx.y) * cols + out] = total;
  }
}

template <typename A, typename D>
__global__ void bias_finalize_kernel(const A* __restrict__ partials, D* __restrict__ dbias, int64_t cols,
                                     int64_t chunks, bool accumulate) {
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  A total = accumulate ? static_cast<A>(widen(dbias[col])) : A(0);
  for (int64_t chunk = 0; chunk < chunks; ++chunk) total += partials[chunk * cols + col];
  dbias[col] = narrow<D>(total);
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

size_t bias_backward_scratch_bytes(int64_t rows, int64_t cols, DType dy_dtype) {
  const size_t sum_bytes = dy_dtype == DType::f64 ? sizeof(double) : sizeof(float);
  return static_cast<size_t>(bias_max_chunks(rows) * std::max<int64_t>(cols, 0)) * sum_bytes;
}

void bias_backward(const void* dy, DType dy_dtype, void* dbias, DType dbias_dtype, int64_t rows, int64_t cols,
                   bool accumulate, void* scratch, cudaStream_t stream) {
  bias_backward_columns(dy, dy_dtype, cols, dbias, dbias_dtype, rows, cols, accumulate, scratch, stream);
}

void bias_backward_columns(const void* dy, DType dy_dtype, int64_t row_stride, void* dbias, DType dbias_dtype,
                           int64_t rows, int64_t cols, bool accumulate, void* scratch, cudaStream_t stream) {
  const char* op = "bias_backward";
  DLB_KERNEL_REQUIRE(rows >= 0 && cols >= 0, op, "rows and cols must not be negative");
  DLB_KERNEL_REQUIRE(row_stride >= cols, op, "rows must be at least cols apart");
  DLB_KERNEL_REQUIRE(dbias_dtype == dy_dtype || dbias_dtype == DType::f32, op,
                     "dbias must be f32 or the dtype of dy");
  if (cols == 0) return;
  dispatch_float(dy_dtype, op, [&](auto dy_tag) {
    dispatch_float(dbias_dtype, op, [&](auto dbias_tag) {
      using T = decltype(dy_tag);
      using D = decltype(dbias_tag);
      using A = Acc<T>;
      if constexpr (std::is_same_v<D, T> || std::is_same_v<D, float>) {
        const bool vector_ok = aligned(dy, 16) && cols % kVec16<T> == 0 && row_stride % kVec16<T> == 0;
        const int64_t tile_cols = 32 * (vector_ok ? kVec16<T> : 1);
        const int64_t tiles = ceil_div(cols, tile_cols);
        const int64_t chunks = bias_chunks(rows, tiles);
        const int64_t chunk_rows = std::max<int64_t>(1, ceil_div(rows, chunks));
        DLB_KERNEL_REQUIRE(tiles <= int64_t(INT32_MAX), op, "too many columns");
        const T* in = static_cast<const T*>(dy);
        A* partials = static_cast<A*>(scratch);
        const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(chunks));
        if (vector_ok)
          bias_partials_kernel<T, kVec16<T>>
              <<<grid, kBiasWarps * 32, 0, stream>>>(in, row_stride, partials, rows, cols, chunk_rows);
        else
          bias_partials_kernel<T, 1>
              <<<grid, kBiasWarps * 32, 0, stream>>>(in, row_stride, partials, rows, cols, chunk_rows);
        DLB_KERNEL_LAUNCH_CHECK();
        constexpr int kThreads = 256;
        bias_finalize_kernel<<<static_cast<unsigned>(ceil_div<int64_t>(cols, kThreads)), kThreads, 0,
                               stream>>>(partials, static_cast<D*>(dbias), cols, chunks, accumulate);
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
