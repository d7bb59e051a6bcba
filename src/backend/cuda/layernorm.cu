// Layer norm over rows of C features, forward and backward (the semantics of reference_layernorm.cc):
//   mean = sum x / C,  var = sum (x - mean)^2 / C,  rstd = 1 / sqrt(var + eps),  y = xhat * w + b
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dy * w
//   dbias = sum over rows of dy,  dweight = sum over rows of dy * xhat
//
// One warp per row for the forward and for dx: a row of GPT-2 (C = 768..1600) is 24..50 values a lane, so
// the warp's shuffles are the only reductions and no block barrier is needed. The variance is taken around
// the mean in a second pass over the row (served from L1), not as E[x^2] - mean^2, which cancels.
//
// dweight and dbias are sums over every row: summing them with atomics would make their last bits depend on
// timing. They are reduced in two passes instead, as llm.c does: blocks of 32 channels x 8 row lanes sum a
// fixed range of rows each into per-range partials (the scratch), then one thread per channel adds the
// partials in range order and writes (or adds to) dweight and dbias. The same bits on every run.
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace dlbench::cuda {
namespace {

using namespace detail;

constexpr int kRowsPerBlock = 8;  // warps of 32 threads, one row each
constexpr int kParamChannels = 32, kParamRowLanes = 8;
constexpr int64_t kMaxRanges = 128;  // partial sums per channel: enough blocks to fill the GPU

int64_t row_ranges(int64_t rows) { return std::max<int64_t>(1, std::min(rows, kMaxRanges)); }

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

template <typename T>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    layernorm_dx_kernel(const T* __restrict__ x, const T* __restrict__ weight, const float* __restrict__ mean,
                        const float* __restrict__ rstd, const T* __restrict__ dy, T* __restrict__ dx,
                        int64_t rows, int64_t C) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* xr = x + row * C;
  const T* dyr = dy + row * C;
  const float m = mean[row], r = rstd[row];
  float sum_g = 0, sum_gx = 0;
  for (int64_t c = lane; c < C; c += 32) {
    const float g = widen(dyr[c]) * widen(weight[c]);
    sum_g += g;
    sum_gx += g * (widen(xr[c]) - m) * r;
  }
  const float mean_g = warp_sum(sum_g) / float(C), mean_gx = warp_sum(sum_gx) / float(C);
  T* dxr = dx + row * C;
  for (int64_t c = lane; c < C; c += 32) {
    const float g = widen(dyr[c]) * widen(weight[c]);
    const float xhat = (widen(xr[c]) - m) * r;
    dxr[c] = narrow<T>(r * (g - mean_g - xhat * mean_gx));
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

template <typename T>
__global__ void layernorm_param_sum_kernel(const float* __restrict__ partials, T* __restrict__ dweight,
                                           T* __restrict__ dbias, int64_t C, int64_t ranges,
                                           bool accumulate) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float w = 0, b = 0;
  for (int64_t r = 0; r < ranges; ++r) {
    w += partials[r * C + c];
    b += partials[(ranges + r) * C + c];
  }
  if (accumulate) {
    w += widen(dweight[c]);
    b += widen(dbias[c]);
  }
  dweight[c] = narrow<T>(w);
  dbias[c] = narrow<T>(b);
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
    layernorm_forward_kernel<T><<<blocks, kRowsPerBlock * 32, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias), eps,
        static_cast<T*>(y), mean, rstd, rows, channels);
    DLB_KERNEL_LAUNCH_CHECK();
  });
}

size_t layernorm_backward_scratch_bytes(int64_t rows, int64_t channels) {
  return static_cast<size_t>(2 * row_ranges(rows) * channels) * sizeof(float);
}

void layernorm_backward(const void* x, const void* weight, const float* mean, const float* rstd,
                        const void* dy, void* dx, void* dweight, void* dbias, int64_t rows, int64_t channels,
                        DType dtype, bool accumulate, void* scratch, cudaStream_t stream) {
  const char* op = "layernorm_backward";
  require_rows(op, rows, channels);
  const int64_t ranges = row_ranges(rows),
                rows_per_range = ceil_div<int64_t>(std::max<int64_t>(rows, 1), ranges);
  DLB_KERNEL_REQUIRE(ceil_div<int64_t>(channels, kParamChannels) <= int64_t(INT32_MAX), op,
                     "too many channels");
  dispatch_float(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    const T* dyt = static_cast<const T*>(dy);
    if (rows > 0) {
      const unsigned blocks = static_cast<unsigned>(ceil_div<int64_t>(rows, kRowsPerBlock));
      layernorm_dx_kernel<T><<<blocks, kRowsPerBlock * 32, 0, stream>>>(
          xt, static_cast<const T*>(weight), mean, rstd, dyt, static_cast<T*>(dx), rows, channels);
      DLB_KERNEL_LAUNCH_CHECK();
    }
    float* partials = static_cast<float*>(scratch);
    const dim3 grid(static_cast<unsigned>(ceil_div<int64_t>(channels, kParamChannels)),
                    static_cast<unsigned>(ranges));
    layernorm_param_partials_kernel<T><<<grid, kParamChannels * kParamRowLanes, 0, stream>>>(
        xt, mean, rstd, dyt, partials, rows, channels, rows_per_range, ranges);
    DLB_KERNEL_LAUNCH_CHECK();
    const unsigned sum_blocks = static_cast<unsigned>(ceil_div<int64_t>(channels, 256));
    layernorm_param_sum_kernel<T><<<sum_blocks, 256, 0, stream>>>(
        partials, static_cast<T*>(dweight), static_cast<T*>(dbias), channels, ranges, accumulate);
    DLB_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace dlbench::cuda
