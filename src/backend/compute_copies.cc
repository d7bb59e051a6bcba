// The one rule every backend checks an optimizer update's ComputeCopies by (backend.h).
#include "backend/backend.h"
#include "core/status.h"

namespace dlbench {

int64_t check_compute_copies(const char* op, const Tensor& params, const Tensor& grads,
                             const ComputeCopies& copies) {
  int64_t count = 0;
  DType dtype = DType::f32;
  for (const Tensor* copy : {static_cast<const Tensor*>(copies.parameters), copies.gradients}) {
    if (!copy) continue;
    DLB_CHECK(copy->rank() == 1 && (copy->dtype() == DType::f16 || copy->dtype() == DType::bf16) &&
                  copy->device() == params.device() && copy->numel() <= params.numel(),
              "{}: a compute copy is {}, expected flat f16 or bf16 of at most params' {} elements on {}", op,
              copy->describe(), params.numel(), params.describe());
    DLB_CHECK(count == 0 || (copy->numel() == count && copy->dtype() == dtype),
              "{}: the compute parameters and gradients differ ({} and {})", op,
              copies.parameters->describe(), copies.gradients->describe());
    count = copy->numel();
    dtype = copy->dtype();
  }
  // The FP32 gradients may be left out only where the compute gradients hold every element's.
  const bool grads_needed = !copies.gradients || copies.gradients->numel() < params.numel();
  DLB_CHECK((grads.numel() == params.numel() && grads.dtype() == params.dtype() &&
             grads.device() == params.device()) ||
                (!grads_needed && grads.numel() == 0),
            "{}: grads is {} for params {}", op, grads.describe(), params.describe());
  return count;
}

}  // namespace dlbench
