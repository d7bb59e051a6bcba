// One kernel of this build, asked for its attributes: the runtime loads its code for the current device
// or says there is none for it (gpu_support.h).
#include "backend/cuda/gpu_support.h"

namespace dlbench::cuda {
namespace {

__global__ void kernel_image_probe() {}

}  // namespace

cudaError_t probe_kernel_image() {
  cudaFuncAttributes attributes{};
  return cudaFuncGetAttributes(&attributes, kernel_image_probe);
}

}  // namespace dlbench::cuda
