// dlbench's own batch-norm training kernels: the entry points of kernels.h (launch sizing for both
// layouts, the checks, the dispatch to batchnorm_nchw.cu or batchnorm_nhwc.cu) and the two finalize
// kernels both layouts share.
//
// Why our own: cuDNN's NCHW batch norm ran 2-5x slower than the bytes it moves (docs/PERFORMANCE.md has the
// numbers). In NHWC, cuDNN's semi-persistent kernels run near the memory's speed but read y in every ReLU
// backward and take longer than their bytes for add + ReLU; these kernels made the whole ResNet-50 step
// 2-6% faster (docs/PERFORMANCE.md). They also have no grid-wide barrier (every pass is independent
// blocks), which was expected to let the gradient exchange overlap backward more cheaply: at two GPUs the
// scaling did not change.
//
// The passes are the minimum without keeping the activation on chip: the forward reads x twice and
// writes y once (plus the residual); the backward reads x and dy twice and writes dx once (add_relu: the
// first pass also reads where the ReLU passed and writes dresidual, which the second reads in dy's place;
// in NHWC "where" is a bit mask the forward wrote, 1/16 of y). A plain ReLU's mask comes from x: the
// backward recomputes y with the forward's coefficients, which each layer holds.
#include "backend/cuda/batchnorm_common.cuh"

