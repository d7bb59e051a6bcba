// The CUDA backend: convolutions, batch norm and pooling on cuDNN 9 (legacy API, planned once per shape),
// GEMM on cuBLAS, everything else in dlbench's own kernels (backend/cuda/kernels.h). FP32, FP16 and BF16
// (FP64 where cuDNN and cuBLAS have it), NHWC (the GPU default) and NCHW.
//
// This header needs no CUDA headers: the factory and the run code include it in any build with CUDA on.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "backend/backend.h"
#include "backend/backend_factory.h"
#include "backend/tuning/algorithm_cache.h"

namespace dlbench {

// One stream, one cuDNN and one cuBLAS handle on GPU `device`, running what `options` choose (FP32
// convolutions and GEMMs on TF32 tensor cores only with options.allow_tf32; FP16/BF16 always use tensor
// cores, accumulating in FP32). Its searches' choices go to `algorithms` (null: a cache of its own, in
// memory). Throws UserError when there is no such GPU.
std::unique_ptr<Backend> make_cuda_backend(int device, const CudaOptions& options = {},
                                           std::shared_ptr<tuning::AlgorithmCache> algorithms = nullptr);

// GPUs the CUDA runtime sees; 0 when there is no driver or no GPU. Never throws.
int cuda_device_count();

// The CUDA runtime and driver, cuDNN, cuBLAS and NCCL versions: {"cuda_runtime": "13.0", ...}.
nlohmann::json cuda_software_info();

// "fwd: IMPLICIT_PRECOMP_GEMM (tensor op, 0 B) | bwd_data: ... | bwd_filter: ...": the algorithms the plan
// (a cuda backend's) chose, their math type and workspace.
std::string describe_cuda_conv_plan(const ConvPlan& plan);
// "fused (cuDNN BN_ADD_ACTIVATION)" or "unfused: ...reason...": how a batch-norm plan runs its fusion.
std::string describe_cuda_batchnorm_plan(const BatchNormPlan& plan);

// "fwd: cuDNN engine N | bwd: own kernels (why)": what runs causal attention (Backend::attention_*) of qkv
// [batch, time, 3 * channels] in `dtype` with `heads` heads on `backend` (a cuda backend), cuDNN's fused
// flash attention or dlbench's own kernels; builds and keeps the plans if the shape had none yet.
std::string describe_cuda_attention(Backend& backend, DType dtype, int64_t batch, int64_t time,
                                    int64_t channels, int64_t heads);

// Records what `body` issues on the backend's stream into a CUDA graph (global capture mode: a host
// synchronisation, a blocking copy or an allocation inside `body` fails the capture and throws), then
// launches the graph `replays` times and waits. `backend` must be a cuda backend.
void cuda_capture_and_replay(Backend& backend, const std::function<void()>& body, int replays);

}  // namespace dlbench
