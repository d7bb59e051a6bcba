// FP8 quantization of a GEMM operand, the first piece of FP8 training with delayed per-tensor scaling (the
// recipe NVIDIA's Transformer Engine trains Hopper models with): a tensor x is multiplied by its scale,
// rounded to the nearest FP8 value of its format (E4M3 for weights and activations, E5M2 for gradients),
// saturating past the largest finite one, exactly as core/fp8's float_to_fp8 does on the host; the
// largest |x| seen (its amax, what the next steps' scale is made from) is folded into a float in device
// memory; and a 2-D operand may be written transposed too, since Hopper's FP8 GEMMs take both operands
// K-major and the backward's GEMMs reduce over the other dimension.
//
// At the end of a step, update_fp8_scales pushes each operand's amax onto its history and makes its next
// scale from the history's maximum (core/fp8's fp8_scale_from_amax, the same float arithmetic), all in
// device memory, so that a recorded step adapts its scales without the host.
//
// Operands whose columns are multiples of 8 and rows of 4 (GPT-2's) take a kernel that moves 8 elements per
// access (quantize_fp8_wide_kernel); the others one block per 32 x 32 tile, one element per access: read
// coalesced along a row of x, written coalesced along a row of q and, through shared memory, along a row
// of q_transposed. The amax is a block maximum, then one atomicMax on
// the float's bits (the order of the maxima does not change the result: the same bits every run).
// The values may pass through GELU or its gradient first (Fp8Prologue): where a transformer's MLP runs in
// FP8, the passes that quantize c_proj's input take gelu(h) on their way from h, and the pass that
// quantizes c_fc's output gradient takes GELU's gradient, so that neither gelu(h) nor the gradient of h
// is written out and read back.
// A dense layer's output gradient may have its columns summed in the same pass (its bias gradient): each
// block's sums per column into a row of partials, added in a fixed order by a second kernel, without
// atomics.
#include <cuda_fp8.h>

#include <cfloat>
#include <type_traits>

#include "backend/cuda/gelu_math.cuh"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace dlbench::cuda {
namespace {

using namespace detail;

constexpr int kTile = 32;
constexpr int kTileRowsPerPass = 8;  // a 32 x 8 block walks the tile's 32 rows in 4 passes

__device__ __forceinline__ uint8_t to_fp8(float v, Fp8Format format) {
  return format == Fp8Format::e4m3 ? __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3)
                                   : __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E5M2);
}

// A value v of x after the prologue (kernels.h), `input` GELU's input where the prologue takes its gradient,
// rounded to T as gelu_forward and gelu_backward store theirs: the same float arithmetic (gelu_math.cuh),
// so the same codes as the separate pass followed by the quantization.
template <typename T>
__device__ __forceinline__ float after_prologue(float v, Fp8Prologue::Kind kind, float input) {
  using Math = GeluMath<Acc<T>>;
  if (kind == Fp8Prologue::Kind::gelu) return widen(narrow<T>(Math::value(v)));
  if (kind == Fp8Prologue::Kind::gelu_gradient) return widen(narrow<T>(v * Math::derivative(input)));
  return v;
}

