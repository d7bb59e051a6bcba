// Batch normalisation on the CUDA backend: training on dlbench's own kernels (batchnorm_own.cu,
// batchnorm_nhwc.cu, batchnorm_nchw.cu) in FP32/TF32/FP16/BF16, inference on cuDNN
// (cudnnBatchNormalizationForwardInference), FP64 training on cuDNN's plain spatial batch norm followed by
// our add and ReLU kernels (FP64 is the tests' precision; no run trains in it).
//
// The own kernels replaced cuDNN's training batch norm in every precision and layout (bench/results/
// batch-norm-kernels): a plan trains on them with no cuDNN workspace; its reserve holds the forward's
// per-channel coefficients for the backward. A projection block's shortcut batch norm folds into its
// closing one (batchnorm_shortcut_*) where both train on the own NHWC kernels with channels in whole
// 16-byte vectors (--bn-fold-shortcut off declines): the folded kernels store neither bn_s(s) nor the
// gradient between the two. Inference blends bn(x) onto bn_s(s) in y on cuDNN.
//
// FP64 training: the unfused path. The backward's ReLU passes the gradient where it passed the value: our
// ReLU-backward kernel masks dy with y first (into dresidual for add_relu, which is exactly that gradient,
// or into the workspace for relu). cuDNN's training forward leaves state in its reserve that the backward
// of the same layer reads; the interface's workspace is shared by all layers, so each plan owns its reserve
// (held_bytes()), allocated at plan time; only cuDNN's workspace proper (and the masked-dy buffer of the
// relu path) is part of workspace_bytes().
//
// cuDNN's conventions match the contract: exponentialAverageFactor is the momentum (running = (1 - m) *
// running + m * batch), the running variance is the unbiased one (x M / (M - 1)), resultSaveInvVariance
// is 1 / sqrt(var + eps). Accumulating dgamma/dbeta is cuDNN's betaParamDiff = 1.
#include <algorithm>
#include <array>
#include <string>

#include "backend/cuda/batchnorm_launch.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/kernels.h"

namespace dlbench {
namespace cuda {
namespace {

class CudaBatchNormPlan final : public BatchNormPlan {
 public:
  explicit CudaBatchNormPlan(const BatchNormGeometry& g) : BatchNormPlan(g) {}
  size_t workspace_bytes() const override { return total_workspace; }
  size_t held_bytes() const override { return reserve_bytes; }

  TensorDescriptor x_desc, param_desc;
  std::string path;  // how the plan runs, for describe_cuda_batchnorm_plan
  size_t forward_workspace = 0, backward_workspace = 0;
  size_t cudnn_workspace_offset = 0, masked_dy_offset = 0, total_workspace = 0;
  DeviceBuffer reserve;
  size_t reserve_bytes = 0;  // what the plan holds (an estimate plan holds no reserve but states its size)
  DType param_dtype = DType::f32;
  bool own = false;  // training runs dlbench's own kernels (every dtype but FP64)
  OwnBatchNormLaunch own_launch;
};

const CudaBatchNormPlan& as_cuda_plan(const BatchNormPlan& plan) {
  auto* p = dynamic_cast<const CudaBatchNormPlan*>(&plan);
  DLB_CHECK(p != nullptr, "batch-norm plan was not made by the cuda backend");
  return *p;
}

std::vector<int64_t> activation_dims(const BatchNormGeometry& g) { return {g.batch, g.channels, g.h, g.w}; }
size_t activation_bytes(const BatchNormGeometry& g) {
  return static_cast<size_t>(g.batch * g.channels * g.h * g.w) * dtype_size(g.dtype);
}

void check_geometry(const BatchNormGeometry& g) {
  DLB_CHECK(g.batch > 0 && g.channels > 0 && g.h > 0 && g.w > 0,
            "batchnorm: sizes must be positive ({}x{}x{}x{})", g.batch, g.channels, g.h, g.w);
  DLB_CHECK(g.epsilon >= CUDNN_BN_MIN_EPSILON && g.epsilon > 0, "batchnorm: epsilon {} is too small",
            g.epsilon);
  DLB_CHECK(is_float_dtype(g.dtype), "batchnorm: dtype {} is not a float dtype", dtype_name(g.dtype));
}

struct Sizes {
  size_t forward = 0, backward = 0, reserve = 0;
};

// cuDNN's workspace and reserve sizes for its plain spatial batch norm (the FP64 training path).
Sizes query_sizes(cudnnHandle_t handle, const CudaBatchNormPlan& p) {
  Sizes s;
  constexpr cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL;
  constexpr cudnnBatchNormOps_t ops = CUDNN_BATCHNORM_OPS_BN;
  CUDNN_CHECK(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
      handle, mode, ops, p.x_desc, nullptr, p.x_desc, p.param_desc, nullptr, &s.forward));
  CUDNN_CHECK(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
      handle, mode, ops, p.x_desc, nullptr, p.x_desc, nullptr, p.x_desc, p.param_desc, nullptr, &s.backward));
  CUDNN_CHECK(
      cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, mode, ops, nullptr, p.x_desc, &s.reserve));
  return s;
}

