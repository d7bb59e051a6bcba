// NCCL_CHECK: the NCCL member of the check family (backend/cuda/cuda_check.h has the CUDA ones).
#pragma once

#if DLBENCH_WITH_CUDA

#include <nccl.h>

#include "core/status.h"

namespace dlbench::parallel {

[[noreturn]] inline void throw_nccl_failure(const char* file, int line, const char* what,
                                            ncclResult_t status) {
  const char* last = ncclGetLastError(nullptr);
  throw_check_failure(
      file, line, what,
      fmt::format("NCCL error {}: {}{}{}", static_cast<int>(status), ncclGetErrorString(status),
                  last != nullptr && *last != '\0' ? ": " : "", last != nullptr ? last : ""));
}

}  // namespace dlbench::parallel

// NCCL_CHECK(ncclAllReduce(...)): the call must return ncclSuccess, or ncclInProgress (a non-blocking
// communicator still working: see settle() in parallel/nccl_data_plane.h).
#define NCCL_CHECK(expr)                                                                \
  do {                                                                                  \
    const ncclResult_t nccl_status_ = (expr);                                           \
    if (nccl_status_ != ncclSuccess && nccl_status_ != ncclInProgress) {                \
      ::dlbench::parallel::throw_nccl_failure(__FILE__, __LINE__, #expr, nccl_status_); \
    }                                                                                   \
  } while (0)

#endif
