// Error checks of dlbench's own CUDA kernels (kernels.cu and its siblings). Kept apart from the CUDA
// backend's cuda_check.h: these macros carry a DLB_KERNEL_ prefix so the two never clash.
//
//   DLB_KERNEL_CHECK(expr)         a CUDA runtime call; throws dlbench::Error (file, line, call, error name)
//                                  unless it returns cudaSuccess. Always on.
//   DLB_KERNEL_LAUNCH_CHECK()      after a kernel launch: cudaGetLastError() checked like the above, in debug
//                                  builds only (#ifndef NDEBUG), so release launches stay free of it.
//   DLB_KERNEL_REQUIRE(cond, op, message)   a host-side argument check of a launcher; always on.
//
// Only cuda_runtime_api.h is included, so nvcc never parses fmt; the throwing lives in kernel_check.cc.
#pragma once

#include <cuda_runtime_api.h>

namespace dlbench::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t error, const char* expression, const char* file, int line);
[[noreturn]] void throw_kernel_argument_error(const char* op, const char* message, const char* file,
                                              int line);

}  // namespace dlbench::cuda

#define DLB_KERNEL_CHECK(expr)                                                         \
  do {                                                                                 \
    const cudaError_t dlb_kernel_error_ = (expr);                                      \
    if (dlb_kernel_error_ != cudaSuccess)                                              \
      ::dlbench::cuda::throw_cuda_error(dlb_kernel_error_, #expr, __FILE__, __LINE__); \
  } while (0)

#ifndef NDEBUG
#define DLB_KERNEL_LAUNCH_CHECK() DLB_KERNEL_CHECK(cudaGetLastError())
#else
#define DLB_KERNEL_LAUNCH_CHECK() \
  do {                            \
  } while (0)
#endif

#define DLB_KERNEL_REQUIRE(cond, op, message)                                                   \
  do {                                                                                          \
    if (!(cond)) ::dlbench::cuda::throw_kernel_argument_error(op, message, __FILE__, __LINE__); \
  } while (0)
