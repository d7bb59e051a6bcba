// Checks for the CUDA runtime, cuDNN and cuBLAS: each failure throws dlbench::Error naming the file, the
// line, the call and the library's own error name and message.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "core/status.h"

namespace dlbench::cuda {

[[noreturn]] inline void throw_cuda_failure(const char* file, int line, const char* what,
                                            cudaError_t status) {
  throw_check_failure(file, line, what,
                      fmt::format("CUDA error {} ({}): {}", cudaGetErrorName(status),
                                  static_cast<int>(status), cudaGetErrorString(status)));
}

[[noreturn]] inline void throw_cudnn_failure(const char* file, int line, const char* what,
                                             cudnnStatus_t status) {
  throw_check_failure(
      file, line, what,
      fmt::format("cuDNN error {}: {}", static_cast<int>(status), cudnnGetErrorString(status)));
}

[[noreturn]] inline void throw_cublas_failure(const char* file, int line, const char* what,
                                              cublasStatus_t status) {
  throw_check_failure(
      file, line, what,
      fmt::format("cuBLAS error {}: {}", cublasGetStatusName(status), cublasGetStatusString(status)));
}

}  // namespace dlbench::cuda

// CUDA_CHECK(cudaMalloc(...)): the runtime call must return cudaSuccess. A failed call's error is also
// cleared from the thread's last-error slot (cudaGetLastError), so that the next check does not see it.
#define CUDA_CHECK(expr)                                                            \
  do {                                                                              \
    const cudaError_t cuda_status_ = (expr);                                        \
    if (cuda_status_ != cudaSuccess) {                                              \
      (void)cudaGetLastError();                                                     \
      ::dlbench::cuda::throw_cuda_failure(__FILE__, __LINE__, #expr, cuda_status_); \
    }                                                                               \
  } while (0)

#define CUDNN_CHECK(expr)                                                             \
  do {                                                                                \
    const cudnnStatus_t cudnn_status_ = (expr);                                       \
    if (cudnn_status_ != CUDNN_STATUS_SUCCESS) {                                      \
      ::dlbench::cuda::throw_cudnn_failure(__FILE__, __LINE__, #expr, cudnn_status_); \
    }                                                                                 \
  } while (0)

#define CUBLAS_CHECK(expr)                                                              \
  do {                                                                                  \
    const cublasStatus_t cublas_status_ = (expr);                                       \
    if (cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                      \
      ::dlbench::cuda::throw_cublas_failure(__FILE__, __LINE__, #expr, cublas_status_); \
    }                                                                                   \
  } while (0)
