// Layer norm over rows of C features, forward and backward (the semantics of reference_layernorm.cc):
//   mean = sum x / C,  var = sum (x - mean)^2 / C,  rstd = 1 / sqrt(var + eps),  y = xhat * w + b
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dy * w
//   dbias = sum over rows of dy,  dweight = sum over rows of dy * xhat
//
// One warp per row for the forward: a row of GPT-2 (C = 768..1600) is 24..50 values a lane, so the warp's
// shuffles are the only reductions and no block barrier is needed. The variance is taken around the mean,
// not as E[x^2] - mean^2, which cancels. Rows of C <= 2048, C a multiple of 4 (every GPT-2), are held in
// registers as the backward below holds them, read once 4 at a time; others are read element by element
// and the second pass served from L1.
//
// In FP8, where a dense layer alone reads y (a transformer's ln_1 and ln_2), the forward may write y's
// E4M3 codes for it instead of y (layernorm_forward_fp8): the codes its own pass would make of y, in both
// layouts, at a fraction of the bytes (x read, 2 codes written per element, against x read, y written,
// y read and 2 codes written).
//
// The backward is one pass over x and dy for rows of C <= 2048 channels, C a multiple of 4 (every GPT-2):
// a block of 4 warps takes a fixed range of rows, a warp a row at a time. Lane l holds channels
// [4 (32 k + l), +4) of the row's k-th chunk of 128 in registers as read (x, dy, and dx when adding; 4 at a
// time, 8 or 16 bytes, two 16-bit values a register), so the row is read once: the warp's two sums, then
// dx, written over dx or added to it. All of a row's loads are issued before the first is used. A lane
// holds the row and little else: xhat and dy * w are computed from the loaded values for the sums and
// again for dx, and its channels' sums of dy and dy * xhat over the warp's rows are in its warp's rows of
// shared memory, with the weight. 96 registers at 10 chunks (C = 1280, bf16, adding), 5 blocks of 4 warps
// an SM. (Kept in registers too, they took 228: 2 blocks an SM, too few warps for the loads to overlap;
// on an H100 at [16384, 1280] 83.8 us, 66.9% of the copy rate, against 77.1 us, 72.7%, now. Reading the
// row element by element and a second time from L1 ran at half the speed, and loading it chunk by chunk,
// each chunk used at once, at 30% of the copy rate: bench/results/gpt2-layernorm.)
//
// Where the layer norm's input x is a dense layer's output (a transformer's residual stream after a
// projection), dx is that layer's output gradient, and the sums over the rows of dx as written are its bias
// gradient: the kernel keeps a third sum of the values it stores (Backend::layernorm_backward_summing_dx),
// and the dense layer's own pass over dy is not run. A third [warps][C] of shared memory (64 KB a block at
// C = 1280, bf16) leaves room for 3 blocks an SM, not 5, so the row ranges are as many as fit on the
// device at once (launch_one_pass): with 512 ranges of 32 rows in 1.3 waves the kernel took 103.7 us at
// [16384, 1280] on an H100, in one wave 79.7 (77.4 without the sums; the bias pass it replaces 20.5); at
// [65536, 1024] 217.8 against 203.7 and 58.5 (bench/results/gpt2-fusions).
//
// dweight and dbias are sums over every row: summing them with atomics would make their last bits depend
// on timing. So the block adds its warps' sums in warp order into its range's partials (the scratch), and
// a second kernel adds the partials of each channel in range order (32 channels x 8 range lanes a block,
// the lanes added in lane order) and writes (or adds to) dweight and dbias. The same bits on every run.
// Other rows (wider, or C not a multiple of 4, or f64) take a dx kernel and a partials kernel of their own
// (two reads of x and dy).
#include <cuda_fp8.h>

