#include "backend/backend_factory.h"

#include "backend/tuning/algorithm_cache.h"
#include "core/status.h"

#ifdef DLBENCH_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace dlbench {

std::unique_ptr<Backend> make_backend(const std::string& name, Device device, int threads,
                                      const CudaOptions& cuda,
                                      std::shared_ptr<tuning::AlgorithmCache> algorithms) {
  if (device.kind == DeviceKind::cpu) {
    if (name == "onednn") return make_onednn_backend(threads);
    if (name == "reference") return make_reference_backend();
    throw_user_error("--backend {}: unknown CPU backend; choose onednn or reference", name);
  }
#ifdef DLBENCH_WITH_CUDA
  if (name == "cuda") return make_cuda_backend(device.index, cuda, std::move(algorithms));
  throw_user_error("--backend {}: unknown GPU backend; choose cuda", name);
#else
  (void)cuda;
  (void)algorithms;
  throw_user_error("--device {}: this dlbench was built without a CUDA backend; use --device cpu",
                   device_name(device));
#endif
}

bool cuda_backend_available() {
#ifdef DLBENCH_WITH_CUDA
  return cuda_device_count() > 0;
#else
  return false;
#endif
}

}  // namespace dlbench
