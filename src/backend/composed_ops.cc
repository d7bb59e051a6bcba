// Backend's defaults for the ops that take two layers' work (and a convolution's output statistics, which
// a backend without kernels for them never makes), composed from the single ops: the same results as the
// separate layers, bit for bit, and no saving — a backend with kernels for an op overrides these.
//   * A projection block's shortcut batch norm folded into its closing one: bn_s(s) (forward, inference)
//     and the gradient between the two (backward) in temporary device buffers.
//   * A batch norm + ReLU and the max pool after it: relu(bn(x)) kept in the op's saved memory (as the two
//     layers keep it), its gradient in a temporary buffer.
//   * A layer norm's backward summing its input's gradient for the dense layer before it: the bias
//     gradient's pass over dx after the layer norm's backward, as the dense layer would run it over dy.
#include "backend/backend.h"
#include "backend/scratch_tensor.h"
#include "core/align.h"
#include "core/status.h"

namespace dlbench {
namespace {

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

// The composed batch norm + max pool's saved memory: relu(bn(x)) first, then the pool's own saved state.
constexpr size_t kSavedAlign = 256;
size_t normalised_bytes(const BatchNormPlan& plan) {
  const BatchNormGeometry& g = plan.geometry;
  const size_t bytes = static_cast<size_t>(g.batch * g.channels * g.h * g.w) * dtype_size(g.dtype);
  return align_up(bytes, kSavedAlign);
}

void check_batchnorm_pool(const char* op, const BatchNormPlan& plan, const PoolPlan& pool_plan,
                          const BatchNormTensors& bn) {
  const BatchNormGeometry& g = plan.geometry;
  const PoolGeometry& p = pool_plan.geometry;
  DLB_CHECK(g.fusion == BatchNormFusion::relu, "{}: the batch norm must have the relu fusion", op);
  DLB_CHECK(p.kind == PoolKind::max, "{}: the pool must be a max pool", op);
  DLB_CHECK(p.batch == g.batch && p.channels == g.channels && p.in_h == g.h && p.in_w == g.w &&
                p.dtype == g.dtype && p.layout == g.layout,
            "{}: the pool's input is not the batch norm's output", op);
  DLB_CHECK(bn.x && bn.gamma && bn.beta, "{}: x and the batch norm's parameters are needed", op);
}

// relu(bn(x)) as the composed op keeps it in its saved memory.
Tensor normalised_in(const Tensor& x, const void* saved) {
  DLB_CHECK(saved != nullptr, "batchnorm_max_pool: no saved memory");
  return Tensor(const_cast<void*>(saved), x.dims(), x.dtype(), x.layout(), x.device());
}

void* pool_saved_in(const BatchNormPlan& plan, const PoolPlan& pool_plan, const void* saved) {
  if (pool_plan.saved_bytes() == 0) return nullptr;
  return static_cast<unsigned char*>(const_cast<void*>(saved)) + normalised_bytes(plan);
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
  ScratchTensor normalised(*this, *shortcut.x);
  batchnorm_forward_training(shortcut_plan, shortcut, nullptr, normalised.tensor(), workspace);
  batchnorm_forward_training(plan, main, &normalised.tensor(), y, workspace);
}

void Backend::batchnorm_shortcut_forward_inference(const BatchNormPlan& plan,
                                                   const BatchNormPlan& shortcut_plan,
                                                   const BatchNormTensors& main,
                                                   const BatchNormTensors& shortcut, Tensor& y) {
  check_pair("batchnorm_shortcut_forward_inference", plan, shortcut_plan, main, shortcut);
  ScratchTensor normalised(*this, *shortcut.x);
  batchnorm_forward_inference(shortcut_plan, shortcut, nullptr, normalised.tensor());
  batchnorm_forward_inference(plan, main, &normalised.tensor(), y);
}

void Backend::batchnorm_shortcut_backward(const BatchNormPlan& plan, const BatchNormPlan& shortcut_plan,
                                          const BatchNormTensors& main, const BatchNormTensors& shortcut,
                                          const Tensor& y, const Tensor& dy, Accumulate accumulate,
                                          void* workspace) {
  check_pair("batchnorm_shortcut_backward", plan, shortcut_plan, main, shortcut);
  // The gradient reaching bn_s(s): what the closing batch norm hands its residual.
  ScratchTensor between(*this, *shortcut.x);
  batchnorm_backward(plan, main, y, dy, &between.tensor(), accumulate, workspace);
  // Fusion none: the shortcut's output is not read (y stands in for it).
  batchnorm_backward(shortcut_plan, shortcut, y, between.tensor(), nullptr, accumulate, workspace);
}

size_t Backend::batchnorm_max_pool_saved_bytes(const BatchNormPlan& plan, const PoolPlan& pool_plan) const {
  return normalised_bytes(plan) + pool_plan.saved_bytes();
}

void Backend::batchnorm_max_pool_forward_training(const BatchNormPlan& plan, const PoolPlan& pool_plan,
                                                  const BatchNormTensors& bn, Tensor& y, void* saved,
                                                  void* workspace) {
  check_batchnorm_pool("batchnorm_max_pool_forward_training", plan, pool_plan, bn);
  Tensor normalised = normalised_in(*bn.x, saved);
  batchnorm_forward_training(plan, bn, nullptr, normalised, workspace);
  pool_forward(pool_plan, normalised, y, pool_saved_in(plan, pool_plan, saved));
}

void Backend::batchnorm_max_pool_forward_inference(const BatchNormPlan& plan, const PoolPlan& pool_plan,
                                                   const BatchNormTensors& bn, Tensor& y, void* saved) {
  check_batchnorm_pool("batchnorm_max_pool_forward_inference", plan, pool_plan, bn);
  Tensor normalised = normalised_in(*bn.x, saved);
  batchnorm_forward_inference(plan, bn, nullptr, normalised);
  pool_forward(pool_plan, normalised, y, pool_saved_in(plan, pool_plan, saved));
}

void Backend::batchnorm_max_pool_backward(const BatchNormPlan& plan, const PoolPlan& pool_plan,
                                          const BatchNormTensors& bn, const Tensor& y, const Tensor& dy,
                                          const void* saved, Accumulate accumulate, void* workspace) {
  check_batchnorm_pool("batchnorm_max_pool_backward", plan, pool_plan, bn);
  const Tensor normalised = normalised_in(*bn.x, saved);
  ScratchTensor gradient(*this, normalised);  // reaching relu(bn(x))
  pool_backward(pool_plan, normalised, y, dy, pool_saved_in(plan, pool_plan, saved), gradient.tensor());
  batchnorm_backward(plan, bn, normalised, gradient.tensor(), nullptr, accumulate, workspace);
}

void Backend::layernorm_backward_summing_dx(const Tensor& x, const Tensor& weight, const Tensor& mean,
                                            const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dweight,
                                            Tensor& dbias, Tensor& dx_sums, Accumulate accumulate,
                                            Accumulate dx_accumulate) {
  layernorm_backward(x, weight, mean, rstd, dy, dx, dweight, dbias, accumulate, dx_accumulate);
  bias_backward(dx.reshaped({dx.numel() / dx.dims().back(), dx.dims().back()}), dx_sums, accumulate);
}

void Backend::layernorm_forward_fp8(const Tensor&, const Tensor&, const Tensor&, float, const float*,
                                    uint8_t*, uint8_t*, float*, Tensor&, Tensor&) {
  DLB_CHECK(false, "layernorm_forward_fp8: this backend runs no FP8 GEMMs, whose operands FP8 codes are");
}

}  // namespace dlbench
