#include "backend/cuda/kernel_check.h"

#include <fmt/format.h>

#include "core/status.h"

namespace dlbench::cuda {

void throw_cuda_error(cudaError_t error, const char* expression, const char* file, int line) {
  throw Error(fmt::format("{}:{}: {} failed: {} ({})", file, line, expression, cudaGetErrorName(error),
                          cudaGetErrorString(error)));
}

void throw_kernel_argument_error(const char* op, const char* message, const char* file, int line) {
  throw Error(fmt::format("{}:{}: cuda::{}: {}", file, line, op, message));
}

}  // namespace dlbench::cuda