// A parameter or statistics tensor's data (f32 on the own kernels' path: check_param saw to it).
float* f32(const Tensor& t) { return static_cast<float*>(t.data()); }

void check_param(const char* op, const char* name, const CudaBatchNormPlan& p, const Tensor& t) {
  check_device_tensor(op, name, t);
  DLB_CHECK(t.numel() == p.geometry.channels && t.dtype() == p.param_dtype, "{}: {} is {}, expected {}[{}]",
            op, name, t.describe(), dtype_name(p.param_dtype), p.geometry.channels);
}

void check_residual(const char* op, const char* name, const BatchNormGeometry& g, const Tensor* t) {
  if (g.fusion == BatchNormFusion::add_relu) {
    DLB_CHECK(t != nullptr, "{}: fusion add_relu needs {}", op, name);
    check_activation(op, name, *t, activation_dims(g), g.dtype, g.layout);
  } else {
    DLB_CHECK(t == nullptr, "{}: {} is given but the fusion has no residual add", op, name);
  }
}

const char* fusion_name(BatchNormFusion fusion) {
  switch (fusion) {
    case BatchNormFusion::none:
      return "none";
    case BatchNormFusion::relu:
      return "relu";
    case BatchNormFusion::add_relu:
      return "add_relu";
  }
  return "?";
}

}  // namespace

namespace {

// A plan's path and sizes, without the reserve (a run plan and an estimate agree: nothing is tried).
void choose_path(const CudaBackend& backend, CudaBatchNormPlan& p) {
  const BatchNormGeometry& g = p.geometry;
  if (p.own) {
    // Training holds the forward's coefficients for the backward (in the reserve); inference needs no
    // workspace.
    p.path =
        fmt::format("own {} kernels ({})", g.layout == Layout::nchw ? "NCHW" : "NHWC", fusion_name(g.fusion));
    WorkspaceLayout layout;
    layout.reserve(own_batchnorm_workspace_bytes(p.own_launch));
    p.total_workspace = layout.total();
    p.reserve_bytes = own_batchnorm_held_bytes(p.own_launch);
    return;
  }
  p.path = g.fusion == BatchNormFusion::none ? "cuDNN BN" : "cuDNN BN + our kernels";
  const Sizes sizes = query_sizes(backend.cudnn(), p);
  p.forward_workspace = sizes.forward;
  p.backward_workspace = sizes.backward;
  p.reserve_bytes = sizes.reserve;
  WorkspaceLayout layout;
  p.cudnn_workspace_offset = layout.reserve(std::max(sizes.forward, sizes.backward));
  // The relu path masks dy into the workspace.
  if (g.fusion == BatchNormFusion::relu) p.masked_dy_offset = layout.reserve(activation_bytes(g));
  p.total_workspace = layout.total();
}

std::unique_ptr<CudaBatchNormPlan> new_plan(const CudaBackend& backend, const BatchNormGeometry& g) {
  check_geometry(g);
  backend.activate();
  auto plan = std::make_unique<CudaBatchNormPlan>(g);
  CudaBatchNormPlan& p = *plan;
  p.param_dtype = g.dtype == DType::f64 ? DType::f64 : DType::f32;
  set_tensor_4d(p.x_desc, g.dtype, g.layout, g.batch, g.channels, g.h, g.w);
  CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(p.param_desc, p.x_desc, CUDNN_BATCHNORM_SPATIAL));
  // The descriptors above serve inference, which stays on cuDNN, and FP64 training.
  p.own = g.dtype != DType::f64;
  if (p.own) p.own_launch = own_batchnorm_launch(g);  // sized for the device activate() made current
  return plan;
}

}  // namespace