#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace dlbench::cuda {
namespace {

using namespace detail;

constexpr int kRowsPerBlock = 8;  // warps of 32 threads, one row each
constexpr int kParamChannels = 32, kParamRowLanes = 8;
constexpr int64_t kMaxRanges = 128;  // the two-kernel path's partial sums per channel

// The one-pass backward: 4 warps a block, up to 16 chunks of 128 channels, ranges of 32 rows (8 a warp),
// at most 1024 of them (GPT-2 small at 16 x 1024 tokens: 512 blocks, ~4 per SM).
constexpr int kOnePassWarps = 4, kChunkChannels = 128;
constexpr int64_t kOnePassMaxChannels = 16 * kChunkChannels, kOnePassRangeRows = 32, kOnePassMaxRanges = 1024;

// Whether rows of `channels` take the one-pass kernel (their pointers aside: row_at_once).
bool one_pass(int64_t channels) { return channels <= kOnePassMaxChannels && channels % 4 == 0; }

// The one-pass backward's shared memory: its warps' sums of dweight and dbias, and of dx where it sums dx
// (floats), then the weight.
template <typename T>
size_t one_pass_shared_bytes(int64_t channels, int sums) {
  return static_cast<size_t>(channels) * (sums * kOnePassWarps * sizeof(float) + sizeof(T));
}

// Whether a block may have that much (over 48 KB only by opting in, up to the device's limit).
template <typename T>
bool one_pass_shared_fits(int64_t channels, int sums) {
  const size_t bytes = one_pass_shared_bytes<T>(channels, sums);
  return bytes <= 48 * 1024 || bytes <= shared_memory_opt_in();
}

int64_t row_ranges(int64_t rows, int64_t channels) {
  if (one_pass(channels))
    return std::clamp<int64_t>(ceil_div<int64_t>(rows, kOnePassRangeRows), 1, kOnePassMaxRanges);
  return std::max<int64_t>(1, std::min(rows, kMaxRanges));
}

template <typename T>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    layernorm_forward_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                             const T* __restrict__ bias, float eps, T* __restrict__ y,
                             float* __restrict__ mean, float* __restrict__ rstd, int64_t rows, int64_t C) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* xr = x + row * C;
  float sum = 0;
  for (int64_t c = lane; c < C; c += 32) sum += widen(xr[c]);
  const float m = warp_sum(sum) / float(C);
  float square_sum = 0;
  for (int64_t c = lane; c < C; c += 32) {
    const float d = widen(xr[c]) - m;
    square_sum += d * d;
  }
  const float r = 1.f / sqrtf(warp_sum(square_sum) / float(C) + eps);
  T* yr = y + row * C;
  for (int64_t c = lane; c < C; c += 32)
    yr[c] = narrow<T>((widen(xr[c]) - m) * r * widen(weight[c]) + widen(bias[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// Calls f(std::integral_constant<int, kChunks>{}) with kChunks the smallest of 1, 2, 4, ..., 16 chunks of
// 128 channels that covers C (an odd count takes the next even one: half the instantiations, the last
// chunk's lanes idle). C <= 16 * 128.
template <int kChunks = 1, typename F>
void with_chunks(int64_t C, F&& f) {
  if constexpr (kChunks < 16) {
    if (C > kChunkChannels * kChunks) {
      with_chunks<kChunks == 1 ? 2 : kChunks + 2>(C, std::forward<F>(f));
      return;
    }
  }
  f(std::integral_constant<int, kChunks>{});
}

// One row normalised by one warp with the row in registers, for rows the one-pass backward takes too
// (C <= 2048, a multiple of 4; see the top): lane l holds channels [4 (32 k + l), +4) of chunk k, read 4
// at a time; the mean, then the variance around it from the registers, then y rounded to T into out[k]
// (chunks past C untouched), and the row's mean and rstd written out. The forward kernels below share it,
// so their y values are the same bits.
template <typename T, int kChunks>
__device__ __forceinline__ void normalize_row(const T* __restrict__ x, const T* __restrict__ weight,
                                              const T* __restrict__ bias, float eps, int64_t row, int64_t C,
                                              int lane, Vec<T, 4> (&out)[kChunks], float* __restrict__ mean,
                                              float* __restrict__ rstd) {
  const T* xr = x + row * C;
  auto channel = [&](int k) -> int64_t { return 4 * (32 * k + lane); };
  float v[kChunks][4];
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    if (channel(k) >= C) continue;
    const Vec<T, 4> xv = load_vec<4>(xr + channel(k));
#pragma unroll
    for (int i = 0; i < 4; ++i) sum += v[k][i] = widen(xv.v[i]);
  }
  const float m = warp_sum(sum) / float(C);
  float square_sum = 0.f;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    if (channel(k) >= C) continue;
#pragma unroll
    for (int i = 0; i < 4; ++i) square_sum += (v[k][i] - m) * (v[k][i] - m);
  }
  const float r = 1.f / sqrtf(warp_sum(square_sum) / float(C) + eps);
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    if (channel(k) >= C) continue;
    const Vec<T, 4> wv = load_vec<4>(weight + channel(k)), bv = load_vec<4>(bias + channel(k));
#pragma unroll
    for (int i = 0; i < 4; ++i) out[k].v[i] = narrow<T>((v[k][i] - m) * r * widen(wv.v[i]) + widen(bv.v[i]));
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// The forward with the row in registers (normalize_row), one warp a row.
template <typename T, int kChunks>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    layernorm_forward_chunks_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                    const T* __restrict__ bias, float eps, T* __restrict__ y,
                                    float* __restrict__ mean, float* __restrict__ rstd, int64_t rows,
                                    int64_t C) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  Vec<T, 4> out[kChunks];
  normalize_row<T, kChunks>(x, weight, bias, eps, row, C, lane, out, mean, rstd);
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int64_t channel = 4 * (32 * k + lane);
    if (channel < C) store_vec<4>(y + row * C + channel, out[k]);
  }
}

