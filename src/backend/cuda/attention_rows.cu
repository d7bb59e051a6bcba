// The row kernels of causal attention in f32 from GEMMs (attention.cc): the softmax of one sequence's
// scores, its backward, and the probabilities made again from the forward's statistics. The scores of a
// sequence are S [heads, T, T] f32, row r = h * T + t the scores of query t against every key; only keys
// 0..t count (causal), and the entries past t are written 0, so that the GEMMs that read P or dS over whole
// rows add nothing for them. One block per row; exp and log in full precision (expf, logf), as the
// reference computes them.
#include <cmath>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace dlbench::cuda {
namespace {

using namespace detail;

constexpr int kRowThreads = 256;

// P = softmax over keys 0..t of the (already scaled) scores, in place; stats = max + log(sum of exp).
__global__ void __launch_bounds__(kRowThreads)
    causal_softmax_kernel(float* __restrict__ scores, float* __restrict__ stats, int time) {
  const int64_t row = blockIdx.x;
  const int keys = static_cast<int>(row % time) + 1;
  float* x = scores + row * time;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < keys; j += kRowThreads) m = fmaxf(m, x[j]);
  m = block_reduce<kRowThreads>(m, Max{});
  float sum = 0;
  for (int j = threadIdx.x; j < keys; j += kRowThreads) sum += expf(x[j] - m);
  sum = block_reduce<kRowThreads>(sum, Add{});
  const float inverse = 1.f / sum;
  for (int j = threadIdx.x; j < time; j += kRowThreads) x[j] = j < keys ? expf(x[j] - m) * inverse : 0.f;
  if (threadIdx.x == 0) stats[row] = m + logf(sum);
}

// P = exp(S - stats) over keys 0..t, 0 past t, in place: the forward's probabilities again.
__global__ void __launch_bounds__(kRowThreads)
    causal_probabilities_kernel(float* __restrict__ scores, const float* __restrict__ stats, int time) {
  const int64_t row = blockIdx.x;
  const int keys = static_cast<int>(row % time) + 1;
  float* x = scores + row * time;
  const float lse = stats[row];
  for (int j = threadIdx.x; j < time; j += kRowThreads) x[j] = j < keys ? expf(x[j] - lse) : 0.f;
}

// dS = P * (dP - D) over keys 0..t, 0 past t, into dp; D = sum over the head's d channels of
// dout * out for query t (the sum of P * dP over the row, without reading it).
__global__ void __launch_bounds__(kRowThreads)
    causal_softmax_backward_kernel(const float* __restrict__ probs, float* __restrict__ dp,
                                   const float* __restrict__ out, const float* __restrict__ dout, int time,
                                   int channels, int head_size) {
  const int64_t row = blockIdx.x;
  const int t = static_cast<int>(row % time), h = static_cast<int>(row / time);
  const int64_t at = int64_t(t) * channels + int64_t(h) * head_size;
  float d = 0;
  for (int c = threadIdx.x; c < head_size; c += kRowThreads) d += dout[at + c] * out[at + c];
  d = block_reduce<kRowThreads>(d, Add{});
  const float* p = probs + row * time;
  float* g = dp + row * time;
  for (int j = threadIdx.x; j < time; j += kRowThreads) g[j] = j <= t ? p[j] * (g[j] - d) : 0.f;
}

}  // namespace

void causal_softmax_rows(float* scores, float* stats, int64_t heads, int64_t time, cudaStream_t stream) {
  DLB_KERNEL_REQUIRE(heads > 0 && time > 0, "causal_softmax_rows", "empty scores");
  causal_softmax_kernel<<<static_cast<unsigned>(heads * time), kRowThreads, 0, stream>>>(
      scores, stats, static_cast<int>(time));
  DLB_KERNEL_LAUNCH_CHECK();
}

void causal_probabilities(float* scores, const float* stats, int64_t heads, int64_t time,
                          cudaStream_t stream) {
  DLB_KERNEL_REQUIRE(heads > 0 && time > 0, "causal_probabilities", "empty scores");
  causal_probabilities_kernel<<<static_cast<unsigned>(heads * time), kRowThreads, 0, stream>>>(
      scores, stats, static_cast<int>(time));
  DLB_KERNEL_LAUNCH_CHECK();
}

void causal_softmax_backward_rows(const float* probs, float* dp, const float* out, const float* dout,
                                  int64_t heads, int64_t time, int64_t channels, cudaStream_t stream) {
  DLB_KERNEL_REQUIRE(heads > 0 && time > 0 && channels % heads == 0, "causal_softmax_backward_rows",
                     "bad shape");
  causal_softmax_backward_kernel<<<static_cast<unsigned>(heads * time), kRowThreads, 0, stream>>>(
      probs, dp, out, dout, static_cast<int>(time), static_cast<int>(channels),
      static_cast<int>(channels / heads));
  DLB_KERNEL_LAUNCH_CHECK();
}

}  // namespace dlbench::cuda
