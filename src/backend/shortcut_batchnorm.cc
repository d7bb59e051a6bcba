// Backend's default for a projection block's shortcut batch norm folded into its closing one: the two
// batch norms composed from the single ops, with bn_s(s) (forward, inference) and the gradient between
// them (backward) in temporary device buffers. The same results as the unfolded layers, bit for bit; no
// saving — a backend with kernels for the folded op overrides these.
#include "backend/backend.h"
#include "core/status.h"

namespace dlbench {
namespace {

// A temporary tensor of `like`'s shape, dtype and layout on the backend's device, freed at scope exit.
class Scratch {
 public:
  Scratch(Backend& backend, const Tensor& like)
      : backend_(backend),
        tensor_(backend.allocate(like.bytes()), like.dims(), like.dtype(), like.layout(), backend.device()) {}
  ~Scratch() { backend_.deallocate(tensor_.data()); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  Tensor& tensor() { return tensor_; }

 private:
  Backend& backend_;
  Tensor tensor_;
};

void check_pair(const char* op, const BatchNormPlan& plan, const BatchNormPlan& shortcut_plan,
                const BatchNormTensors& main, const BatchNormTensors& shortcut) {
  DLB_CHECK(plan.geometry.fusion == BatchNormFusion::add_relu, "{}: the closing batch norm must be add_relu",
            op);
  DLB_CHECK(shortcut_plan.geometry.fusion == BatchNormFusion::none,
            "{}: the shortcut's batch norm must have no fusion", op);
  DLB_CHECK(main.x && shortcut.x && main.gamma && main.beta && shortcut.gamma && shortcut.beta,
            "{}: inputs and parameters of both batch norms are needed", op);
  DLB_CHECK(main.x->dims() == shortcut.x->dims(), "{}: x is {} but the shortcut's input is {}", op,
            main.x->describe(), shortcut.x->describe());
}

}  // namespace

void Backend::batchnorm_shortcut_forward_training(const BatchNormPlan& plan,
                                                  const BatchNormPlan& shortcut_plan,
                                                  const BatchNormTensors& main,
                                                  const BatchNormTensors& shortcut, Tensor& y,
                                                  void* workspace) {
  check_pair("batchnorm_shortcut_forward_training", plan, shortcut_plan, main, shortcut);
  Scratch normalised(*this, *shortcut.x);
  batchnorm_forward_training(shortcut_plan, *shortcut.x, nullptr, *shortcut.gamma, *shortcut.beta,
                             normalised.tensor(), *shortcut.running_mean, *shortcut.running_var,
                             *shortcut.saved_mean, *shortcut.saved_inv_std, workspace);
  batchnorm_forward_training(plan, *main.x, &normalised.tensor(), *main.gamma, *main.beta, y,
                             *main.running_mean, *main.running_var, *main.saved_mean, *main.saved_inv_std,
                             workspace);
}

void Backend::batchnorm_shortcut_forward_inference(const BatchNormPlan& plan,
                                                   const BatchNormPlan& shortcut_plan,
                                                   const BatchNormTensors& main,
                                                   const BatchNormTensors& shortcut, Tensor& y) {
  check_pair("batchnorm_shortcut_forward_inference", plan, shortcut_plan, main, shortcut);
  Scratch normalised(*this, *shortcut.x);
  batchnorm_forward_inference(shortcut_plan, *shortcut.x, nullptr, *shortcut.gamma, *shortcut.beta,
                              *shortcut.running_mean, *shortcut.running_var, normalised.tensor());
  batchnorm_forward_inference(plan, *main.x, &normalised.tensor(), *main.gamma, *main.beta,
                              *main.running_mean, *main.running_var, y);
}

void Backend::batchnorm_shortcut_backward(const BatchNormPlan& plan, const BatchNormPlan& shortcut_plan,
                                          const BatchNormTensors& main, const BatchNormTensors& shortcut,
                                          const Tensor& y, const Tensor& dy, Accumulate accumulate,
                                          void* workspace) {
  check_pair("batchnorm_shortcut_backward", plan, shortcut_plan, main, shortcut);
  DLB_CHECK(main.dx && main.dgamma && main.dbeta && shortcut.dx && shortcut.dgamma && shortcut.dbeta,
            "batchnorm_shortcut_backward: the gradients of both batch norms are needed");
  // The gradient reaching bn_s(s): what the closing batch norm hands its residual.
  Scratch between(*this, *shortcut.x);
  batchnorm_backward(plan, *main.x, y, dy, *main.gamma, *main.saved_mean, *main.saved_inv_std, *main.dx,
                     &between.tensor(), *main.dgamma, *main.dbeta, accumulate, workspace);
  // Fusion none: the shortcut's output is not read (y stands in for it).
  batchnorm_backward(shortcut_plan, *shortcut.x, y, between.tensor(), *shortcut.gamma, *shortcut.saved_mean,
                     *shortcut.saved_inv_std, *shortcut.dx, nullptr, *shortcut.dgamma, *shortcut.dbeta,
                     accumulate, workspace);
}

}  // namespace dlbench