std::unique_ptr<BatchNormPlan> CudaBackend::plan_batchnorm(const BatchNormGeometry& g) {
  auto plan = new_plan(*this, g);
  choose_path(*this, *plan);
  plan->reserve = DeviceBuffer(plan->reserve_bytes);
  return plan;
}

std::unique_ptr<BatchNormPlan> CudaBackend::estimate_batchnorm(const BatchNormGeometry& g) {
  auto plan = new_plan(*this, g);
  choose_path(*this, *plan);
  return plan;
}

namespace {

void check_forward_training(const char* op, const CudaBatchNormPlan& p, const Tensor& x,
                            const Tensor* residual, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                            const Tensor& running_mean, const Tensor& running_var, const Tensor& saved_mean,
                            const Tensor& saved_inv_std, const void* workspace) {
  const BatchNormGeometry& g = p.geometry;
  DLB_CHECK(g.batch * g.h * g.w > 1, "{}: training needs more than one value per channel, x is {}", op,
            x.describe());
  check_activation(op, "x", x, activation_dims(g), g.dtype, g.layout);
  check_activation(op, "y", y, activation_dims(g), g.dtype, g.layout);
  check_residual(op, "residual", g, residual);
  check_param(op, "gamma", p, gamma);
  check_param(op, "beta", p, beta);
  check_param(op, "running_mean", p, running_mean);
  check_param(op, "running_var", p, running_var);
  check_param(op, "saved_mean", p, saved_mean);
  check_param(op, "saved_inv_std", p, saved_inv_std);
  DLB_CHECK(p.total_workspace == 0 || workspace != nullptr, "{}: the plan needs a workspace of {} bytes", op,
            p.total_workspace);
}

// x's sums ([2, C] FP32 on the device), as conv_forward_with_statistics writes them.
void check_input_sums(const char* op, const BatchNormGeometry& g, const Tensor& sums) {
  check_device_tensor(op, "input_sums", sums);
  DLB_CHECK(sums.dtype() == DType::f32 && sums.numel() == 2 * g.channels,
            "{}: input_sums must hold 2 x {} FP32 values, got {}", op, g.channels, sums.describe());
}

}  // namespace

void CudaBackend::batchnorm_forward_training(const BatchNormPlan& plan, const BatchNormTensors& bn,
                                             const Tensor* residual, Tensor& y, void* workspace) {
  const char* op = "batchnorm_forward_training";
  check_batchnorm_tensors(op, bn, BatchNormPass::training);
  const Tensor &x = *bn.x, &gamma = *bn.gamma, &beta = *bn.beta;
  Tensor &running_mean = *bn.running_mean, &running_var = *bn.running_var;
  Tensor &saved_mean = *bn.saved_mean, &saved_inv_std = *bn.saved_inv_std;
  const auto& p = as_cuda_plan(plan);
  const BatchNormGeometry& g = p.geometry;
  check_forward_training(op, p, x, residual, gamma, beta, y, running_mean, running_var, saved_mean,
                         saved_inv_std, workspace);
  activate();
  if (p.own) {
    // The statistics from the convolution's sums where it made them.
    if (bn.input_sums) check_input_sums(op, g, *bn.input_sums);
    own_batchnorm_forward_training(p.own_launch, x.data(), residual ? residual->data() : nullptr, f32(gamma),
                                   f32(beta), y.data(), f32(running_mean), f32(running_var), f32(saved_mean),
                                   f32(saved_inv_std), workspace, p.reserve.get(), stream_,
                                   bn.input_sums ? f32(*bn.input_sums) : nullptr);
    return;
  }
  // cuDNN's FP64 kernels make their own statistics (input_sums unread).
  const Scaling s(g.dtype, 1.0, 0.0);
  void* ws = p.forward_workspace ? at_offset(workspace, p.cudnn_workspace_offset) : nullptr;
  CUDNN_CHECK(cudnnBatchNormalizationForwardTrainingEx(
      cudnn_, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, s.alpha(), s.beta(), p.x_desc, x.data(),
      nullptr, nullptr, p.x_desc, y.data(), p.param_desc, gamma.data(), beta.data(), g.momentum,
      running_mean.data(), running_var.data(), g.epsilon, saved_mean.data(), saved_inv_std.data(), nullptr,
      ws, p.forward_workspace, p.reserve.get(), p.reserve_bytes));
  const int64_t n = y.numel();
  if (g.fusion == BatchNormFusion::add_relu)
    cuda::add(y.data(), residual->data(), y.data(), g.dtype, n, stream_);
  if (g.fusion != BatchNormFusion::none) cuda::relu_forward(y.data(), y.data(), g.dtype, n, stream_);
}

