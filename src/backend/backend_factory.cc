#include "backend/backend_factory.h"

#include "core/status.h"

namespace dlbench {

std::unique_ptr<Backend> make_backend(const std::string& name, Device device, int threads) {
  if (device.kind == DeviceKind::cpu) {
    if (name == "onednn") return make_onednn_backend(threads);
    if (name == "reference") return make_reference_backend();
    throw_user_error("--backend {}: unknown CPU backend; choose onednn or reference", name);
  }
  throw_user_error("--device {}: this dlbench was built without a CUDA backend; use --device cpu",
                   device_name(device));
}

bool cuda_backend_available() { return false; }

}  // namespace dlbench
