// What a GPU must have for this build and for an FP8 run (backend/cuda/gpu_support.h): the rule for FP8
// tensor cores and the line for a GPU this build has no kernels for run anywhere; the check itself on the
// GPU the tests run on, which this build must support.
#include "backend/cuda/gpu_support.h"

#include <gtest/gtest.h>

#include "backend/cuda/cuda_backend.h"
#include "core/status.h"

namespace dlbench::cuda {
namespace {

TEST(GpuSupport, Fp8TensorCoresFromAdaOn) {
  for (const auto& [major, minor] : {std::pair{7, 5}, {8, 0}, {8, 6}, {8, 7}})
    EXPECT_FALSE(has_fp8_tensor_cores(major, minor)) << major << "." << minor;
  for (const auto& [major, minor] : {std::pair{8, 9}, {9, 0}, {10, 0}, {12, 0}})
    EXPECT_TRUE(has_fp8_tensor_cores(major, minor)) << major << "." << minor;
}

TEST(GpuSupport, AGpuWithoutKernelsIsNamedWithTheRebuild) {
  const std::string line = kernel_image_mismatch("cuda:0 (NVIDIA A100-SXM4-80GB)", 8, 0, "90",
                                                 "no kernel image is available for execution on the device");
  EXPECT_NE(line.find("cuda:0 (NVIDIA A100-SXM4-80GB) (compute capability 8.0)"), std::string::npos) << line;
  EXPECT_NE(line.find("built for CUDA architectures 90"), std::string::npos) << line;
  EXPECT_NE(line.find("-DCMAKE_CUDA_ARCHITECTURES=80"), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos) << "one line: " << line;
}

TEST(GpuSupport, TheTestsGpuRunsThisBuild) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU: cuda_device_count() == 0";
  cudaDeviceProp properties{};
  ASSERT_EQ(cudaGetDeviceProperties(&properties, 0), cudaSuccess);
  EXPECT_NO_THROW(require_gpu_support(0, /*fp8_gemms=*/false));
  if (has_fp8_tensor_cores(properties.major, properties.minor)) {
    EXPECT_NO_THROW(require_gpu_support(0, /*fp8_gemms=*/true));
  } else {
    EXPECT_THROW(require_gpu_support(0, /*fp8_gemms=*/true), UserError);
  }
}

}  // namespace
}  // namespace dlbench::cuda