namespace {

// cuDNN's inference batch norm of x into y; with add_to_y, onto what y holds (cuDNN blends its result into
// its output: y = 1 * bn(x) + 1 * y).
void cudnn_inference(cudnnHandle_t cudnn, const CudaBatchNormPlan& p, const Tensor& x, const Tensor& gamma,
                     const Tensor& beta, const Tensor& running_mean, const Tensor& running_var, Tensor& y,
                     bool add_to_y) {
  const Scaling s(p.geometry.dtype, 1.0, add_to_y ? 1.0 : 0.0);
  CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
      cudnn, CUDNN_BATCHNORM_SPATIAL, s.alpha(), s.beta(), p.x_desc, x.data(), p.x_desc, y.data(),
      p.param_desc, gamma.data(), beta.data(), running_mean.data(), running_var.data(), p.geometry.epsilon));
}

}  // namespace

void CudaBackend::batchnorm_forward_inference(const BatchNormPlan& plan, const BatchNormTensors& bn,
                                              const Tensor* residual, Tensor& y) {
  const char* op = "batchnorm_forward_inference";
  check_batchnorm_tensors(op, bn, BatchNormPass::inference);
  const Tensor &x = *bn.x, &gamma = *bn.gamma, &beta = *bn.beta;
  const Tensor &running_mean = *bn.running_mean, &running_var = *bn.running_var;
  const auto& p = as_cuda_plan(plan);
  const BatchNormGeometry& g = p.geometry;
  check_activation(op, "x", x, activation_dims(g), g.dtype, g.layout);
  check_activation(op, "y", y, activation_dims(g), g.dtype, g.layout);
  check_residual(op, "residual", g, residual);
  check_param(op, "gamma", p, gamma);
  check_param(op, "beta", p, beta);
  check_param(op, "running_mean", p, running_mean);
  check_param(op, "running_var", p, running_var);
  activate();
  cudnn_inference(cudnn_, p, x, gamma, beta, running_mean, running_var, y, /*add_to_y=*/false);
  const int64_t n = y.numel();
  if (g.fusion == BatchNormFusion::add_relu)
    cuda::add(y.data(), residual->data(), y.data(), g.dtype, n, stream_);
  if (g.fusion != BatchNormFusion::none) cuda::relu_forward(y.data(), y.data(), g.dtype, n, stream_);
}

