// Picks the backend a run asked for.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"

namespace dlbench {

// The most workspace one GPU convolution direction may take unless told otherwise (--conv-workspace-mb).
inline constexpr size_t kDefaultConvWorkspaceLimit = size_t{1} << 30;

// name: "reference" | "onednn" on the CPU, "cuda" on a GPU (builds with CUDA); threads: CPU threads,
// 0 = all cores; allow_tf32: FP32 convolutions and GEMMs of a GPU backend may use TF32 tensor cores;
// conv_workspace_limit: the largest workspace a GPU convolution algorithm may ask for (the timed search
// takes the fastest algorithm within it); priority_stream: a GPU backend's stream gets the device's greatest
// priority (its blocks are scheduled before those of other streams, e.g. the gradient sums').
std::unique_ptr<Backend> make_backend(const std::string& name, Device device, int threads, bool allow_tf32,
                                      size_t conv_workspace_limit = kDefaultConvWorkspaceLimit,
                                      bool priority_stream = false);
// Whether this build has a CUDA backend and the machine a GPU it can use.
bool cuda_backend_available();

}  // namespace dlbench