template <typename T>
__global__ void __launch_bounds__(kTile* kTileRowsPerPass)
    quantize_fp8_kernel(const T* __restrict__ x, int64_t rows, int64_t cols, Fp8Format format,
                        const float* __restrict__ scale, uint8_t* __restrict__ q,
                        uint8_t* __restrict__ q_transposed, float* __restrict__ amax,
                        float* __restrict__ column_partials, Fp8Prologue::Kind prologue,
                        const T* __restrict__ gelu_input) {
  __shared__ uint8_t tile[kTile][kTile + 4];  // padded: the transposed reads hit different banks
  __shared__ float warp_maxima[kTile * kTileRowsPerPass / 32];
  __shared__ float column_sums[kTileRowsPerPass][kTile];
  const float s = *scale;
  const int64_t row0 = int64_t(blockIdx.y) * kTile, col0 = int64_t(blockIdx.x) * kTile;
  const int64_t col = col0 + threadIdx.x;
  float largest = 0.f, column_sum = 0.f;
  for (int r = threadIdx.y; r < kTile; r += kTileRowsPerPass) {
    const int64_t row = row0 + r;
    if (row < rows && col < cols) {
      const int64_t at = row * cols + col;
      const float input = prologue == Fp8Prologue::Kind::gelu_gradient ? widen(gelu_input[at]) : 0.f;
      const float v = after_prologue<T>(widen(x[at]), prologue, input);
      largest = fmaxf(largest, fabsf(v));  // fmaxf drops a NaN
      column_sum += v;
      const uint8_t bits = to_fp8(v * s, format);
      if (q) q[row * cols + col] = bits;
      tile[r][threadIdx.x] = bits;
    }
  }
  if (q_transposed) {
    __syncthreads();
    const int64_t t_col = row0 + threadIdx.x;  // a row of q_transposed is a column of x
    for (int r = threadIdx.y; r < kTile; r += kTileRowsPerPass) {
      const int64_t t_row = col0 + r;
      if (t_row < cols && t_col < rows) q_transposed[t_row * rows + t_col] = tile[threadIdx.x][r];
    }
  }
  if (column_partials) {  // the tile's column sums, its row lanes added in a fixed order
    column_sums[threadIdx.y][threadIdx.x] = column_sum;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
      float sum = column_sums[0][threadIdx.x];
      for (int lane = 1; lane < kTileRowsPerPass; ++lane) sum += column_sums[lane][threadIdx.x];
      column_partials[int64_t(blockIdx.y) * cols + col] = sum;
    }
  }
  if (amax) {
    const int thread = threadIdx.y * kTile + threadIdx.x;
    largest = warp_max(largest);
    if (thread % 32 == 0) warp_maxima[thread / 32] = largest;
    __syncthreads();
    if (thread == 0) {
      float block = 0.f;
      for (int w = 0; w < kTile * kTileRowsPerPass / 32; ++w) block = fmaxf(block, warp_maxima[w]);
      // Non-negative floats order as their bit patterns do as integers.
      atomicMax(reinterpret_cast<int*>(amax), __float_as_int(block));
    }
  }
}

// The same quantization for operands whose columns are multiples of 8 and rows of 4 (every GEMM operand of
// GPT-2): a 64 x 128 tile per block of 256 threads. Each thread reads 8 consecutive elements of a row in
// one access (16 bytes of BF16), its four rows' loads all issued before any is used, and writes their 8
// codes as one 64-bit word in q. q_transposed is written through shared memory, 4 x 4 blocks of codes
// transposed in registers (__byte_perm): one 32-bit shared read per transposed word, the tile's rows 33
// words apart so that neither the row-wise stores nor the block-wise reads meet a bank twice. The generic
// kernel above moves one element per access: these operands are the step's largest passes over memory
// after the GEMMs. A 64 x 64 tile of 4 elements an access, each transposed word gathered from four byte
// reads, ran at 67-82% of the copy rate at gpt2-large's shapes on an H100; this one at 74-94%
// (bench/results/gpt2-fp8, the kernel lab).
constexpr int kWideRows = 64, kWideCols = 128, kWideThreads = 256;
constexpr int kWideGroups = kWideCols / 8;                    // 16 threads a row, 8 columns each
constexpr int kWideRowsPerPass = kWideThreads / kWideGroups;  // 16
constexpr int kWidePasses = kWideRows / kWideRowsPerPass;     // 4
constexpr int kWideStrideWords = kWideCols / 4 + 1;           // 33: a row of codes and one word

template <typename T>
struct Eight;  // 8 consecutive elements in one access
template <>
struct Eight<float> {
  struct Access {
    float4 lo, hi;
  };
  static __device__ __forceinline__ void widen8(const Access& a, float* v) {
    v[0] = a.lo.x, v[1] = a.lo.y, v[2] = a.lo.z, v[3] = a.lo.w;
    v[4] = a.hi.x, v[5] = a.hi.y, v[6] = a.hi.z, v[7] = a.hi.w;
  }
};
template <typename Half2>
struct EightHalves {
  using Access = uint4;
  static __device__ __forceinline__ void widen8(const Access& a, float* v) {
    const Half2* pairs = reinterpret_cast<const Half2*>(&a);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = to_float2(pairs[i]);
      v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
  }
  static __device__ __forceinline__ float2 to_float2(__half2 h) { return __half22float2(h); }
  static __device__ __forceinline__ float2 to_float2(__nv_bfloat162 h) { return __bfloat1622float2(h); }
};
template <>
struct Eight<__half> : EightHalves<__half2> {};
template <>
struct Eight<__nv_bfloat16> : EightHalves<__nv_bfloat162> {};

