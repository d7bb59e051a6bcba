// The GEMM ceiling: the rate the backend's own dense GEMM reaches on a large square product, in the
// dtype and math the model's GEMMs use. A transformer's step is almost all GEMMs (and attention, itself
// GEMMs), so its model FLOPs over this rate say how close the step comes to what this machine and this
// library can do at all, where MFU against the GPU's stated peak also counts the gap between the sheet
// and the silicon (an H200 measured 876 of its stated 989 TFLOP/s in BF16: bench/results/gpu-ceilings/).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/tensor.h"

namespace dlbench {

class Backend;

// What a run measures: M = N = K = 8192 is large enough for the library's best tiles on every GPU of
// today and takes ~1.3 ms a call in BF16 on an H200 (21 ms in FP32 without tensor cores); 10 timed calls.
inline constexpr int64_t kGemmCeilingSize = 8192;
inline constexpr int kGemmCeilingCalls = 10;

struct GemmCeiling {
  double tflops = 0;   // 2 n^3 / the median call's time
  int64_t n = 0;       // M = N = K
  double call_ms = 0;  // the median call
  std::string dtype;   // "bf16", ...
};

// Times `calls` GEMMs of n x n by n x n in `dtype` on `backend` (after two untimed calls), each between
// two of the backend's stream-ordered markers; the median call sets the rate. Allocates three n x n
// matrices for the duration (3 x 128 MiB in bf16 at n = 8192). nullopt, with `why_not` set, where the
// memory cannot be had.
std::optional<GemmCeiling> measure_gemm_ceiling(Backend& backend, DType dtype, int64_t n, int calls,
                                                std::string* why_not = nullptr);

}  // namespace dlbench
