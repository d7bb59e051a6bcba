// What a GPU must have for this build of dlbench and for the run asked of it, checked when the CUDA backend
// opens the device: a build for other GPUs would otherwise stop at its first kernel with the runtime's "no
// kernel image is available for execution on the device", and FP8 GEMMs on a GPU without FP8 tensor cores
// at cuBLASLt's refusal, both deep in a run and neither saying what to do.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace dlbench::cuda {

// UserError unless this build's kernels run on `device` (the CUDA architectures it was compiled for,
// CMAKE_CUDA_ARCHITECTURES, cover the GPU's compute capability) and, where the run multiplies in FP8
// (`fp8_gemms`), unless the GPU has FP8 tensor cores.
void require_gpu_support(int device, bool fp8_gemms);

// FP8 tensor cores: compute capability 8.9 (Ada) and later (Hopper 9.0, Blackwell 10.0 and 12.0).
bool has_fp8_tensor_cores(int major, int minor);

// The line for a GPU this build has no kernels for: the GPU, its compute capability, the architectures
// built (`built_for`, CMake's list) and the rebuild that fixes it.
std::string kernel_image_mismatch(const std::string& gpu, int major, int minor, const std::string& built_for,
                                  const std::string& cuda_error);

// cudaFuncGetAttributes of one of this build's kernels on the current device: cudaSuccess where the build
// has code that runs there (gpu_support.cu; nvcc compiles it for every architecture the others are).
cudaError_t probe_kernel_image();

}  // namespace dlbench::cuda
