#include "bench/gpu_peaks.h"

#include <array>

namespace dlbench {

namespace {

// NVIDIA's data sheets (SXM parts at their full power unless named), dense TFLOP/s; 0: no such format.
struct GpuPeaks {
  std::string_view name_part;     // matched in order: the first part found in the device name wins
  double fp16, bf16, tf32, fp32;  // tensor cores for the first three, the FP32 units for the last
};
constexpr std::array kPeaks{
    GpuPeaks{"H100 PCIe", 756.5, 756.5, 378.0, 51.2},  // before "H100": the PCIe card is slower
    GpuPeaks{"H100 NVL", 835.5, 835.5, 417.5, 60.0},  GpuPeaks{"H200 NVL", 835.5, 835.5, 417.5, 60.0},
    GpuPeaks{"H200", 989.4, 989.4, 494.7, 66.9},  // H200 SXM and GH200: Hopper at the H100 SXM's rates
    GpuPeaks{"H100", 989.4, 989.4, 494.7, 66.9},      GpuPeaks{"A100", 312.0, 312.0, 156.0, 19.5},
    GpuPeaks{"L40S", 362.1, 362.1, 183.0, 91.6},      GpuPeaks{"V100", 125.0, 0, 0, 15.7},  // no BF16 or TF32
};

}  // namespace

std::optional<StatedPeak> stated_dense_peak(std::string_view gpu_name, Precision precision) {
  for (const GpuPeaks& g : kPeaks) {
    if (gpu_name.find(g.name_part) == std::string_view::npos) continue;
    const auto peak = [](double tflops, std::string_view what) {
      return tflops > 0 ? std::optional<StatedPeak>(StatedPeak{tflops, what}) : std::nullopt;
    };
    switch (precision) {
      case Precision::fp16:
        return peak(g.fp16, "dense FP16 tensor cores");
      case Precision::bf16:
        return peak(g.bf16, "dense BF16 tensor cores");
      case Precision::fp8:  // MFU stays comparable with bf16's: FP8 runs only the dense layers' GEMMs
        return peak(g.bf16, "dense BF16 tensor cores (fp8 counted against BF16's peak)");
      case Precision::tf32:
        return peak(g.tf32, "dense TF32 tensor cores");
      case Precision::fp32:
        return peak(g.fp32, "FP32 units");
    }
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace dlbench
