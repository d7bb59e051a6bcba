// The stated dense peaks that MFU is measured against.
#include "bench/gpu_peaks.h"

#include <gtest/gtest.h>

namespace dlbench {
namespace {

TEST(GpuPeaks, KnownGpusPerPrecision) {
  EXPECT_DOUBLE_EQ(stated_dense_peak("NVIDIA H200", Precision::bf16)->tflops, 989.4);
  EXPECT_DOUBLE_EQ(stated_dense_peak("NVIDIA H100 80GB HBM3", Precision::fp16)->tflops, 989.4);
  EXPECT_DOUBLE_EQ(stated_dense_peak("NVIDIA H100 80GB HBM3", Precision::tf32)->tflops, 494.7);
  EXPECT_DOUBLE_EQ(stated_dense_peak("NVIDIA H100 PCIe", Precision::bf16)->tflops, 756.5)
      << "the PCIe card matched as the SXM part";
  EXPECT_DOUBLE_EQ(stated_dense_peak("NVIDIA A100-SXM4-80GB", Precision::fp32)->tflops, 19.5);
  EXPECT_EQ(stated_dense_peak("NVIDIA H200", Precision::bf16)->what, "dense BF16 tensor cores");
}

TEST(GpuPeaks, UnknownGpusAndMissingFormatsHaveNone) {
  EXPECT_FALSE(stated_dense_peak("Tesla V100-SXM2-32GB", Precision::bf16));
  EXPECT_DOUBLE_EQ(stated_dense_peak("Tesla V100-SXM2-32GB", Precision::fp16)->tflops, 125.0);
  EXPECT_FALSE(stated_dense_peak("Some Future GPU", Precision::bf16));
  EXPECT_FALSE(stated_dense_peak("", Precision::fp32));
}

}  // namespace
}  // namespace dlbench
