// Backend's defaults for the ops that take two layers' work (and a convolution's output statistics, which
// a backend without kernels for them never makes). A projection block's shortcut batch norm folded into its
// closing one: the two batch norms composed from the single ops, with bn_s(s) (forward, inference) and the
// gradient between them (backward) in temporary device buffers. The same results as the unfolded layers, bit
// for bit; no saving — a backend with kernels for the folded op overrides these.
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

// One side's training forward, from its input's sums where it has them.
void forward_training(Backend& backend, const BatchNormPlan& plan, const BatchNormTensors& t,
                      const Tensor* residual, Tensor& y, void* workspace) {
  if (t.input_sums) {
    backend.batchnorm_forward_training_from_sums(plan, *t.x, residual, *t.gamma, *t.beta, y, *t.running_mean,
                                                 *t.running_var, *t.saved_mean, *t.saved_inv_std,
                                                 *t.input_sums, workspace);
  } else {
    backend.batchnorm_forward_training(plan, *t.x, residual, *t.gamma, *t.beta, y, *t.running_mean,
                                       *t.running_var, *t.saved_mean, *t.saved_inv_std, workspace);
  }
}

}  // namespace

void Backend::conv_forward_with_statistics(const ConvPlan&, const Tensor&, const Tensor&, Tensor&, Tensor&,
                                           void*) {
  DLB_CHECK(false, "conv_forward_with_statistics: this backend does not sum a convolution's output");
}

void Backend::batchnorm_shortcut_forward_training(const BatchNormPlan& plan,
                                                  const BatchNormPlan& shortcut_plan,
                                                  const BatchNormTensors& main,
                                                  const BatchNormTensors& shortcut, Tensor& y,
                                                  void* workspace) {
  check_pair("batchnorm_shortcut_forward_training", plan, shortcut_plan, main, shortcut);
  Scratch normalised(*this, *shortcut.x);
  forward_training(*this, shortcut_plan, shortcut, nullptr, normalised.tensor(), workspace);
  forward_training(*this, plan, main, &normalised.tensor(), y, workspace);
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