template <typename T>
__device__ __forceinline__ typename Eight<T>::Access load8(const T* p) {
  return *reinterpret_cast<const typename Eight<T>::Access*>(p);
}

template <typename T>
__global__ void __launch_bounds__(kWideThreads)
    quantize_fp8_wide_kernel(const T* __restrict__ x, int64_t rows, int64_t cols, Fp8Format format,
                             const float* __restrict__ scale, uint8_t* __restrict__ q,
                             uint8_t* __restrict__ q_transposed, float* __restrict__ amax,
                             float* __restrict__ column_partials, Fp8Prologue::Kind prologue,
                             const T* __restrict__ gelu_input) {
  __shared__ uint32_t tile[kWideRows * kWideStrideWords];
  __shared__ float column_sums[kWideRowsPerPass][kWideCols];
  const float s = *scale;
  const int64_t row0 = int64_t(blockIdx.y) * kWideRows, col0 = int64_t(blockIdx.x) * kWideCols;
  const int group = threadIdx.x % kWideGroups, lane_row = threadIdx.x / kWideGroups;
  const int64_t col = col0 + 8 * group;
  // Every load issued before any is used: 64 bytes of BF16 in flight a thread.
  typename Eight<T>::Access raw[kWidePasses] = {}, raw_input[kWidePasses] = {};
#pragma unroll
  for (int pass = 0; pass < kWidePasses; ++pass) {
    const int64_t row = row0 + pass * kWideRowsPerPass + lane_row;
    if (row < rows && col < cols) {  // cols is a multiple of 8: all eight are in
      raw[pass] = load8(x + row * cols + col);
      if (prologue == Fp8Prologue::Kind::gelu_gradient)
        raw_input[pass] = load8(gelu_input + row * cols + col);
    }
  }
  float largest = 0.f, column_sum[8] = {};
#pragma unroll
  for (int pass = 0; pass < kWidePasses; ++pass) {
    const int r = pass * kWideRowsPerPass + lane_row;
    const int64_t row = row0 + r;
    uint32_t word[2] = {0, 0};  // zero codes outside x: q_transposed's writes skip them
    if (row < rows && col < cols) {
      float v[8], input[8] = {};
      Eight<T>::widen8(raw[pass], v);
      if (prologue == Fp8Prologue::Kind::gelu_gradient) Eight<T>::widen8(raw_input[pass], input);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        v[i] = after_prologue<T>(v[i], prologue, input[i]);
        largest = fmaxf(largest, fabsf(v[i]));  // fmaxf drops a NaN
        column_sum[i] += v[i];
        word[i / 4] |= uint32_t(to_fp8(v[i] * s, format)) << (8 * (i % 4));
      }
      if (q) *reinterpret_cast<uint2*>(q + row * cols + col) = make_uint2(word[0], word[1]);
    }
    tile[r * kWideStrideWords + 2 * group] = word[0];
    tile[r * kWideStrideWords + 2 * group + 1] = word[1];
  }
  if (q_transposed) {
    __syncthreads();
    // The tile's codes in 4 x 4 blocks, 16 of 4 rows by 32 of 4 columns, two a thread. A warp takes 8 row
    // blocks of 4 column blocks: its reads of one block row fall in 32 different banks, and its writes
    // are 32 contiguous bytes of 4 rows of q_transposed.
#pragma unroll
    for (int round = 0; round < 2; ++round) {
      const int block = round * kWideThreads + threadIdx.x;
      const int row_block = block % 8 + 8 * (block / kWideThreads), col_block = block % kWideThreads / 8;
      uint32_t w[4];  // 4 rows of 4 codes
#pragma unroll
      for (int j = 0; j < 4; ++j) w[j] = tile[(4 * row_block + j) * kWideStrideWords + col_block];
      const uint32_t lo01 = __byte_perm(w[0], w[1], 0x5140), hi01 = __byte_perm(w[0], w[1], 0x7362),
                     lo23 = __byte_perm(w[2], w[3], 0x5140), hi23 = __byte_perm(w[2], w[3], 0x7362);
      const uint32_t column[4] = {__byte_perm(lo01, lo23, 0x5410), __byte_perm(lo01, lo23, 0x7632),
                                  __byte_perm(hi01, hi23, 0x5410), __byte_perm(hi01, hi23, 0x7632)};
      const int64_t t_col = row0 + 4 * row_block;  // rows is a multiple of 4
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t t_row = col0 + 4 * col_block + i;  // a row of q_transposed is a column of x
        if (t_row < cols && t_col < rows)
          *reinterpret_cast<uint32_t*>(q_transposed + t_row * rows + t_col) = column[i];
      }
    }
  }
  if (column_partials) {  // the tile's column sums, its row lanes added in a fixed order
#pragma unroll
    for (int i = 0; i < 8; ++i) column_sums[lane_row][8 * group + i] = column_sum[i];
    __syncthreads();
    const int64_t sum_col = col0 + threadIdx.x;
    if (threadIdx.x < kWideCols && sum_col < cols) {
      float sum = column_sums[0][threadIdx.x];
      for (int lane = 1; lane < kWideRowsPerPass; ++lane) sum += column_sums[lane][threadIdx.x];
      column_partials[int64_t(blockIdx.y) * cols + sum_col] = sum;
    }
  }
  if (amax) {
    largest = block_reduce<kWideThreads>(largest, Max{});
    if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(amax), __float_as_int(largest));
  }
}