// The forward of a layer norm whose output only an FP8 dense layer reads (Backend::layernorm_forward_fp8):
// y as the kernel above makes it, rounded to T, then times *scale rounded to E4M3 as quantize_fp8 rounds
// (fp8_quantize.cu): the codes that pass would make of y, without y written and read back. A block of 8
// warps takes 32 rows, 4 a warp. Each row's codes go to `codes` (4 a lane, one 32-bit word) and into the
// block's tile in shared memory, rows C / 4 + 1 words apart; the tile is then written transposed into
// codes_transposed, each column's 32 rows one 32-byte sector: a thread takes 4 columns by 16 rows, 16 words
// read (the padding puts the two halves' rows in different banks) and regrouped by __byte_perm into four
// 16-byte stores. |y|'s maximum (as rounded to T) is folded into *amax: a block maximum, then one atomicMax
// on the float's bits, as quantize_fp8 does.
constexpr int kFp8TileRows = 32;

__device__ __forceinline__ uint8_t to_e4m3(float v) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

// Byte b of each of four words, as one word (the first word's in the lowest byte).
__device__ __forceinline__ uint32_t gather_byte(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3, int b) {
  const uint32_t select = static_cast<uint32_t>(b | ((b + 4) << 4));
  return __byte_perm(__byte_perm(w0, w1, select), __byte_perm(w2, w3, select), 0x5410);
}

template <typename T, int kChunks>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    layernorm_forward_fp8_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                 const T* __restrict__ bias, float eps, const float* __restrict__ scale,
                                 uint8_t* __restrict__ codes, uint8_t* __restrict__ codes_transposed,
                                 float* __restrict__ amax, float* __restrict__ mean, float* __restrict__ rstd,
                                 int64_t rows, int64_t C, bool wide_stores) {
  extern __shared__ uint32_t tile[];  // [kFp8TileRows][C / 4 + 1] words of codes
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, stride = static_cast<int>(C / 4) + 1;
  const int64_t row0 = int64_t(blockIdx.x) * kFp8TileRows;
  const float s = *scale;
  float largest = 0.f;
  for (int r = warp; r < kFp8TileRows; r += kRowsPerBlock) {
    const int64_t row = row0 + r;
    if (row >= rows) break;
    Vec<T, 4> out[kChunks];
    normalize_row<T, kChunks>(x, weight, bias, eps, row, C, lane, out, mean, rstd);
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int64_t channel = 4 * (32 * k + lane);
      if (channel >= C) continue;
      uint32_t word = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float v = widen(out[k].v[i]);
        largest = fmaxf(largest, fabsf(v));  // fmaxf drops a NaN, as quantize_fp8's amax does
        word |= uint32_t(to_e4m3(v * s)) << (8 * i);
      }
      if (codes) *reinterpret_cast<uint32_t*>(codes + row * C + channel) = word;
      tile[r * stride + channel / 4] = word;
    }
  }
  if (codes_transposed) {
    __syncthreads();
    const int groups = static_cast<int>(C / 4);
    for (int task = threadIdx.x; task < 2 * groups; task += kRowsPerBlock * 32) {
      const int group = task / 2, half = task % 2;
      const int64_t first_row = row0 + 16 * half;  // of the 16 this task writes, a column's
      uint32_t w[16];
#pragma unroll
      for (int j = 0; j < 16; ++j) w[j] = tile[(16 * half + j) * stride + group];
#pragma unroll
      for (int b = 0; b < 4; ++b) {  // column 4 group + b
        uint8_t* column = codes_transposed + (4 * int64_t(group) + b) * rows + first_row;
        const uint4 sixteen =
            make_uint4(gather_byte(w[0], w[1], w[2], w[3], b), gather_byte(w[4], w[5], w[6], w[7], b),
                       gather_byte(w[8], w[9], w[10], w[11], b), gather_byte(w[12], w[13], w[14], w[15], b));
        if (wide_stores && first_row + 16 <= rows) {
          *reinterpret_cast<uint4*>(column) = sixteen;
        } else {
          const uint32_t words[4] = {sixteen.x, sixteen.y, sixteen.z, sixteen.w};
          for (int j = 0; j < 16 && first_row + j < rows; ++j)
            column[j] = static_cast<uint8_t>(words[j / 4] >> (8 * (j % 4)));
        }
      }
    }
  }
  if (amax) {
    __shared__ float warp_maxima[kRowsPerBlock];
    largest = warp_max(largest);
    if (lane == 0) warp_maxima[warp] = largest;
    __syncthreads();
    if (threadIdx.x == 0) {
      float block = 0.f;
      for (int w = 0; w < kRowsPerBlock; ++w) block = fmaxf(block, warp_maxima[w]);
      // Non-negative floats order as their bit patterns do as integers.
      atomicMax(reinterpret_cast<int*>(amax), __float_as_int(block));
    }
  }
}

