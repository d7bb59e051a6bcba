// What the GPU makers state as a GPU's dense peak rate per number format: the denominator of model FLOP
// utilisation (MFU). Dense, not the 2:4-sparse figures the data sheets print beside them.
#pragma once

#include <optional>
#include <string_view>

#include "train/config.h"

namespace dlbench {

struct StatedPeak {
  double tflops = 0;      // dense TFLOP/s
  std::string_view what;  // "dense BF16 tensor cores", ...
};

// The stated dense peak of the GPU named `gpu_name` (CUDA's device name, e.g. "NVIDIA H200") for
// `precision`'s matrix multiplications (fp16 and bf16: 16-bit tensor cores; tf32: TF32 tensor cores;
// fp32: the FP32 units), or nullopt for a GPU this table does not know or a format it lacks.
std::optional<StatedPeak> stated_dense_peak(std::string_view gpu_name, Precision precision);

}  // namespace dlbench