// One thread per operand: the history shifts by one (newest first), the amax enters it and is zeroed for
// the next step, and the scale follows the history's maximum.
__global__ void update_fp8_scales_kernel(float* __restrict__ amaxes, float* __restrict__ histories,
                                         int length, float* __restrict__ scales,
                                         float* __restrict__ inverse_scales,
                                         const Fp8Format* __restrict__ formats, int count, int margin) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  float* history = histories + int64_t(i) * length;
  for (int j = length - 1; j > 0; --j) history[j] = history[j - 1];
  history[0] = amaxes[i];
  amaxes[i] = 0.f;
  float amax = 0.f;
  for (int j = 0; j < length; ++j) amax = fmaxf(amax, history[j]);  // an infinity stays, a NaN drops out
  const float largest = formats[i] == Fp8Format::e4m3 ? 448.f : 57344.f;
  const float ratio = largest / amax;
  if (amax > 0.f && isfinite(amax) && isfinite(ratio)) {
    int exponent = 0;
    frexpf(ratio, &exponent);  // the largest power of two not above the ratio is 2^(exponent - 1)
    const float scale = ldexpf(1.f, exponent - 1 - margin);
    if (scale >= FLT_MIN && isfinite(scale)) scales[i] = scale;  // a normal float, as the host's rule
  }
  inverse_scales[int64_t(i) * kFp8InverseScaleStride] = 1.f / scales[i];  // exact: a power of two
}

// y = fp8(x * s) / s in y's dtype, and the largest |x| folded into *amax: the FP8 rounding of an operand as
// the backends without FP8 GEMMs apply it (and the reference the FP8 GEMMs are tested against).
template <typename T, typename U>
__global__ void fp8_round_trip_kernel(const T* __restrict__ x, int64_t n, Fp8Format format,
                                      const float* __restrict__ scale, U* __restrict__ y,
                                      float* __restrict__ amax) {
  __shared__ float warp_maxima[32];
  const float s = *scale, inverse = 1.f / s;
  float largest = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float v = widen(x[i]);
    largest = fmaxf(largest, fabsf(v));
    const uint8_t bits = to_fp8(v * s, format);
    // Every E4M3 and E5M2 value is a half exactly.
    const float rounded = __half2float(
        __half(__nv_cvt_fp8_to_halfraw(bits, format == Fp8Format::e4m3 ? __NV_E4M3 : __NV_E5M2)));
    y[i] = narrow<U>(rounded * inverse);
  }
  if (!amax) return;
  largest = warp_max(largest);
  if (threadIdx.x % 32 == 0) warp_maxima[threadIdx.x / 32] = largest;
  __syncthreads();
  if (threadIdx.x == 0) {
    float block = 0.f;
    for (int w = 0; w < int(blockDim.x / 32); ++w) block = fmaxf(block, warp_maxima[w]);
    atomicMax(reinterpret_cast<int*>(amax), __float_as_int(block));
  }
}

// sums[c] (=, or += where `accumulate`) the partial sums of column c, in a fixed order: each of a block's
// kSumLanes lanes adds every kSumLanes-th partial row of its column, then the lanes are added in order.
// One thread a column would leave gpt2-large's 1,280 columns 5 blocks, each reading 256 rows one after
// another: a pass bound by memory latency on a few SMs, not by bandwidth.
constexpr int kSumColumns = 32, kSumLanes = 16;

