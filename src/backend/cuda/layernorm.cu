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
// The backward is one pass over x and dy for rows of C <= 2048 channels, C a multiple of 4 (every GPT-2):
// a block of 4 warps takes a fixed range of rows, a warp a row at a time. Lane l holds channels
// [4 (32 k + l), +4) of the row's k-th chunk of 128 in registers (x and dy read 4 at a time, 8 or 16 bytes),
// so the row is read once: the warp's two sums, then dx from the registers, written over dx or added to
// it; each lane also keeps its channels' sums of dy * xhat (in registers) and dy (in its warp's row of
// shared memory) over the warp's rows. All of a row's loads are issued before the first is used. (Reading
// the row element by element and a second time from L1 ran at half the speed, and loading it chunk by
// chunk, each chunk used at once, at 30% of the copy rate: bench/results/gpt2-layernorm.)
// dweight and dbias are sums over every row: summing them with atomics would make their last bits depend
// on timing. So the block adds its warps' sums in warp order into its range's partials (the scratch), and
// a second kernel adds the partials of each channel in range order (32 channels x 8 range lanes a block,
// the lanes added in lane order) and writes (or adds to) dweight and dbias. The same bits on every run.
// Other rows (wider, or C not a multiple of 4, or f64) take a dx kernel and a partials kernel of their own
// (two reads of x and dy).
#include <type_traits>

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

// Whether rows of `channels` take the one-pass kernel (their pointers aside: one_pass_aligned).
bool one_pass(int64_t channels) { return channels <= kOnePassMaxChannels && channels % 4 == 0; }

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

// The forward with the row in registers, for rows the one-pass backward takes too (C <= 2048, a multiple
// of 4; see the top): one warp a row, lane l holding channels [4 (32 k + l), +4) of chunk k, read 4 at a
// time; the mean, then the variance around it from the registers, then y.
template <typename T, int kChunks>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    layernorm_forward_chunks_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                    const T* __restrict__ bias, float eps, T* __restrict__ y,
                                    float* __restrict__ mean, float* __restrict__ rstd, int64_t rows,
                                    int64_t C) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  auto channel = [&](int k) -> int64_t { return 4 * (32 * k + lane); };
  float v[kChunks][4];
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    if (channel(k) >= C) continue;
    const Vec<T, 4> xv = load_vec<4>(x + row * C + channel(k));
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
    Vec<T, 4> out;
#pragma unroll
    for (int i = 0; i < 4; ++i) out.v[i] = narrow<T>((v[k][i] - m) * r * widen(wv.v[i]) + widen(bv.v[i]));
    store_vec<4>(y + row * C + channel(k), out);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
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