namespace dlbench::cuda {
namespace bn {
namespace {

constexpr int kFinalizeThreads = 128;
constexpr int kChannelsPerFinalizeBlock = kFinalizeThreads / 32;

unsigned finalize_blocks(int64_t channels) {
  return static_cast<unsigned>(ceil_div<int64_t>(channels, kChannelsPerFinalizeBlock));
}

// The number of values of range `split` (the last one may be short).
__device__ __forceinline__ double range_count(const ChannelRanges& r, uint32_t split) {
  return double(min(r.chunk, r.values - split * r.chunk));
}

// A channel's batch mean and (biased) variance, written out: the saved statistics, the running ones, and
// the coefficients of the apply pass (ForwardCoefficients).
__device__ __forceinline__ void write_forward_statistics(int64_t c, double mean, double var, double values,
                                                         double epsilon, double momentum, const float* gamma,
                                                         const float* beta, float* running_mean,
                                                         float* running_var, float* saved_mean,
                                                         float* saved_inv_std, float4* coefficients) {
  const double inv_std = 1.0 / sqrt(var + epsilon);
  saved_mean[c] = float(mean);
  saved_inv_std[c] = float(inv_std);
  running_mean[c] = float((1.0 - momentum) * double(running_mean[c]) + momentum * mean);
  // The running variance tracks the unbiased estimate (the contract, as PyTorch).
  running_var[c] = float((1.0 - momentum) * double(running_var[c]) + momentum * var * values / (values - 1));
  coefficients[c] = make_float4(float(double(gamma[c]) * inv_std), beta[c], float(mean), 0.f);
}

// Lane l takes splits l, l + 32, ...; then the lanes merge in a fixed tree.
__global__ void __launch_bounds__(kFinalizeThreads)
    stats_finalize_kernel(const float2* __restrict__ partials, ChannelRanges r, double epsilon,
                          double momentum, const float* __restrict__ gamma, const float* __restrict__ beta,
                          float* __restrict__ running_mean, float* __restrict__ running_var,
                          float* __restrict__ saved_mean, float* __restrict__ saved_inv_std,
                          float4* __restrict__ coefficients) {
  const int64_t c = int64_t(blockIdx.x) * kChannelsPerFinalizeBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (c >= r.channels) return;  // the whole warp leaves: shuffles below see full warps only
  double count = 0, mean = 0, m2 = 0;
  for (uint32_t s = lane; s < r.splits; s += 32) {
    const float2 p = partials[c * r.splits + s];
    chan_merge(count, mean, m2, range_count(r, s), double(p.x), double(p.y));
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const double other_count = __shfl_down_sync(0xffffffffu, count, offset),
                 other_mean = __shfl_down_sync(0xffffffffu, mean, offset),
                 other_m2 = __shfl_down_sync(0xffffffffu, m2, offset);
    chan_merge(count, mean, m2, other_count, other_mean, other_m2);
  }
  if (lane != 0) return;
  write_forward_statistics(c, mean, m2 / double(r.values), double(r.values), epsilon, momentum, gamma, beta,
                           running_mean, running_var, saved_mean, saved_inv_std, coefficients);
}

// The same from a convolution's sums of its output ([2, C]: sums, then sums of squares; one thread per
// channel): var = E[x^2] - E[x]^2 in double, clamped at 0.
__global__ void __launch_bounds__(kFinalizeThreads)
    sums_finalize_kernel(const float* __restrict__ sums, ChannelRanges r, double epsilon, double momentum,
                         const float* __restrict__ gamma, const float* __restrict__ beta,
                         float* __restrict__ running_mean, float* __restrict__ running_var,
                         float* __restrict__ saved_mean, float* __restrict__ saved_inv_std,
                         float4* __restrict__ coefficients) {
  const int64_t c = int64_t(blockIdx.x) * kFinalizeThreads + threadIdx.x;
  if (c >= r.channels) return;
  const double values = double(r.values);
  const double mean = double(sums[c]) / values;
  const double var = fmax(double(sums[r.channels + c]) / values - mean * mean, 0.0);
  write_forward_statistics(c, mean, var, values, epsilon, momentum, gamma, beta, running_mean, running_var,
                           saved_mean, saved_inv_std, coefficients);
}

__global__ void __launch_bounds__(kFinalizeThreads)
    backward_finalize_kernel(const float2* __restrict__ partials, ChannelRanges r,
                             const float* __restrict__ gamma, const float* __restrict__ saved_mean,
                             const float* __restrict__ saved_inv_std, float* __restrict__ dgamma,
                             float* __restrict__ dbeta, bool accumulate, float4* __restrict__ coefficients) {
  const int64_t c = int64_t(blockIdx.x) * kChannelsPerFinalizeBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (c >= r.channels) return;  // the whole warp leaves
  double sum_g = 0, sum_g_xc = 0;
  for (uint32_t s = lane; s < r.splits; s += 32) {
    const float2 p = partials[c * r.splits + s];
    sum_g += double(p.x);
    sum_g_xc += double(p.y);
  }
  sum_g = warp_sum(sum_g);
  sum_g_xc = warp_sum(sum_g_xc);
  if (lane != 0) return;
  const double inv_std = double(saved_inv_std[c]), values = double(r.values);
  const double channel_dgamma = inv_std * sum_g_xc;  // sum g * xhat
  dbeta[c] = float(accumulate ? double(dbeta[c]) + sum_g : sum_g);
  dgamma[c] = float(accumulate ? double(dgamma[c]) + channel_dgamma : channel_dgamma);
  const double k = double(gamma[c]) * inv_std;
  coefficients[c] = make_float4(float(k), float(-k * inv_std * channel_dgamma / values),
                                float(-k * sum_g / values), saved_mean[c]);
}

// One thread per channel.
__global__ void __launch_bounds__(kFinalizeThreads)
    inference_coefficients_kernel(int64_t channels, double epsilon, const float* __restrict__ gamma,
                                  const float* __restrict__ beta, const float* __restrict__ running_mean,
                                  const float* __restrict__ running_var, float4* __restrict__ coefficients) {
  const int64_t c = int64_t(blockIdx.x) * kFinalizeThreads + threadIdx.x;
  if (c >= channels) return;
  const double inv_std = 1.0 / sqrt(double(running_var[c]) + epsilon);
  coefficients[c] = make_float4(float(double(gamma[c]) * inv_std), beta[c], running_mean[c], 0.f);
}

}  // namespace

void launch_stats_finalize(const float2* partials, const float* input_sums, const ChannelRanges& r,
                           const BatchNormGeometry& g, const float* gamma, const float* beta,
                           float* running_mean, float* running_var, float* saved_mean, float* saved_inv_std,
                           float4* coefficients, cudaStream_t stream) {
  if (input_sums) {
    const auto blocks = static_cast<unsigned>((r.channels + kFinalizeThreads - 1) / kFinalizeThreads);
    sums_finalize_kernel<<<blocks, kFinalizeThreads, 0, stream>>>(input_sums, r, g.epsilon, g.momentum, gamma,
                                                                  beta, running_mean, running_var, saved_mean,
                                                                  saved_inv_std, coefficients);
  } else {
    stats_finalize_kernel<<<finalize_blocks(r.channels), kFinalizeThreads, 0, stream>>>(
        partials, r, g.epsilon, g.momentum, gamma, beta, running_mean, running_var, saved_mean, saved_inv_std,
        coefficients);
  }
  DLB_KERNEL_LAUNCH_CHECK();
}

void launch_backward_finalize(const float2* partials, const ChannelRanges& r, const float* gamma,
                              const float* saved_mean, const float* saved_inv_std, float* dgamma,
                              float* dbeta, bool accumulate, float4* coefficients, cudaStream_t stream) {
  backward_finalize_kernel<<<finalize_blocks(r.channels), kFinalizeThreads, 0, stream>>>(
      partials, r, gamma, saved_mean, saved_inv_std, dgamma, dbeta, accumulate, coefficients);
  DLB_KERNEL_LAUNCH_CHECK();
}

void launch_inference_coefficients(const BatchNormGeometry& g, const float* gamma, const float* beta,
                                   const float* running_mean, const float* running_var, float4* coefficients,
                                   cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((g.channels + kFinalizeThreads - 1) / kFinalizeThreads);
  inference_coefficients_kernel<<<blocks, kFinalizeThreads, 0, stream>>>(
      g.channels, g.epsilon, gamma, beta, running_mean, running_var, coefficients);
  DLB_KERNEL_LAUNCH_CHECK();
}

}  // namespace bn

namespace {

constexpr const char* kForward = "own_batchnorm_forward_training";
constexpr const char* kBackward = "own_batchnorm_backward";

void check_launch(const OwnBatchNormLaunch& launch, const char* op) {
  const BatchNormGeometry& g = launch.geometry;
  DLB_KERNEL_REQUIRE(g.layout == Layout::nchw || g.layout == Layout::nhwc, op,
                     "the layout is not NCHW or NHWC");
  DLB_KERNEL_REQUIRE(g.dtype == DType::f32 || g.dtype == DType::f16 || g.dtype == DType::bf16, op,
                     "the dtype is not f32, f16 or bf16");
  DLB_KERNEL_REQUIRE(g.batch * g.h * g.w > 1, op, "training needs more than one value per channel");
  DLB_KERNEL_REQUIRE(launch.splits >= 1 && launch.chunk % bn::kNchwVector == 0 &&
                         launch.splits * launch.chunk >= g.batch * g.h * g.w,
                     op, "the launch was not made by own_batchnorm_launch");
}

}  // namespace

OwnBatchNormLaunch own_batchnorm_launch(const BatchNormGeometry& g) {
  return bn::size_launch(g, detail::multiprocessor_count());
}

size_t own_batchnorm_held_bytes(const OwnBatchNormLaunch& launch) {
  return bn::coefficient_bytes(launch.geometry.channels) + bn::relu_mask_bytes(launch.geometry);
}

size_t own_batchnorm_workspace_bytes(const OwnBatchNormLaunch& launch) {
  // A multiple of 256 bytes: the folded shortcut's workspace follows this one, its float4 coefficients
  // first.
  return align_up(bn::coefficient_bytes(launch.geometry.channels) +
                      static_cast<size_t>(launch.geometry.channels * launch.splits) * sizeof(float2),
                  size_t{256});
}

void own_batchnorm_forward_training(const OwnBatchNormLaunch& launch, const void* x, const void* residual,
                                    const float* gamma, const float* beta, void* y, float* running_mean,
                                    float* running_var, float* saved_mean, float* saved_inv_std,
                                    void* workspace, void* held, cudaStream_t stream,
                                    const float* input_sums) {
  check_launch(launch, kForward);
  DLB_KERNEL_REQUIRE(launch.geometry.fusion != BatchNormFusion::add_relu || residual != nullptr, kForward,
                     "add_relu needs the residual");
  auto run = launch.geometry.layout == Layout::nchw ? bn::nchw_forward_training : bn::nhwc_forward_training;
  run(launch, x, residual, gamma, beta, y, running_mean, running_var, saved_mean, saved_inv_std, workspace,
      static_cast<float4*>(held), stream, input_sums);
}

void own_batchnorm_backward(const OwnBatchNormLaunch& launch, const void* x, const void* y, const void* dy,
                            const float* gamma, const float* saved_mean, const float* saved_inv_std, void* dx,
                            void* dresidual, float* dgamma, float* dbeta, bool accumulate, void* workspace,
                            const void* held, cudaStream_t stream) {
  check_launch(launch, kBackward);
  DLB_KERNEL_REQUIRE(launch.geometry.fusion != BatchNormFusion::add_relu || dresidual != nullptr, kBackward,
                     "add_relu needs dresidual");
  auto run = launch.geometry.layout == Layout::nchw ? bn::nchw_backward : bn::nhwc_backward;
  run(launch, x, y, dy, gamma, saved_mean, saved_inv_std, dx, dresidual, dgamma, dbeta, accumulate, workspace,
      static_cast<const float4*>(held), stream);
}

bool own_batchnorm_shortcut_forward_training(const OwnBatchNormSide& main, const OwnBatchNormSide& shortcut,
                                             void* y, void* workspace, cudaStream_t stream) {
  check_launch(*main.launch, kForward);
  check_launch(*shortcut.launch, kForward);
  if (main.launch->geometry.layout != Layout::nhwc) return false;
  return bn::nhwc_folded_forward_training(main, shortcut, y, workspace, stream);
}

bool own_batchnorm_shortcut_backward(const OwnBatchNormSide& main, const OwnBatchNormSide& shortcut,
                                     const void* dy, bool accumulate, void* workspace, cudaStream_t stream) {
  check_launch(*main.launch, kBackward);
  check_launch(*shortcut.launch, kBackward);
  if (main.launch->geometry.layout != Layout::nhwc) return false;
  return bn::nhwc_folded_backward(main, shortcut, dy, accumulate, workspace, stream);
}

bool own_batchnorm_max_pool_fits(const BatchNormGeometry& g, const MaxPoolShape& pool) {
  return bn::nhwc_pooled_fits(g, pool);
}

bool own_batchnorm_max_pool_forward_training(const OwnBatchNormSide& bn, const MaxPoolShape& pool, void* y,
                                             uint8_t* argmax, void* workspace, cudaStream_t stream) {
  check_launch(*bn.launch, kForward);
  return bn::nhwc_pooled_forward_training(bn, pool, y, argmax, workspace, stream);
}

bool own_batchnorm_max_pool_forward_inference(const BatchNormGeometry& g, const void* x, const float* gamma,
                                              const float* beta, const float* running_mean,
                                              const float* running_var, const MaxPoolShape& pool, void* y,
                                              void* coefficients, cudaStream_t stream) {
  return bn::nhwc_pooled_forward_inference(g, x, gamma, beta, running_mean, running_var, pool, y,
                                           static_cast<float4*>(coefficients), stream);
}

bool own_batchnorm_max_pool_backward(const OwnBatchNormSide& bn, const MaxPoolShape& pool, const void* dy,
                                     const uint8_t* argmax, bool accumulate, void* workspace,
                                     cudaStream_t stream) {
  check_launch(*bn.launch, kBackward);
  return bn::nhwc_pooled_backward(bn, pool, dy, argmax, accumulate, workspace, stream);
}

}  // namespace dlbench::cuda