// One row's dx by one warp, the row read twice (the second time from L1): written over dx, or added to it.
template <typename T>
__device__ __forceinline__ void row_dx(const T* __restrict__ xr, const T* __restrict__ weight,
                                       const T* __restrict__ dyr, T* __restrict__ dxr, float m, float r,
                                       int64_t C, bool add, int lane) {
  float sum_g = 0, sum_gx = 0;
  for (int64_t c = lane; c < C; c += 32) {
    const float g = widen(dyr[c]) * widen(weight[c]);
    sum_g += g;
    sum_gx += g * (widen(xr[c]) - m) * r;
  }
  const float mean_g = warp_sum(sum_g) / float(C), mean_gx = warp_sum(sum_gx) / float(C);
  for (int64_t c = lane; c < C; c += 32) {
    const float g = widen(dyr[c]) * widen(weight[c]);
    const float xhat = (widen(xr[c]) - m) * r;
    const float d = r * (g - mean_g - xhat * mean_gx);
    dxr[c] = narrow<T>(add ? widen(dxr[c]) + d : d);
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    layernorm_dx_kernel(const T* __restrict__ x, const T* __restrict__ weight, const float* __restrict__ mean,
                        const float* __restrict__ rstd, const T* __restrict__ dy, T* __restrict__ dx,
                        int64_t rows, int64_t C, bool add) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  row_dx(x + row * C, weight, dy + row * C, dx + row * C, mean[row], rstd[row], C, add, threadIdx.x % 32);
}

// Four elements of T as 32-bit words (two for a 16-bit T): a row's values are held in these, since nvcc
// gives each 16-bit value a register of its own.
template <typename T>
using Words = Vec<unsigned, sizeof(T)>;

template <typename T>
__device__ __forceinline__ Words<T> load_words(const T* p) {
  return *reinterpret_cast<const Words<T>*>(p);
}

// Element i of four, widened.
template <typename T>
__device__ __forceinline__ float element(const Words<T>& v, int i) {
  if constexpr (sizeof(T) == 4) {
    return __uint_as_float(v.v[i]);
  } else {
    const auto bits = static_cast<unsigned short>(v.v[i / 2] >> (16 * (i % 2)));
    if constexpr (std::is_same_v<T, __half>)
      return widen(__ushort_as_half(bits));
    else
      return widen(__ushort_as_bfloat16(bits));
  }
}

// v's bits xor zero, a 0 the compiler cannot know to be 0: a value it must treat as new, so that it computes
// from it again rather than keep in registers what it computed from v before.
template <typename V>
__device__ __forceinline__ V opaque(V v, unsigned zero) {
  static_assert(sizeof(V) % 4 == 0);
  unsigned words[sizeof(V) / 4];
  memcpy(words, &v, sizeof(V));
#pragma unroll
  for (unsigned& w : words) w ^= zero;
  memcpy(&v, words, sizeof(V));
  return v;
}

// The one-pass backward (see the top): block `range` takes rows [range * rows_per_range, +rows_per_range);
// kChunks chunks of 128 channels a row, the fewest that cover C (a lane's 4 channels of a chunk are in or
// out together, C being a multiple of 4); kAdd: dx is added to. Shared memory: the warps' sums of dweight
// and dbias, 2 x kOnePassWarps x C floats, then the weight, C values of T (over 48 KB from C = 1368 in f32,
// 1448 in 16 bits: opted in).
// A row's loads (x, dy, and dx when adding) are all issued before any is used: a lane past C in
// the last chunk reads the row's last 4 channels instead and its values count as zeros, so that no branch
// splits the loads. (Loaded and used chunk by chunk behind a branch each, the loads waited one after another:
// 185 us at [16384, 1280] bf16 on an H100, against 56 for the copy rate: bench/results/gpt2-layernorm.)
// Each rounding is written out (__fmul_rn, __fmaf_rn, ...: nvcc contracts nothing), so that xhat and dy * w
// computed again for dx are the bits the sums took; for that second use the loaded values pass through
// opaque(), or nvcc keeps the first results in registers.
template <typename T, int kChunks, bool kAdd, bool kSumDx>
__global__ void __launch_bounds__(kOnePassWarps * 32)
    layernorm_backward_one_pass_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                       const float* __restrict__ mean, const float* __restrict__ rstd,
                                       const T* __restrict__ dy, T* __restrict__ dx,
                                       float* __restrict__ partials, int64_t rows, int64_t C,
                                       int64_t rows_per_range, int64_t ranges) {
  // Chunks [0, kWhole) are in the row for every lane: kChunks is the fewest that cover C (launch_one_pass).
  constexpr int kWhole = kChunks <= 2 ? kChunks - 1 : kChunks - 2;
  constexpr int kSums = kSumDx ? 3 : 2;
  // [kSums][kOnePassWarps][C]: dweight's, dbias's (and dx's); then the weight as T [C]
  extern __shared__ float warp_sums[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, width = static_cast<int>(C);
  const int64_t range = blockIdx.x, begin = range * rows_per_range, end = min(rows, begin + rows_per_range);
  auto channel = [&](int k) { return 4 * (32 * k + lane); };  // the first of chunk k's four
  auto in = [&](int k) { return k < kWhole || channel(k) < width; };
  auto loaded = [&](int k) { return k < kWhole ? channel(k) : min(channel(k), width - 4); };  // in the row
  const unsigned zero = static_cast<unsigned>(C >> 32);                                       // C <= 2048
  float* dweight = warp_sums + warp * C;  // the lane's sums over the warp's rows
  float* dbias = warp_sums + (kOnePassWarps + warp) * C;
  float* dx_sum = warp_sums + (2 * kOnePassWarps + warp) * C;  // kSumDx only
  T* weights = reinterpret_cast<T*>(warp_sums + kSums * kOnePassWarps * C);
  for (int c = lane; c < width; c += 32) {
    dweight[c] = dbias[c] = 0.f;
    if constexpr (kSumDx) dx_sum[c] = 0.f;
  }
  for (int c = threadIdx.x; c < width; c += kOnePassWarps * 32) weights[c] = weight[c];
  __syncthreads();
  for (int64_t row = begin + warp; row < end; row += kOnePassWarps) {
    const float m = mean[row], r = rstd[row];
    const T* xr = x + row * C;
    const T* dyr = dy + row * C;
    T* dxr = dx + row * C;
    Words<T> xv[kChunks], dyv[kChunks], dxv[kAdd ? kChunks : 1];
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      xv[k] = load_words(xr + loaded(k));
      dyv[k] = load_words(dyr + loaded(k));
    }
    if constexpr (kAdd) {
#pragma unroll
      for (int k = 0; k < kChunks; ++k) dxv[k] = load_words(dxr + loaded(k));
    }
    // The weight is read from shared memory for each row: row_weights is weights, which nvcc cannot know,
    // or it would hold the whole weight in registers across the rows (and `after` below, likewise).
    const T* row_weights = weights + (zero & static_cast<unsigned>(row));
    float sum_g = 0.f, sum_gx = 0.f;
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const Words<T> w = load_words(row_weights + loaded(k));
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float d = in(k) ? element<T>(dyv[k], i) : 0.f;
        const float xhat = in(k) ? __fmul_rn(__fsub_rn(element<T>(xv[k], i), m), r) : 0.f;
        const float g = __fmul_rn(d, element<T>(w, i));
        sum_g = __fadd_rn(sum_g, g);
        sum_gx = __fmaf_rn(g, xhat, sum_gx);
      }
      if (in(k)) {
        float4& db = *reinterpret_cast<float4*>(dbias + channel(k));
        db = make_float4(db.x + element<T>(dyv[k], 0), db.y + element<T>(dyv[k], 1),
                         db.z + element<T>(dyv[k], 2), db.w + element<T>(dyv[k], 3));
      }
    }
    const float mean_g = warp_sum(sum_g) / float(C), mean_gx = warp_sum(sum_gx) / float(C);
    const unsigned after = zero & __float_as_uint(mean_gx);
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const Words<T> xk = opaque(xv[k], after), dyk = opaque(dyv[k], after),
                     w = load_words(weights + after + loaded(k));
      Vec<T, 4> out;
      float d[4], xhat[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        d[i] = element<T>(dyk, i);
        xhat[i] = __fmul_rn(__fsub_rn(element<T>(xk, i), m), r);
        const float g = __fmul_rn(d[i], element<T>(w, i));
        const float centered = __fmaf_rn(-xhat[i], mean_gx, __fsub_rn(g, mean_g));
        if constexpr (kAdd)
          out.v[i] = narrow<T>(__fmaf_rn(r, centered, element<T>(dxv[k], i)));
        else
          out.v[i] = narrow<T>(__fmul_rn(r, centered));
      }
      if (in(k)) {
        store_vec<4>(dxr + channel(k), out);
        float4& dw = *reinterpret_cast<float4*>(dweight + channel(k));
        dw = make_float4(__fmaf_rn(d[0], xhat[0], dw.x), __fmaf_rn(d[1], xhat[1], dw.y),
                         __fmaf_rn(d[2], xhat[2], dw.z), __fmaf_rn(d[3], xhat[3], dw.w));
        if constexpr (kSumDx) {  // dx as written, rounded to T
          float4& ds = *reinterpret_cast<float4*>(dx_sum + channel(k));
          ds = make_float4(ds.x + widen(out.v[0]), ds.y + widen(out.v[1]), ds.z + widen(out.v[2]),
                           ds.w + widen(out.v[3]));
        }
      }
    }
  }
  // The warps' sums in warp order into the range's partials: dweight's, then dbias's (then dx's).
  __syncthreads();
  for (int part = 0; part < kSums; ++part)
    for (int c = threadIdx.x; c < width; c += kOnePassWarps * 32) {
      const float* sums = warp_sums + part * kOnePassWarps * C + c;
      float sum = sums[0];
      for (int w = 1; w < kOnePassWarps; ++w) sum += sums[w * C];
      partials[(part * ranges + range) * C + c] = sum;
    }
}