// The one-pass backward (see the top): block `range` takes rows [range * rows_per_range, +rows_per_range);
// kChunks chunks of 128 channels a row (C <= 128 kChunks; a lane's 4 channels of a chunk are in or out
// together, C being a multiple of 4). Shared memory: (kOnePassWarps + 1) x C floats.
// A row's loads (x, dy, and dx when adding) are all issued before any is used: a lane past C in
// the last chunk reads the row's last 4 channels instead and its values count as zeros, so that no branch
// splits the loads. (Loaded and used chunk by chunk behind a branch each, the loads waited one after another:
// 185 us at [16384, 1280] bf16 on an H100, against 56 for the copy rate: bench/results/gpt2-layernorm.)
template <typename T, int kChunks>
__global__ void __launch_bounds__(kOnePassWarps * 32)
    layernorm_backward_one_pass_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                       const float* __restrict__ mean, const float* __restrict__ rstd,
                                       const T* __restrict__ dy, T* __restrict__ dx, bool add,
                                       float* __restrict__ partials, int64_t rows, int64_t C,
                                       int64_t rows_per_range, int64_t ranges) {
  extern __shared__ float warp_sums[];  // [kOnePassWarps][C], then the weight [C]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t range = blockIdx.x, begin = range * rows_per_range, end = min(rows, begin + rows_per_range);
  auto channel = [&](int k) -> int64_t { return 4 * (32 * k + lane); };    // the first of chunk k's four
  auto loaded = [&](int k) -> int64_t { return min(channel(k), C - 4); };  // in the row for every lane
  // The lane's sums over the warp's rows: dy * xhat in registers, dy in the warp's row of shared memory;
  // the weight in shared memory too (registers for all of them left too few for a row's loads to be in
  // flight together).
  float dweight[kChunks][4];
  float* dbias = warp_sums + warp * C;
  float* weights = warp_sums + kOnePassWarps * C;  // the weight as floats, read by every row
#pragma unroll
  for (int k = 0; k < kChunks; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) dweight[k][i] = 0.f;
  for (int64_t c = lane; c < C; c += 32) dbias[c] = 0.f;
  for (int64_t c = threadIdx.x; c < C; c += kOnePassWarps * 32) weights[c] = widen(weight[c]);
  __syncthreads();
  for (int64_t row = begin + warp; row < end; row += kOnePassWarps) {
    const float m = mean[row], r = rstd[row];
    Vec<T, 4> xv[kChunks], dyv[kChunks], dxv[kChunks] = {};  // dxv: read only when adding
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      xv[k] = load_vec<4>(x + row * C + loaded(k));
      dyv[k] = load_vec<4>(dy + row * C + loaded(k));
    }
    if (add) {
#pragma unroll
      for (int k = 0; k < kChunks; ++k) dxv[k] = load_vec<4>(dx + row * C + loaded(k));
    }
    float xhat[kChunks][4], g[kChunks][4];  // g = dy * weight; zeros past C
    float sum_g = 0.f, sum_gx = 0.f;
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const bool in = channel(k) < C;
      const float4 w = *reinterpret_cast<const float4*>(weights + loaded(k));
      const float wk[4] = {w.x, w.y, w.z, w.w};
      float d[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        d[i] = in ? widen(dyv[k].v[i]) : 0.f;
        xhat[k][i] = in ? (widen(xv[k].v[i]) - m) * r : 0.f;
        g[k][i] = d[i] * wk[i];
        dweight[k][i] += d[i] * xhat[k][i];
        sum_g += g[k][i];
        sum_gx += g[k][i] * xhat[k][i];
      }
      if (in) {
        float4& sums = *reinterpret_cast<float4*>(dbias + channel(k));
        sums = make_float4(sums.x + d[0], sums.y + d[1], sums.z + d[2], sums.w + d[3]);
      }
    }
    const float mean_g = warp_sum(sum_g) / float(C), mean_gx = warp_sum(sum_gx) / float(C);
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      Vec<T, 4> out;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float d = r * (g[k][i] - mean_g - xhat[k][i] * mean_gx);
        out.v[i] = narrow<T>(add ? widen(dxv[k].v[i]) + d : d);
      }
      if (channel(k) < C) store_vec<4>(dx + row * C + channel(k), out);
    }
  }
  // The warps' sums in warp order: dweight's into the first half of the range's partials, dbias's after
  // (in shared memory already, so first).
  for (int half = 1; half >= 0; --half) {
    if (half == 0) {
#pragma unroll
      for (int k = 0; k < kChunks; ++k)
        if (channel(k) < C)
#pragma unroll
          for (int i = 0; i < 4; ++i) warp_sums[warp * C + channel(k) + i] = dweight[k][i];
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < C; c += kOnePassWarps * 32) {
      float sum = warp_sums[c];
      for (int w = 1; w < kOnePassWarps; ++w) sum += warp_sums[w * C + c];
      partials[(half * ranges + range) * C + c] = sum;
    }
    __syncthreads();
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
template <typename T>
__global__ void __launch_bounds__(kParamChannels* kParamRowLanes)
    layernorm_param_sum_kernel(const float* __restrict__ partials, T* __restrict__ dweight,
                               T* __restrict__ dbias, int64_t C, int64_t ranges, bool accumulate) {
  __shared__ float w_lanes[kParamRowLanes][kParamChannels], b_lanes[kParamRowLanes][kParamChannels];
  const int tx = threadIdx.x % kParamChannels, ty = threadIdx.x / kParamChannels;
  const int64_t c = int64_t(blockIdx.x) * kParamChannels + tx;
  float w = 0, b = 0;
  if (c < C) {
    for (int64_t r = ty; r < ranges; r += kParamRowLanes) {
      w += partials[r * C + c];
      b += partials[(ranges + r) * C + c];
    }
  }
  w_lanes[ty][tx] = w;
  b_lanes[ty][tx] = b;
  __syncthreads();
  if (ty != 0 || c >= C) return;
  for (int lane = 1; lane < kParamRowLanes; ++lane) {
    w += w_lanes[lane][tx];
    b += b_lanes[lane][tx];
  }
  if (accumulate) {
    w += widen(dweight[c]);
    b += widen(dbias[c]);
  }
  dweight[c] = narrow<T>(w);
  dbias[c] = narrow<T>(b);
}

// Launches the one-pass backward with the fewest chunks that cover C.
template <typename T>
void launch_one_pass(const T* x, const T* weight, const float* mean, const float* rstd, const T* dy, T* dx,
                     bool add, float* partials, int64_t rows, int64_t C, int64_t rows_per_range,
                     int64_t ranges, cudaStream_t stream) {
  with_chunks(C, [&](auto chunks) {
    const size_t shared = static_cast<size_t>((kOnePassWarps + 1) * C) * sizeof(float);  // <= 40 KiB
    layernorm_backward_one_pass_kernel<T, decltype(chunks)::value>
        <<<static_cast<unsigned>(ranges), kOnePassWarps * 32, shared, stream>>>(
            x, weight, mean, rstd, dy, dx, add, partials, rows, C, rows_per_range, ranges);
    DLB_KERNEL_LAUNCH_CHECK();
  });
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

size_t layernorm_backward_scratch_bytes(int64_t rows, int64_t channels) {
  return static_cast<size_t>(2 * row_ranges(rows, channels) * channels) * sizeof(float);
}

void layernorm_backward(const void* x, const void* weight, const float* mean, const float* rstd,
                        const void* dy, void* dx, void* dweight, void* dbias, int64_t rows, int64_t channels,
                        DType dtype, bool accumulate, bool accumulate_dx, void* scratch,
                        cudaStream_t stream) {
  const char* op = "layernorm_backward";
  require_rows(op, rows, channels);
  const int64_t ranges = row_ranges(rows, channels),
                rows_per_range = ceil_div<int64_t>(std::max<int64_t>(rows, 1), ranges);
  DLB_KERNEL_REQUIRE(ceil_div<int64_t>(channels, kParamChannels) <= int64_t(INT32_MAX), op,
                     "too many channels");
  dispatch_float(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    const T* dyt = static_cast<const T*>(dy);
    float* partials = static_cast<float*>(scratch);
    bool one_pass_taken = false;
    if constexpr (!std::is_same_v<T, double>) {
      if (row_at_once<T>(channels, {x, dy, dx, weight})) {
        launch_one_pass(xt, static_cast<const T*>(weight), mean, rstd, dyt, static_cast<T*>(dx),
                        accumulate_dx, partials, rows, channels, rows_per_range, ranges, stream);
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
        partials, static_cast<T*>(dweight), static_cast<T*>(dbias), channels, ranges, accumulate);
    DLB_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace dlbench::cuda
