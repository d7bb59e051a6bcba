// Internals shared by the .cu files of dlbench's own kernels: dtype dispatch, f32/f64 widening of the
// 16-bit formats, 16-byte vectors, grid sizing and the vectorised grid-stride elementwise driver.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/backend.h"
#include "backend/cuda/kernel_check.h"
#include "core/align.h"

namespace dlbench::cuda::detail {

constexpr int kThreads = 256;  // block size of the elementwise kernels

// Multiprocessors of the current device, read once per device (cudaDeviceGetAttribute is cheap but not
// free, and a launcher runs every step).
int multiprocessor_count();

// Blocks for `items` work items of one thread each, capped at `blocks_per_sm` resident blocks per
// multiprocessor (the kernels stride over the rest). Never 0.
inline unsigned grid_for(int64_t items, int threads = kThreads, int blocks_per_sm = 8) {
  const int64_t wanted = ceil_div<int64_t>(items, threads);
  const int64_t cap = int64_t(multiprocessor_count()) * blocks_per_sm;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(wanted, cap)));
}

inline bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The most dynamic shared memory a block may take on the current device (by opting in past 48 KB); 0
// where the device cannot say.
inline size_t shared_memory_opt_in() {
  int device = 0, bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return static_cast<size_t>(bytes);
}

// Calls fn(T{}) with the element type of a float dtype: float, __half, __nv_bfloat16 or double.
template <typename Fn>
void dispatch_float(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      fn(float{});
      return;
    case DType::f16:
      fn(__half{});
      return;
    case DType::bf16:
      fn(__nv_bfloat16{});
      return;
    case DType::f64:
      fn(double{});
      return;
    default:
      break;
  }
  DLB_KERNEL_REQUIRE(false, op, "the dtype is not a float dtype (f32, f16, bf16, f64)");
}

// The type arithmetic happens in: f32 for f32/f16/bf16, f64 for f64.
template <typename T>
struct AccOf {
  using type = float;
};
template <>
struct AccOf<double> {
  using type = double;
};
template <typename T>
using Acc = typename AccOf<T>::type;

// Exact widening of an element to its accumulation type.
__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__half x) { return __half2float(x); }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ double widen(double x) { return x; }

// Rounding (to nearest even) of a float or double to T, in one step: a double goes straight to f16/bf16,
// never through float (no double rounding).
template <typename T>
struct Narrow;
template <>
struct Narrow<float> {
  static __device__ __forceinline__ float from(float x) { return x; }
  static __device__ __forceinline__ float from(double x) { return __double2float_rn(x); }
};
template <>
struct Narrow<__half> {
  static __device__ __forceinline__ __half from(float x) { return __float2half_rn(x); }
  static __device__ __forceinline__ __half from(double x) { return __double2half(x); }
};
template <>
struct Narrow<__nv_bfloat16> {
  static __device__ __forceinline__ __nv_bfloat16 from(float x) { return __float2bfloat16_rn(x); }
  static __device__ __forceinline__ __nv_bfloat16 from(double x) { return __double2bfloat16(x); }
};
template <>
struct Narrow<double> {
  static __device__ __forceinline__ double from(float x) { return x; }
  static __device__ __forceinline__ double from(double x) { return x; }
};
template <>
struct Narrow<int32_t> {  // fill of i32 buffers only; the value was checked to be integral
  static __device__ __forceinline__ int32_t from(double x) { return static_cast<int32_t>(x); }
};
template <typename T, typename From>
__device__ __forceinline__ T narrow(From x) {
  return Narrow<T>::from(x);
}

// N elements loaded or stored as one access (16 bytes at most): alignas makes nvcc emit LDG.128/STG.128.
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

template <int N, typename T>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, N>*>(p);
}
template <int N, typename T>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& value) {
  *reinterpret_cast<Vec<T, N>*>(p) = value;
}

// The elementwise driver. `op.template apply<W>(e)` handles elements [e, e + W), where e is a multiple of
// W and every pointer the op touches is aligned for W elements. The grid strides over the n / V vectors
// of V elements, then over the scalar tail [n / V * V, n). V = 1 is the fallback for unaligned pointers.
template <int V, typename Op>
__global__ void __launch_bounds__(kThreads) elementwise_kernel(int64_t n, Op op) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t vectors = n / V;
  for (int64_t i = tid; i < vectors; i += stride) op.template apply<V>(i * V);
  if constexpr (V > 1) {
    for (int64_t e = vectors * V + tid; e < n; e += stride) op.template apply<1>(e);
  }
}

// Launches the driver with V-element vectors when `vector_ok`, element by element otherwise.
template <int V, typename Op>
void launch_elementwise(int64_t n, bool vector_ok, const Op& op, cudaStream_t stream) {
  if (n <= 0) return;
  if (vector_ok && V > 1) {
    elementwise_kernel<V, Op><<<grid_for(n / V + n % V), kThreads, 0, stream>>>(n, op);
  } else {
    elementwise_kernel<1, Op><<<grid_for(n), kThreads, 0, stream>>>(n, op);
  }
  DLB_KERNEL_LAUNCH_CHECK();
}

// Calls fn(index tag): uint32_t when every index a kernel forms (at most `largest`) fits it — 64-bit
// division is several times slower — else uint64_t.
template <typename Fn>
void dispatch_index(int64_t largest, Fn&& fn) {
  if (largest < int64_t(UINT32_MAX)) {
    fn(uint32_t{});
  } else {
    fn(uint64_t{});
  }
}

// Elements of T in one 16-byte access.
template <typename T>
constexpr int kVec16 = static_cast<int>(16 / sizeof(T));

// ---- reductions ----

template <typename T>
__device__ __forceinline__ T warp_sum(T x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}
template <typename T>
__device__ __forceinline__ T warp_max(T x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x = max(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// One value per thread of a block of `Threads` threads (whole warps, threadIdx.x only) combined into one,
// returned to every thread: each warp by shuffles, then the warps' results in warp order, so the result's
// bits never change from run to run. Ends with a barrier, so that it may be called again at once.
struct Add {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct Max {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return max(a, b);
  }
};
template <int Threads, typename T, typename Combine>
__device__ __forceinline__ T block_reduce(T x, Combine combine) {
  static_assert(Threads % 32 == 0 && Threads <= 1024, "a block of whole warps");
  __shared__ T warps[Threads / 32];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x = combine(x, __shfl_xor_sync(0xffffffffu, x, offset));
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = x;
  __syncthreads();
  T result = warps[0];
  for (int w = 1; w < Threads / 32; ++w) result = combine(result, warps[w]);
  __syncthreads();
  return result;
}

}  // namespace dlbench::cuda::detail