// Block (channel tile, row range): partial[range][c] of dy * xhat (first half) and dy (second half).
template <typename T>
__global__ void __launch_bounds__(kParamChannels* kParamRowLanes)
    layernorm_param_partials_kernel(const T* __restrict__ x, const float* __restrict__ mean,
                                    const float* __restrict__ rstd, const T* __restrict__ dy,
                                    float* __restrict__ partials, int64_t rows, int64_t C,
                                    int64_t rows_per_range, int64_t ranges) {
  __shared__ float dweight_lanes[kParamRowLanes][kParamChannels], dbias_lanes[kParamRowLanes][kParamChannels];
  const int tx = threadIdx.x % kParamChannels, ty = threadIdx.x / kParamChannels;
  const int64_t c = int64_t(blockIdx.x) * kParamChannels + tx;
  const int64_t range = blockIdx.y;
  const int64_t begin = range * rows_per_range, end = min(rows, begin + rows_per_range);
  float dweight = 0, dbias = 0;
  if (c < C) {
    for (int64_t row = begin + ty; row < end; row += kParamRowLanes) {
      const float g = widen(dy[row * C + c]);
      dweight += g * (widen(x[row * C + c]) - mean[row]) * rstd[row];
      dbias += g;
    }
  }
  dweight_lanes[ty][tx] = dweight;
  dbias_lanes[ty][tx] = dbias;
  __syncthreads();
  if (ty == 0 && c < C) {
    for (int lane = 1; lane < kParamRowLanes; ++lane) {  // a fixed order
      dweight += dweight_lanes[lane][tx];
      dbias += dbias_lanes[lane][tx];
    }
    partials[range * C + c] = dweight;
    partials[(ranges + range) * C + c] = dbias;
  }
}