void CudaBackend::batchnorm_backward(const BatchNormPlan& plan, const BatchNormTensors& bn, const Tensor& y,
                                     const Tensor& dy, Tensor* dresidual, Accumulate accumulate,
                                     void* workspace) {
  const char* op = "batchnorm_backward";
  check_batchnorm_tensors(op, bn, BatchNormPass::backward);
  const Tensor &x = *bn.x, &gamma = *bn.gamma, &saved_mean = *bn.saved_mean,
               &saved_inv_std = *bn.saved_inv_std;
  Tensor &dx = *bn.dx, &dgamma = *bn.dgamma, &dbeta = *bn.dbeta;
  const auto& p = as_cuda_plan(plan);
  const BatchNormGeometry& g = p.geometry;
  check_activation(op, "x", x, activation_dims(g), g.dtype, g.layout);
  check_activation(op, "y", y, activation_dims(g), g.dtype, g.layout);
  check_activation(op, "dy", dy, activation_dims(g), g.dtype, g.layout);
  check_activation(op, "dx", dx, activation_dims(g), g.dtype, g.layout);
  check_residual(op, "dresidual", g, dresidual);
  check_param(op, "gamma", p, gamma);
  check_param(op, "saved_mean", p, saved_mean);
  check_param(op, "saved_inv_std", p, saved_inv_std);
  check_param(op, "dgamma", p, dgamma);
  check_param(op, "dbeta", p, dbeta);
  DLB_CHECK(p.total_workspace == 0 || workspace != nullptr, "{}: the plan needs a workspace of {} bytes", op,
            p.total_workspace);
  activate();
  if (p.own) {
    own_batchnorm_backward(p.own_launch, x.data(), y.data(), dy.data(), f32(gamma), f32(saved_mean),
                           f32(saved_inv_std), dx.data(), dresidual ? dresidual->data() : nullptr,
                           f32(dgamma), f32(dbeta), accumulate == Accumulate::add, workspace, p.reserve.get(),
                           stream_);
    return;
  }
  const Scaling data(g.dtype, 1.0, 0.0);
  const Scaling param(g.dtype, 1.0, accumulate == Accumulate::add ? 1.0 : 0.0);
  void* ws = p.backward_workspace ? at_offset(workspace, p.cudnn_workspace_offset) : nullptr;

  // The ReLU passes the gradient where it passed the value (y > 0).
  const void* dy_bn = dy.data();
  if (g.fusion != BatchNormFusion::none) {
    void* masked =
        g.fusion == BatchNormFusion::add_relu ? dresidual->data() : at_offset(workspace, p.masked_dy_offset);
    cuda::relu_backward(y.data(), dy.data(), masked, g.dtype, dy.numel(), stream_);
    dy_bn = masked;
  }
  CUDNN_CHECK(cudnnBatchNormalizationBackwardEx(
      cudnn_, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, data.alpha(), data.beta(), param.alpha(),
      param.beta(), p.x_desc, x.data(), nullptr, nullptr, p.x_desc, dy_bn, nullptr, nullptr, p.x_desc,
      dx.data(), p.param_desc, gamma.data(), nullptr, dgamma.data(), dbeta.data(), g.epsilon,
      saved_mean.data(), saved_inv_std.data(), nullptr, ws, p.backward_workspace, p.reserve.get(),
      p.reserve_bytes));
}

namespace {

constexpr const char* kFoldedForward = "batchnorm_shortcut_forward_training";
constexpr const char* kFoldedBackward = "batchnorm_shortcut_backward";

// A batch norm of a two-layer op (the folded shortcut's pair, the stem's batch norm + max pool) on the own
// kernels' terms; `op` names the op in messages.
OwnBatchNormSide own_side(const char* op, const CudaBatchNormPlan& p, const BatchNormTensors& t,
                          bool backward) {
  OwnBatchNormSide side;
  side.launch = &p.own_launch;
  side.x = t.x->data();
  side.gamma = f32(*t.gamma);
  side.beta = f32(*t.beta);
  side.saved_mean = f32(*t.saved_mean);
  side.saved_inv_std = f32(*t.saved_inv_std);
  if (backward) {
    side.dx = t.dx->data();
    side.dgamma = f32(*t.dgamma);
    side.dbeta = f32(*t.dbeta);
  } else {
    side.running_mean = f32(*t.running_mean);
    side.running_var = f32(*t.running_var);
  }
  side.held = p.reserve.get();
  if (!backward && t.input_sums) {
    check_input_sums(op, p.geometry, *t.input_sums);
    side.input_sums = f32(*t.input_sums);
  }
  return side;
}

// Both plans on the own NHWC kernels, the closing one add_relu keeping its mask.
bool own_pair(const CudaBatchNormPlan& p, const CudaBatchNormPlan& s) {
  return p.own && s.own && p.geometry.layout == Layout::nhwc && s.geometry.layout == Layout::nhwc &&
         bn::keeps_relu_mask(p.geometry) && p.reserve.get() != nullptr && s.reserve.get() != nullptr;
}

}  // namespace