template <typename D>
__global__ void __launch_bounds__(kSumColumns* kSumLanes)
    sum_column_partials_kernel(const float* __restrict__ partials, int64_t partial_rows, int64_t cols,
                               D* __restrict__ sums, bool accumulate) {
  __shared__ float lane_sums[kSumLanes][kSumColumns];
  const int64_t col = int64_t(blockIdx.x) * kSumColumns + threadIdx.x;
  float total = 0.f;
  if (col < cols)
    for (int64_t r = threadIdx.y; r < partial_rows; r += kSumLanes) total += partials[r * cols + col];
  lane_sums[threadIdx.y][threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.y != 0 || col >= cols) return;
  total = lane_sums[0][threadIdx.x];
  for (int lane = 1; lane < kSumLanes; ++lane) total += lane_sums[lane][threadIdx.x];
  if (accumulate) total += widen(sums[col]);
  sums[col] = narrow<D>(total);
}

}  // namespace

void update_fp8_scales(float* amaxes, float* histories, int length, float* scales, float* inverse_scales,
                       const Fp8Format* formats, int count, int margin, cudaStream_t stream) {
  DLB_KERNEL_REQUIRE(count >= 0 && length >= 1, "update_fp8_scales", "no operands or an empty history");
  if (count == 0) return;
  update_fp8_scales_kernel<<<static_cast<unsigned>((count + 255) / 256), 256, 0, stream>>>(
      amaxes, histories, length, scales, inverse_scales, formats, count, margin);
  DLB_KERNEL_LAUNCH_CHECK();
}

void fp8_round_trip(const void* x, DType x_dtype, int64_t n, Fp8Format format, const float* scale, void* y,
                    DType y_dtype, float* amax, cudaStream_t stream) {
  DLB_KERNEL_REQUIRE(n >= 0, "fp8_round_trip", "negative size");
  if (n == 0) return;
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + threads - 1) / threads, 4096));
  auto launch = [&](auto* typed_y) {
    using U = std::remove_pointer_t<decltype(typed_y)>;
    switch (x_dtype) {
      case DType::f32:
        fp8_round_trip_kernel<<<blocks, threads, 0, stream>>>(static_cast<const float*>(x), n, format, scale,
                                                              typed_y, amax);
        break;
      case DType::f16:
        fp8_round_trip_kernel<<<blocks, threads, 0, stream>>>(static_cast<const __half*>(x), n, format, scale,
                                                              typed_y, amax);
        break;
      case DType::bf16:
        fp8_round_trip_kernel<<<blocks, threads, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), n, format,
                                                              scale, typed_y, amax);
        break;
      default:
        DLB_KERNEL_REQUIRE(false, "fp8_round_trip", "x must be f32, f16 or bf16");
    }
  };
  switch (y_dtype) {
    case DType::f32:
      launch(static_cast<float*>(y));
      break;
    case DType::f16:
      launch(static_cast<__half*>(y));
      break;
    case DType::bf16:
      launch(static_cast<__nv_bfloat16*>(y));
      break;
    default:
      DLB_KERNEL_REQUIRE(false, "fp8_round_trip", "y must be f32, f16 or bf16");
  }
  DLB_KERNEL_LAUNCH_CHECK();
}

namespace {

// quantize_fp8's launch for x of element type T, with x's column sums per tile of rows into
// `column_partials` where not null; returns the tiles of rows (the partials' rows).
template <typename T>
int64_t launch_quantize_fp8(const T* x, int64_t rows, int64_t cols, Fp8Format format, const float* scale,
                            uint8_t* q, uint8_t* q_transposed, float* amax, float* column_partials,
                            const Fp8Prologue& prologue, cudaStream_t stream) {
  const T* gelu_input = static_cast<const T*>(prologue.gelu_input);
  DLB_KERNEL_REQUIRE(prologue.kind != Fp8Prologue::Kind::gelu_gradient || gelu_input, "quantize_fp8",
                     "GELU's gradient without its input");
  const auto aligned = [](const void* p, size_t bytes) {
    return !p || reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  if (rows % 4 == 0 && cols % 8 == 0 && aligned(x, 16) && aligned(gelu_input, 16) && aligned(q, 8) &&
      aligned(q_transposed, 4) && (rows + kWideRows - 1) / kWideRows <= 65535) {
    const dim3 grid(static_cast<unsigned>((cols + kWideCols - 1) / kWideCols),
                    static_cast<unsigned>((rows + kWideRows - 1) / kWideRows));
    quantize_fp8_wide_kernel<<<grid, kWideThreads, 0, stream>>>(
        x, rows, cols, format, scale, q, q_transposed, amax, column_partials, prologue.kind, gelu_input);
    DLB_KERNEL_LAUNCH_CHECK();
    return grid.y;
  }
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile),
                  static_cast<unsigned>((rows + kTile - 1) / kTile));
  DLB_KERNEL_REQUIRE(grid.y <= 65535, "quantize_fp8", "more than 2^21 rows");
  quantize_fp8_kernel<<<grid, dim3(kTile, kTileRowsPerPass), 0, stream>>>(
      x, rows, cols, format, scale, q, q_transposed, amax, column_partials, prologue.kind, gelu_input);
  DLB_KERNEL_LAUNCH_CHECK();
  return grid.y;
}