// Block (channel tile): dweight and dbias from the ranges' partials, 8 range lanes a channel (lane l takes
// ranges l, l + 8, ... in order), the lanes added in lane order.
// dx_sums (not null where the one-pass kernel summed dx): the third part of the partials, likewise.
template <typename T>
__global__ void __launch_bounds__(kParamChannels* kParamRowLanes)
    layernorm_param_sum_kernel(const float* __restrict__ partials, T* __restrict__ dweight,
                               T* __restrict__ dbias, T* __restrict__ dx_sums, int64_t C, int64_t ranges,
                               bool accumulate) {
  __shared__ float w_lanes[kParamRowLanes][kParamChannels], b_lanes[kParamRowLanes][kParamChannels],
      s_lanes[kParamRowLanes][kParamChannels];
  const int tx = threadIdx.x % kParamChannels, ty = threadIdx.x / kParamChannels;
  const int64_t c = int64_t(blockIdx.x) * kParamChannels + tx;
  float w = 0, b = 0, s = 0;
  if (c < C) {
    for (int64_t r = ty; r < ranges; r += kParamRowLanes) {
      w += partials[r * C + c];
      b += partials[(ranges + r) * C + c];
      if (dx_sums) s += partials[(2 * ranges + r) * C + c];
    }
  }
  w_lanes[ty][tx] = w;
  b_lanes[ty][tx] = b;
  s_lanes[ty][tx] = s;
  __syncthreads();
  if (ty != 0 || c >= C) return;
  for (int lane = 1; lane < kParamRowLanes; ++lane) {
    w += w_lanes[lane][tx];
    b += b_lanes[lane][tx];
    s += s_lanes[lane][tx];
  }
  if (accumulate) {
    w += widen(dweight[c]);
    b += widen(dbias[c]);
    if (dx_sums) s += widen(dx_sums[c]);
  }
  dweight[c] = narrow<T>(w);
  dbias[c] = narrow<T>(b);
  if (dx_sums) dx_sums[c] = narrow<T>(s);
}

// Launches the one-pass backward with the fewest chunks that cover C.
// Resident blocks per multiprocessor of `kernel` with `shared` bytes, asked of the runtime once per kernel
// and size (a launcher runs every step).
template <typename Kernel>
int64_t resident_blocks(Kernel kernel, size_t shared) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, size_t>, int> known;
  const std::lock_guard<std::mutex> lock(mutex);
  const std::pair<const void*, size_t> key{reinterpret_cast<const void*>(kernel), shared};
  if (auto it = known.find(key); it != known.end()) return it->second;
  int blocks = 0;
  DLB_KERNEL_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kOnePassWarps * 32, shared));
  blocks = std::max(blocks, 1);
  known.emplace(key, blocks);
  return blocks;
}