void CudaBackend::batchnorm_shortcut_forward_training(const BatchNormPlan& plan,
                                                      const BatchNormPlan& shortcut_plan,
                                                      const BatchNormTensors& main,
                                                      const BatchNormTensors& shortcut, Tensor& y,
                                                      void* workspace) {
  const auto &p = as_cuda_plan(plan), &s = as_cuda_plan(shortcut_plan);
  activate();
  if (own_pair(p, s) && own_batchnorm_shortcut_forward_training(own_side(kFoldedForward, p, main, false),
                                                                own_side(kFoldedForward, s, shortcut, false),
                                                                y.data(), workspace, stream_))
    return;
  Backend::batchnorm_shortcut_forward_training(plan, shortcut_plan, main, shortcut, y, workspace);
}

// Inference needs no kernels of its own: cuDNN writes bn_s(s) into y, adds bn(x) onto it, and the ReLU
// runs in place; no buffer between the two (the composed default allocates one per call).
void CudaBackend::batchnorm_shortcut_forward_inference(const BatchNormPlan& plan,
                                                       const BatchNormPlan& shortcut_plan,
                                                       const BatchNormTensors& main,
                                                       const BatchNormTensors& shortcut, Tensor& y) {
  const auto &p = as_cuda_plan(plan), &s = as_cuda_plan(shortcut_plan);
  const char* op = "batchnorm_shortcut_forward_inference";
  DLB_CHECK(p.geometry.fusion == BatchNormFusion::add_relu && s.geometry.fusion == BatchNormFusion::none,
            "{}: the closing batch norm must be add_relu and the shortcut's have no fusion", op);
  DLB_CHECK(main.x && main.gamma && main.beta && main.running_mean && main.running_var && shortcut.x &&
                shortcut.gamma && shortcut.beta && shortcut.running_mean && shortcut.running_var,
            "{}: inputs, parameters and running statistics of both batch norms are needed", op);
  for (const auto& [side, t] : {std::pair{&p, &main}, std::pair{&s, &shortcut}}) {
    check_activation(op, "x", *t->x, activation_dims(side->geometry), side->geometry.dtype,
                     side->geometry.layout);
    check_param(op, "gamma", *side, *t->gamma);
    check_param(op, "beta", *side, *t->beta);
    check_param(op, "running_mean", *side, *t->running_mean);
    check_param(op, "running_var", *side, *t->running_var);
  }
  check_activation(op, "y", y, activation_dims(p.geometry), p.geometry.dtype, p.geometry.layout);
  activate();
  cudnn_inference(cudnn_, s, *shortcut.x, *shortcut.gamma, *shortcut.beta, *shortcut.running_mean,
                  *shortcut.running_var, y, /*add_to_y=*/false);
  cudnn_inference(cudnn_, p, *main.x, *main.gamma, *main.beta, *main.running_mean, *main.running_var, y,
                  /*add_to_y=*/true);
  cuda::relu_forward(y.data(), y.data(), p.geometry.dtype, y.numel(), stream_);
}

void CudaBackend::batchnorm_shortcut_backward(const BatchNormPlan& plan, const BatchNormPlan& shortcut_plan,
                                              const BatchNormTensors& main, const BatchNormTensors& shortcut,
                                              const Tensor& y, const Tensor& dy, Accumulate accumulate,
                                              void* workspace) {
  const auto &p = as_cuda_plan(plan), &s = as_cuda_plan(shortcut_plan);
  activate();
  if (own_pair(p, s) &&
      own_batchnorm_shortcut_backward(own_side(kFoldedBackward, p, main, true),
                                      own_side(kFoldedBackward, s, shortcut, true), dy.data(),
                                      accumulate == Accumulate::add, workspace, stream_))
    return;
  Backend::batchnorm_shortcut_backward(plan, shortcut_plan, main, shortcut, y, dy, accumulate, workspace);
}

// ---- the stem's batch norm + ReLU and max pool as one op ----

