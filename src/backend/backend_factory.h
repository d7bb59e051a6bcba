// Picks the backend a run asked for.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cuda_options.h"

namespace dlbench::tuning {
class AlgorithmCache;  // backend/tuning/algorithm_cache.h
}  // namespace dlbench::tuning

namespace dlbench {

// name: "reference" | "onednn" on the CPU, "cuda" on a GPU (builds with CUDA); threads: CPU threads,
// 0 = all cores; cuda: what a GPU backend runs where it has a choice; algorithms: the launch's algorithm
// cache (backend/tuning/algorithm_cache.h), shared by its backends; null: the backend keeps its own, in
// memory. The CPU backends ignore both.
std::unique_ptr<Backend> make_backend(const std::string& name, Device device, int threads,
                                      const CudaOptions& cuda = {},
                                      std::shared_ptr<tuning::AlgorithmCache> algorithms = nullptr);
// Whether this build has a CUDA backend and the machine a GPU it can use.
bool cuda_backend_available();

}  // namespace dlbench