// Launches the one-pass backward and returns how many row ranges it took: at most `max_ranges`
// (row_ranges) and no more than fit on the device at once, so that every block runs in one wave. (With
// the third sum a block takes 64 KB at C = 1280 and 3 fit on an SM: 512 ranges of 32 rows would run in
// 1.3 waves.)
template <typename T>
int64_t launch_one_pass(const T* x, const T* weight, const float* mean, const float* rstd, const T* dy, T* dx,
                        bool add, bool sum_dx, float* partials, int64_t rows, int64_t C, int64_t max_ranges,
                        cudaStream_t stream) {
  int64_t ranges = max_ranges;
  with_chunks(C, [&](auto chunks) {
    const size_t shared = one_pass_shared_bytes<T>(C, sum_dx ? 3 : 2);
    auto launch = [&](auto kernel) {
      if (shared > 48 * 1024)  // Not an operation on the stream: allowed while a step is being recorded.
        DLB_KERNEL_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(shared)));
      const int64_t wave = resident_blocks(kernel, shared) * multiprocessor_count();
      const int64_t rows_per_range =
          ceil_div<int64_t>(std::max<int64_t>(rows, 1), std::min(max_ranges, wave));
      ranges = ceil_div<int64_t>(std::max<int64_t>(rows, 1), rows_per_range);
      kernel<<<static_cast<unsigned>(ranges), kOnePassWarps * 32, shared, stream>>>(
          x, weight, mean, rstd, dy, dx, partials, rows, C, rows_per_range, ranges);
      DLB_KERNEL_LAUNCH_CHECK();
    };
    constexpr int kChunks = decltype(chunks)::value;
    if (add && sum_dx)
      launch(layernorm_backward_one_pass_kernel<T, kChunks, true, true>);
    else if (add)
      launch(layernorm_backward_one_pass_kernel<T, kChunks, true, false>);
    else if (sum_dx)
      launch(layernorm_backward_one_pass_kernel<T, kChunks, false, true>);
    else
      launch(layernorm_backward_one_pass_kernel<T, kChunks, false, false>);
  });
  return ranges;
}

// Whether the row-in-registers kernels take these rows: C (one_pass), the pointers' alignment for their
// 4-element accesses, and a float element type (their registers hold floats).
template <typename T>
bool row_at_once(int64_t C, std::initializer_list<const void*> pointers) {
  if constexpr (std::is_same_v<T, double>) return false;
  if (!one_pass(C)) return false;
  for (const void* p : pointers)
    if (!aligned(p, 4 * sizeof(T))) return false;
  return true;
}

void require_rows(const char* op, int64_t rows, int64_t channels) {
  DLB_KERNEL_REQUIRE(rows >= 0 && channels > 0, op, "rows must not be negative and channels positive");
  DLB_KERNEL_REQUIRE(ceil_div<int64_t>(rows, kRowsPerBlock) <= int64_t(INT32_MAX), op, "too many rows");
}

}  // namespace

void layernorm_forward(const void* x, const void* weight, const void* bias, float eps, void* y, float* mean,
                       float* rstd, int64_t rows, int64_t channels, DType dtype, cudaStream_t stream) {
  const char* op = "layernorm_forward";
  require_rows(op, rows, channels);
  if (rows == 0) return;
  dispatch_float(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    const unsigned blocks = static_cast<unsigned>(ceil_div<int64_t>(rows, kRowsPerBlock));
    if constexpr (!std::is_same_v<T, double>) {
      if (row_at_once<T>(channels, {x, weight, bias, y})) {
        with_chunks(channels, [&](auto chunks) {
          layernorm_forward_chunks_kernel<T, decltype(chunks)::value>
              <<<blocks, kRowsPerBlock * 32, 0, stream>>>(
                  static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias), eps,
                  static_cast<T*>(y), mean, rstd, rows, channels);
          DLB_KERNEL_LAUNCH_CHECK();
        });
        return;
      }
    }
    layernorm_forward_kernel<T><<<blocks, kRowsPerBlock * 32, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias), eps,
        static_cast<T*>(y), mean, rstd, rows, channels);
    DLB_KERNEL_LAUNCH_CHECK();
  });
}

bool layernorm_forward_fp8_takes(int64_t channels, const void* x, const void* weight, const void* bias,
                                 const uint8_t* codes) {
  return one_pass(channels) && aligned(x, 8) && aligned(weight, 8) && aligned(bias, 8) && aligned(codes, 4);
}