namespace {

MaxPoolShape pool_shape(const PoolGeometry& g) {
  return {g.batch,    g.channels, g.in_h,     g.in_w,     g.out_h(), g.out_w(),
          g.kernel_h, g.kernel_w, g.stride_h, g.stride_w, g.pad_h,   g.pad_w};
}

// Whether a plan pair runs on the own fused kernels (else Backend's composition, which keeps relu(bn(x))
// in the saved memory): the saved memory's size follows from it, so a run and an estimate plan agree.
// Asked for, and a max pool the own fused kernels take after this batch norm (whose own kernels train).
bool pooled_fits(const BatchNormGeometry& bn, const PoolGeometry& pool, const CudaOptions& o) {
  return o.stem_pool_fusion && pool.kind == PoolKind::max &&
         own_batchnorm_max_pool_fits(bn, pool_shape(pool));
}

bool pooled_on_own_kernels(const CudaBatchNormPlan& p, const PoolPlan& pool, const CudaOptions& o) {
  return p.own && pooled_fits(p.geometry, pool.geometry, o);
}

// The fused op's saved memory: the pool's positions (one byte per output element), then room for the
// running statistics' coefficients at inference (16 bytes a channel).
size_t argmax_bytes(const PoolGeometry& g) {
  return align_up(static_cast<size_t>(g.batch * g.channels * g.out_h() * g.out_w()), kWorkspaceAlignment);
}

void check_pooled(const char* op, const CudaBatchNormPlan& p, const PoolPlan& pool, const BatchNormTensors& t,
                  const Tensor& y, const void* saved) {
  const BatchNormGeometry& g = p.geometry;
  const PoolGeometry& q = pool.geometry;
  DLB_CHECK(t.x && t.gamma && t.beta, "{}: x and the batch norm's parameters are needed", op);
  check_activation(op, "x", *t.x, activation_dims(g), g.dtype, g.layout);
  check_activation(op, "y", y, {q.batch, q.channels, q.out_h(), q.out_w()}, q.dtype, q.layout);
  check_param(op, "gamma", p, *t.gamma);
  check_param(op, "beta", p, *t.beta);
  DLB_CHECK(saved != nullptr, "{}: no saved memory", op);
}

}  // namespace

bool CudaBackend::fuses(const FusionCandidate& c) const {
  // What makes a plan's `own` (new_plan), without planning: FP64 trains on cuDNN's batch norm.
  const bool own_batchnorm = c.batchnorm.dtype != DType::f64;
  switch (c.fusion) {
    case Fusion::conv_statistics:
      return own_batchnorm && options_.conv_statistics != KernelChoice::off;
    case Fusion::shortcut_batchnorm:
      return own_batchnorm && options_.fold_shortcut_batchnorm && bn::keeps_relu_mask(c.batchnorm);
    case Fusion::batchnorm_max_pool:
      return own_batchnorm && pooled_fits(c.batchnorm, c.pool, options_);
    case Fusion::dense_gelu_dense:  // cuBLASLt's epilogues, in every float dtype but FP64
    case Fusion::dense_residual:
      return options_.dense_epilogues && c.dense.dtype != DType::f64;
    case Fusion::layernorm_dx_sums:  // the layer norm's one-pass kernel (FP64 takes the composed pass)
      return options_.dense_epilogues && c.dense.dtype != DType::f64;
    case Fusion::attention_qkv_bias:  // a third of the bias pass over qkv's gradient, and a GEMV
      return options_.dense_epilogues;
    case Fusion::layernorm_fp8_codes:  // operands of FP8 GEMMs, which cuBLASLt runs in multiples of 16
      return (c.dense.dtype == DType::bf16 || c.dense.dtype == DType::f16) && c.dense.rows % 16 == 0 &&
             c.dense.in_features % 16 == 0 && c.dense.out_features % 16 == 0;
  }
  return false;
}

size_t CudaBackend::batchnorm_max_pool_saved_bytes(const BatchNormPlan& plan,
                                                   const PoolPlan& pool_plan) const {
  const auto& p = as_cuda_plan(plan);
  if (!pooled_on_own_kernels(p, pool_plan, options_))
    return Backend::batchnorm_max_pool_saved_bytes(plan, pool_plan);
  return argmax_bytes(pool_plan.geometry) +
         align_up(static_cast<size_t>(p.geometry.channels * 16), kWorkspaceAlignment);
}

