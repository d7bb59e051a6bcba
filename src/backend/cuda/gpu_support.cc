// The checks of gpu_support.h: this build's kernels on the GPU, and FP8 tensor cores for an FP8 run.
#include "backend/cuda/gpu_support.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "core/status.h"

#ifndef DLBENCH_CUDA_ARCHITECTURES
#define DLBENCH_CUDA_ARCHITECTURES "?"
#endif

namespace dlbench::cuda {

bool has_fp8_tensor_cores(int major, int minor) { return major > 8 || (major == 8 && minor >= 9); }

std::string kernel_image_mismatch(const std::string& gpu, int major, int minor, const std::string& built_for,
                                  const std::string& cuda_error) {
  return fmt::format(
      "{} (compute capability {}.{}): this dlbench was built for CUDA architectures {} and has no kernels "
      "that run on it ({}); rebuild with cmake -DCMAKE_CUDA_ARCHITECTURES={}{} (or native, on this machine)",
      gpu, major, minor, built_for, cuda_error, major, minor);
}

void require_gpu_support(int device, bool fp8_gemms) {
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return;  // the backend's own calls report a device that does not answer
  }
  const std::string gpu = fmt::format("cuda:{} ({})", device, properties.name);
  // Only the two answers that mean "no code for this GPU"; any other failure is the device's, which the
  // backend's own calls report.
  const cudaError_t image = probe_kernel_image();
  if (image != cudaSuccess) (void)cudaGetLastError();
  if (image == cudaErrorNoKernelImageForDevice || image == cudaErrorInvalidDeviceFunction) {
    throw_user_error("{}", kernel_image_mismatch(gpu, properties.major, properties.minor,
                                                 DLBENCH_CUDA_ARCHITECTURES, cudaGetErrorString(image)));
  }
  DLB_REQUIRE(!fp8_gemms || has_fp8_tensor_cores(properties.major, properties.minor),
              "--precision fp8: {} (compute capability {}.{}) has no FP8 tensor cores, which need compute "
              "capability 8.9 or later (Ada, Hopper, Blackwell); use --precision bf16",
              gpu, properties.major, properties.minor);
}

}  // namespace dlbench::cuda
