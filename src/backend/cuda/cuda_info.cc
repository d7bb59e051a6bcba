// The CUDA software stack's versions, for `dlbench info` and every result's system block.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <fmt/format.h>
#include <nccl.h>

#include "backend/cuda/cuda_backend.h"

namespace dlbench {

nlohmann::json cuda_software_info() {
  nlohmann::json j;
  auto cuda_version = [](int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); };
  int version = 0;
  j["cuda_runtime"] = cudaRuntimeGetVersion(&version) == cudaSuccess ? cuda_version(version) : "?";
  j["cuda_driver"] =
      cudaDriverGetVersion(&version) == cudaSuccess && version > 0 ? cuda_version(version) : "none";
  (void)cudaGetLastError();
  const size_t cudnn = cudnnGetVersion();  // 91900 for 9.19.0
  j["cudnn"] = fmt::format("{}.{}.{}", cudnn / 10000, (cudnn % 10000) / 100, cudnn % 100);
  int major = 0, minor = 0, patch = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  j["cublas"] = fmt::format("{}.{}.{}", major, minor, patch);
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess)  // 22809 for 2.28.9
    j["nccl"] = fmt::format("{}.{}.{}", nccl / 10000, (nccl % 10000) / 100, nccl % 100);
  return j;
}

}  // namespace dlbench
