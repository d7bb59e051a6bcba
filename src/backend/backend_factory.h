// Picks the backend a run asked for.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"

namespace dlbench {

// name: "reference" | "onednn" (| "cuda" once built in); threads: CPU threads, 0 = all cores.
std::unique_ptr<Backend> make_backend(const std::string& name, Device device, int threads);
// Whether this build has a CUDA backend and the machine a GPU it can use.
bool cuda_backend_available();

}  // namespace dlbench
