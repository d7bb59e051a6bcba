// Picks the backend a run asked for.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"

namespace dlbench {

// name: "reference" | "onednn" on the CPU, "cuda" on a GPU (builds with CUDA); threads: CPU threads,
// 0 = all cores; allow_tf32: FP32 convolutions and GEMMs of a GPU backend may use TF32 tensor cores.
std::unique_ptr<Backend> make_backend(const std::string& name, Device device, int threads, bool allow_tf32);
// Whether this build has a CUDA backend and the machine a GPU it can use.
bool cuda_backend_available();

}  // namespace dlbench