int64_t launch_quantize_fp8(const void* x, DType dtype, int64_t rows, int64_t cols, Fp8Format format,
                            const float* scale, uint8_t* q, uint8_t* q_transposed, float* amax,
                            float* column_partials, const Fp8Prologue& prologue, cudaStream_t stream) {
  DLB_KERNEL_REQUIRE(rows >= 0 && cols >= 0, "quantize_fp8", "negative shape");
  if (rows == 0 || cols == 0) return 0;
  switch (dtype) {
    case DType::f32:
      return launch_quantize_fp8(static_cast<const float*>(x), rows, cols, format, scale, q, q_transposed,
                                 amax, column_partials, prologue, stream);
    case DType::f16:
      return launch_quantize_fp8(static_cast<const __half*>(x), rows, cols, format, scale, q, q_transposed,
                                 amax, column_partials, prologue, stream);
    case DType::bf16:
      return launch_quantize_fp8(static_cast<const __nv_bfloat16*>(x), rows, cols, format, scale, q,
                                 q_transposed, amax, column_partials, prologue, stream);
    default:
      DLB_KERNEL_REQUIRE(false, "quantize_fp8", "x must be f32, f16 or bf16");
  }
  return 0;
}

}  // namespace

void quantize_fp8(const void* x, DType dtype, int64_t rows, int64_t cols, Fp8Format format,
                  const float* scale, uint8_t* q, uint8_t* q_transposed, float* amax, cudaStream_t stream,
                  const Fp8Prologue& prologue) {
  launch_quantize_fp8(x, dtype, rows, cols, format, scale, q, q_transposed, amax, nullptr, prologue, stream);
}

int64_t quantize_fp8_summing_columns(const void* x, DType dtype, int64_t rows, int64_t cols, Fp8Format format,
                                     const float* scale, uint8_t* q, uint8_t* q_transposed, float* amax,
                                     float* column_partials, cudaStream_t stream,
                                     const Fp8Prologue& prologue) {
  DLB_KERNEL_REQUIRE(column_partials != nullptr, "quantize_fp8_summing_columns", "no partials");
  return launch_quantize_fp8(x, dtype, rows, cols, format, scale, q, q_transposed, amax, column_partials,
                             prologue, stream);
}

void sum_column_partials(const float* partials, int64_t partial_rows, int64_t cols, void* sums,
                         DType sums_dtype, bool accumulate, cudaStream_t stream) {
  DLB_KERNEL_REQUIRE(partial_rows >= 0 && cols >= 0, "sum_column_partials", "negative shape");
  if (cols == 0) return;
  const unsigned blocks = static_cast<unsigned>((cols + kSumColumns - 1) / kSumColumns);
  const dim3 threads(kSumColumns, kSumLanes);
  switch (sums_dtype) {
    case DType::f32:
      sum_column_partials_kernel<<<blocks, threads, 0, stream>>>(partials, partial_rows, cols,
                                                                 static_cast<float*>(sums), accumulate);
      break;
    case DType::f16:
      sum_column_partials_kernel<<<blocks, threads, 0, stream>>>(partials, partial_rows, cols,
                                                                 static_cast<__half*>(sums), accumulate);
      break;
    case DType::bf16:
      sum_column_partials_kernel<<<blocks, threads, 0, stream>>>(
          partials, partial_rows, cols, static_cast<__nv_bfloat16*>(sums), accumulate);
      break;
    default:
      DLB_KERNEL_REQUIRE(false, "sum_column_partials", "sums must be f32, f16 or bf16");
  }
  DLB_KERNEL_LAUNCH_CHECK();
}

}  // namespace dlbench::cuda