void CudaBackend::batchnorm_max_pool_forward_training(const BatchNormPlan& plan, const PoolPlan& pool_plan,
                                                      const BatchNormTensors& bn, Tensor& y, void* saved,
                                                      void* workspace) {
  const auto& p = as_cuda_plan(plan);
  if (!pooled_on_own_kernels(p, pool_plan, options_)) {
    Backend::batchnorm_max_pool_forward_training(plan, pool_plan, bn, y, saved, workspace);
    return;
  }
  const char* op = "batchnorm_max_pool_forward_training";
  check_pooled(op, p, pool_plan, bn, y, saved);
  DLB_CHECK(p.reserve.get() != nullptr, "{}: an estimate plan cannot run", op);
  activate();
  DLB_CHECK(
      own_batchnorm_max_pool_forward_training(own_side(op, p, bn, false), pool_shape(pool_plan.geometry),
                                              y.data(), static_cast<uint8_t*>(saved), workspace, stream_),
      "{}: x or y is not aligned to 16 bytes", op);
}

void CudaBackend::batchnorm_max_pool_forward_inference(const BatchNormPlan& plan, const PoolPlan& pool_plan,
                                                       const BatchNormTensors& bn, Tensor& y, void* saved) {
  const auto& p = as_cuda_plan(plan);
  if (!pooled_on_own_kernels(p, pool_plan, options_)) {
    Backend::batchnorm_max_pool_forward_inference(plan, pool_plan, bn, y, saved);
    return;
  }
  const char* op = "batchnorm_max_pool_forward_inference";
  check_pooled(op, p, pool_plan, bn, y, saved);
  DLB_CHECK(bn.running_mean && bn.running_var, "{}: the running statistics are needed", op);
  check_param(op, "running_mean", p, *bn.running_mean);
  check_param(op, "running_var", p, *bn.running_var);
  activate();
  void* coefficients = static_cast<unsigned char*>(saved) + argmax_bytes(pool_plan.geometry);
  DLB_CHECK(own_batchnorm_max_pool_forward_inference(
                p.geometry, bn.x->data(), f32(*bn.gamma), f32(*bn.beta), f32(*bn.running_mean),
                f32(*bn.running_var), pool_shape(pool_plan.geometry), y.data(), coefficients, stream_),
            "{}: x or y is not aligned to 16 bytes", op);
}

void CudaBackend::batchnorm_max_pool_backward(const BatchNormPlan& plan, const PoolPlan& pool_plan,
                                              const BatchNormTensors& bn, const Tensor& y, const Tensor& dy,
                                              const void* saved, Accumulate accumulate, void* workspace) {
  const auto& p = as_cuda_plan(plan);
  if (!pooled_on_own_kernels(p, pool_plan, options_)) {
    Backend::batchnorm_max_pool_backward(plan, pool_plan, bn, y, dy, saved, accumulate, workspace);
    return;
  }
  const char* op = "batchnorm_max_pool_backward";
  check_pooled(op, p, pool_plan, bn, y, saved);
  check_activation(op, "dy", dy, y.dims(), y.dtype(), y.layout());
  DLB_CHECK(bn.dx && bn.dgamma && bn.dbeta && bn.saved_mean && bn.saved_inv_std,
            "{}: the batch norm's gradients and saved statistics are needed", op);
  check_activation(op, "dx", *bn.dx, activation_dims(p.geometry), p.geometry.dtype, p.geometry.layout);
  for (const auto& [name, t] :
       {std::pair{"dgamma", bn.dgamma}, std::pair{"dbeta", bn.dbeta}, std::pair{"saved_mean", bn.saved_mean},
        std::pair{"saved_inv_std", bn.saved_inv_std}})
    check_param(op, name, p, *t);
  DLB_CHECK(p.reserve.get() != nullptr, "{}: an estimate plan cannot run", op);
  activate();
  DLB_CHECK(own_batchnorm_max_pool_backward(own_side(op, p, bn, true), pool_shape(pool_plan.geometry),
                                            dy.data(), static_cast<const uint8_t*>(saved),
                                            accumulate == Accumulate::add, workspace, stream_),
            "{}: x, dy or dx is not aligned to 16 bytes", op);
}

}  // namespace cuda

std::string describe_cuda_batchnorm_plan(const BatchNormPlan& plan) {
  const auto& p = cuda::as_cuda_plan(plan);
  return fmt::format("{}; workspace {} B, reserve {} B", p.path, p.total_workspace, p.reserve_bytes);
}

}  // namespace dlbench
