// The one check of a batch-norm op's tensors that every backend makes before reading them.
#include "backend/backend.h"
#include "core/status.h"

namespace dlbench {

void check_batchnorm_tensors(const char* op, const BatchNormTensors& t, BatchNormPass pass) {
  DLB_CHECK(t.x && t.gamma, "{}: x and gamma are needed", op);
  switch (pass) {
    case BatchNormPass::training:
      DLB_CHECK(t.beta && t.running_mean && t.running_var && t.saved_mean && t.saved_inv_std,
                "{}: beta, the running statistics and the saved statistics are needed", op);
      break;
    case BatchNormPass::inference:
      DLB_CHECK(t.beta && t.running_mean && t.running_var, "{}: beta and the running statistics are needed",
                op);
      break;
    case BatchNormPass::backward:
      DLB_CHECK(t.saved_mean && t.saved_inv_std && t.dx && t.dgamma && t.dbeta,
                "{}: the saved statistics, dx, dgamma and dbeta are needed", op);
      break;
  }
}

}  // namespace dlbench