void layernorm_forward_fp8(const void* x, const void* weight, const void* bias, float eps, const float* scale,
                           uint8_t* codes, uint8_t* codes_transposed, float* amax, float* mean, float* rstd,
                           int64_t rows, int64_t channels, DType dtype, cudaStream_t stream) {
  const char* op = "layernorm_forward_fp8";
  require_rows(op, rows, channels);
  DLB_KERNEL_REQUIRE(layernorm_forward_fp8_takes(channels, x, weight, bias, codes), op,
                     "rows of at most 2048 channels, a multiple of 4, and 4-element aligned tensors");
  DLB_KERNEL_REQUIRE(dtype == DType::bf16 || dtype == DType::f16, op, "FP8 codes are made of bf16 or f16");
  if (rows == 0) return;
  const size_t shared = static_cast<size_t>(kFp8TileRows * (channels / 4 + 1)) * sizeof(uint32_t);
  const unsigned blocks = static_cast<unsigned>(ceil_div<int64_t>(rows, kFp8TileRows));
  const bool wide_stores = rows % 16 == 0 && aligned(codes_transposed, 16);
  auto launch = [&](auto tag, auto chunks) {
    using T = decltype(tag);
    auto kernel = layernorm_forward_fp8_kernel<T, decltype(chunks)::value>;
    if (shared > 48 * 1024)  // Not an operation on the stream: allowed while a step is being recorded.
      DLB_KERNEL_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(shared)));
    kernel<<<blocks, kRowsPerBlock * 32, shared, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias), eps, scale,
        codes, codes_transposed, amax, mean, rstd, rows, channels, wide_stores);
    DLB_KERNEL_LAUNCH_CHECK();
  };
  with_chunks(channels, [&](auto chunks) {
    if (dtype == DType::bf16)
      launch(__nv_bfloat16{}, chunks);
    else
      launch(__half{}, chunks);
  });
}

size_t layernorm_backward_scratch_bytes(int64_t rows, int64_t channels) {
  // The partials, which the bias gradient's pass over dx reuses once they are summed (the two-kernel rows).
  return std::max(static_cast<size_t>(3 * row_ranges(rows, channels) * channels) * sizeof(float),
                  bias_backward_scratch_bytes(rows, channels, DType::f64));
}

void layernorm_backward(const void* x, const void* weight, const float* mean, const float* rstd,
                        const void* dy, void* dx, void* dweight, void* dbias, void* dx_sums, int64_t rows,
                        int64_t channels, DType dtype, bool accumulate, bool accumulate_dx, void* scratch,
                        cudaStream_t stream) {
  const char* op = "layernorm_backward";
  require_rows(op, rows, channels);
  int64_t ranges = row_ranges(rows, channels);
  const int64_t rows_per_range = ceil_div<int64_t>(std::max<int64_t>(rows, 1), ranges);
  DLB_KERNEL_REQUIRE(ceil_div<int64_t>(channels, kParamChannels) <= int64_t(INT32_MAX), op,
                     "too many channels");
  dispatch_float(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    const T* dyt = static_cast<const T*>(dy);
    float* partials = static_cast<float*>(scratch);
    bool one_pass_taken = false;
    if constexpr (!std::is_same_v<T, double>) {
      if (row_at_once<T>(channels, {x, dy, dx, weight}) &&
          one_pass_shared_fits<T>(channels, dx_sums ? 3 : 2)) {
        ranges = launch_one_pass(xt, static_cast<const T*>(weight), mean, rstd, dyt, static_cast<T*>(dx),
                                 accumulate_dx, dx_sums != nullptr, partials, rows, channels, ranges, stream);
        one_pass_taken = true;
      }
    }
    if (!one_pass_taken) {
      if (rows > 0) {
        const unsigned blocks = static_cast<unsigned>(ceil_div<int64_t>(rows, kRowsPerBlock));
        layernorm_dx_kernel<T>
            <<<blocks, kRowsPerBlock * 32, 0, stream>>>(xt, static_cast<const T*>(weight), mean, rstd, dyt,
                                                        static_cast<T*>(dx), rows, channels, accumulate_dx);
        DLB_KERNEL_LAUNCH_CHECK();
      }
      const dim3 grid(static_cast<unsigned>(ceil_div<int64_t>(channels, kParamChannels)),
                      static_cast<unsigned>(ranges));
      layernorm_param_partials_kernel<T><<<grid, kParamChannels * kParamRowLanes, 0, stream>>>(
          xt, mean, rstd, dyt, partials, rows, channels, rows_per_range, ranges);
      DLB_KERNEL_LAUNCH_CHECK();
    }
    const unsigned sum_blocks = static_cast<unsigned>(ceil_div<int64_t>(channels, kParamChannels));
    layernorm_param_sum_kernel<T><<<sum_blocks, kParamChannels * kParamRowLanes, 0, stream>>>(
        partials, static_cast<T*>(dweight), static_cast<T*>(dbias),
        one_pass_taken ? static_cast<T*>(dx_sums) : nullptr, channels, ranges, accumulate);
    DLB_KERNEL_LAUNCH_CHECK();
    // Rows the one-pass kernel does not take: dx's sums by the bias gradient's own pass over it.
    if (dx_sums && !one_pass_taken)
      bias_backward(dx, dtype, dx_sums, dtype, rows, channels, accumulate, scratch, stream);
  });
}

}  // namespace dlbench::cuda
