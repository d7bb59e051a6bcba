// Batch normalisation on oneDNN primitives, with our own loops for what oneDNN's batch norm lacks: the
// residual add, the masking of dy by the ReLU, the running-statistics update and the saved 1/sqrt(var+eps).
//
// Forward training: the primitive writes the batch mean straight into saved_mean and the (biased) variance
// into the workspace; a [C] loop turns that into saved_inv_std and updates the running stats with the
// unbiased variance (x N/(N-1), N = batch*h*w, PyTorch's convention). BatchNormFusion::relu uses oneDNN's
// fuse_norm_relu (its ReLU bitmask goes to the workspace and is dropped: the backward masks with y);
// add_relu runs the plain primitive, then y = max(y + residual, 0) in one pass.
// Backward: dy is masked by y > 0 first (into dresidual for add_relu, which is exactly that gradient, or
// into the workspace for relu); the variance is rebuilt from saved_inv_std; the primitive writes dx and
// dgamma/dbeta (through the workspace when they accumulate).
#include "backend/onednn/onednn_common.h"

namespace dlbench {
namespace onednn {
namespace {

using dnnl::memory;
using flags = dnnl::normalization_flags;

constexpr int64_t kParallelThreshold = 1 << 14;

class OneDnnBatchNormPlan final : public BatchNormPlan {
 public:
  explicit OneDnnBatchNormPlan(const BatchNormGeometry& g) : BatchNormPlan(g) {}
  size_t workspace_bytes() const override { return total_bytes; }

  memory::desc data_md, stat_md;
  dnnl::batch_normalization_forward forward_training, forward_inference;
  dnnl::batch_normalization_backward backward;
  // Workspace slices: [C] variance, [C] dgamma and dbeta (accumulation), the relu bitmask, masked dy.
  size_t variance_offset = 0, dgamma_offset = 0, dbeta_offset = 0;
  size_t relu_mask_offset = 0, masked_dy_offset = 0;
  memory::desc relu_mask_md;
  size_t scratch_offset = 0, scratch_training = 0, scratch_backward = 0;
  size_t total_bytes = 0;
};

const OneDnnBatchNormPlan& as_onednn(const BatchNormPlan& plan) {
  auto* p = dynamic_cast<const OneDnnBatchNormPlan*>(&plan);
  DLB_CHECK(p != nullptr, "batch-norm plan was not made by the onednn backend");
  return *p;
}

void check_data(const Tensor& t, const BatchNormGeometry& g, const char* what) {
  check_f32(t, what);
  DLB_CHECK(t.rank() == 4 && t.dim(0) == g.batch && t.dim(1) == g.channels && t.dim(2) == g.h &&
                t.dim(3) == g.w && t.layout() == g.layout,
            "{}: tensor {} does not match the plan's [{}, {}, {}, {}] {}", what, t.describe(), g.batch,
            g.channels, g.h, g.w, layout_name(g.layout));
}

void check_stat(const Tensor& t, const BatchNormGeometry& g, const char* what) {
  check_f32(t, what);
  DLB_CHECK(t.numel() == g.channels, "{}: {} should hold {} values", what, t.describe(), g.channels);
}

// y = max(y + r, 0)
void add_relu_inplace(float* y, const float* r, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) {
    const float v = y[i] + r[i];
    y[i] = v > 0.f ? v : 0.f;
  }
}

// out = y > 0 ? dy : 0
void relu_mask(const float* y, const float* dy, float* out, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) out[i] = y[i] > 0.f ? dy[i] : 0.f;
}

}  // namespace

std::unique_ptr<BatchNormPlan> OneDnnBackend::plan_batchnorm(const BatchNormGeometry& g) {
  check_f32(g.dtype, "batch norm");
  DLB_CHECK(g.batch > 0 && g.channels > 0 && g.h > 0 && g.w > 0, "bad batch-norm geometry");
  auto plan = std::make_unique<OneDnnBatchNormPlan>(g);
  const std::string what = fmt::format("batch norm {}x{}x{}x{} {}", g.batch, g.channels, g.h, g.w,
                                       layout_name(g.layout));
  plan->data_md = f32_desc({g.batch, g.channels, g.h, g.w}, activation_tag(g.layout));
  plan->stat_md = f32_desc({g.channels}, tag::a);
  const float eps = static_cast<float>(g.epsilon);
  const flags affine = flags::use_scale | flags::use_shift;
  const flags relu = g.fusion == BatchNormFusion::relu ? flags::fuse_norm_relu : flags::none;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);

  using fwd = dnnl::batch_normalization_forward;
  using bwd = dnnl::batch_normalization_backward;
  fwd::primitive_desc train_pd, infer_pd, hint_pd;
  bwd::primitive_desc bwd_pd;
  DNNL_CHECK((train_pd = fwd::primitive_desc(
                  fwd::desc(dnnl::prop_kind::forward_training, plan->data_md, eps, affine | relu), attr, engine_)),
             "{} forward training", what);
  // Inference gets no workspace from the interface: its scratchpad (if any) stays with oneDNN, which keeps
  // one buffer per thread and grows it once, so nothing is allocated per call either.
  DNNL_CHECK((infer_pd = fwd::primitive_desc(fwd::desc(dnnl::prop_kind::forward_inference, plan->data_md, eps,
                                                       affine | relu | flags::use_global_stats),
                                             engine_)),
             "{} forward inference", what);
  // The backward masks dy itself, so it runs unfused; its hint is an unfused forward.
  DNNL_CHECK((hint_pd = fwd::primitive_desc(
                  fwd::desc(dnnl::prop_kind::forward_training, plan->data_md, eps, affine), attr, engine_)),
             "{} forward hint", what);
  DNNL_CHECK((bwd_pd = bwd::primitive_desc(
                  bwd::desc(dnnl::prop_kind::backward, plan->data_md, plan->data_md, eps, affine), attr, engine_,
                  hint_pd)),
             "{} backward", what);
  plan->forward_training = fwd(train_pd);
  plan->forward_inference = fwd(infer_pd);
  plan->backward = bwd(bwd_pd);

  WorkspaceLayout layout;
  const size_t stat_bytes = static_cast<size_t>(g.channels) * sizeof(float);
  plan->variance_offset = layout.reserve(stat_bytes);
  plan->dgamma_offset = layout.reserve(stat_bytes);
  plan->dbeta_offset = layout.reserve(stat_bytes);
  plan->relu_mask_md = train_pd.workspace_desc();
  plan->relu_mask_offset = layout.reserve(plan->relu_mask_md.get_size());
  if (g.fusion == BatchNormFusion::relu) {
    plan->masked_dy_offset = layout.reserve(plan->data_md.get_size());
  }
  plan->scratch_training = train_pd.scratchpad_desc().get_size();
  plan->scratch_backward = bwd_pd.scratchpad_desc().get_size();
  plan->scratch_offset =
      layout.reserve(std::max(plan->scratch_training, plan->scratch_backward));
  plan->total_bytes = layout.total();
  return plan;
}

void OneDnnBackend::batchnorm_forward_training(const BatchNormPlan& plan, const Tensor& x, const Tensor* residual,
                                               const Tensor& gamma, const Tensor& beta, Tensor& y,
                                               Tensor& running_mean, Tensor& running_var, Tensor& saved_mean,
                                               Tensor& saved_inv_std, void* workspace) {
  const auto& p = as_onednn(plan);
  const BatchNormGeometry& g = p.geometry;
  check_data(x, g, "batchnorm_forward_training x");
  check_data(y, g, "batchnorm_forward_training y");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&gamma, &beta, &running_mean, &running_var, &saved_mean, &saved_inv_std}) {
    check_stat(*t, g, "batchnorm_forward_training parameters/statistics");
  }
  if (g.fusion == BatchNormFusion::add_relu) {
    DLB_CHECK(residual != nullptr, "batch norm with add_relu needs a residual");
    check_data(*residual, g, "batchnorm_forward_training residual");
  }
  DLB_CHECK(workspace != nullptr, "batch norm needs a workspace of plan.workspace_bytes() = {} bytes",
            p.total_bytes);
  float* variance = static_cast<float*>(at_offset(workspace, p.variance_offset));
  ArgMap args{{DNNL_ARG_SRC, wrap(p.data_md, engine_, x.data())},
              {DNNL_ARG_DST, wrap(p.data_md, engine_, y.data())},
              {DNNL_ARG_SCALE, wrap(p.stat_md, engine_, gamma.data())},
              {DNNL_ARG_SHIFT, wrap(p.stat_md, engine_, beta.data())},
              {DNNL_ARG_MEAN, wrap(p.stat_md, engine_, saved_mean.data())},
              {DNNL_ARG_VARIANCE, wrap(p.stat_md, engine_, variance)}};
  if (g.fusion == BatchNormFusion::relu) {
    args.emplace(DNNL_ARG_WORKSPACE, wrap(p.relu_mask_md, engine_, at_offset(workspace, p.relu_mask_offset)));
  }
  p.forward_training.execute(stream_, with_scratchpad(std::move(args), scratchpad_memory(engine_, workspace,
                                                                                          p.scratch_offset,
                                                                                          p.scratch_training)));
  stream_.wait();

  const int64_t count = g.batch * g.h * g.w;
  const float unbias = count > 1 ? static_cast<float>(count) / static_cast<float>(count - 1) : 1.f;
  const float m = static_cast<float>(g.momentum), eps = static_cast<float>(g.epsilon);
  const float* mean = saved_mean.ptr<float>();
  float* inv_std = saved_inv_std.ptr<float>();
  float* rmean = running_mean.ptr<float>();
  float* rvar = running_var.ptr<float>();
  for (int64_t c = 0; c < g.channels; ++c) {
    inv_std[c] = 1.f / std::sqrt(variance[c] + eps);
    rmean[c] = (1.f - m) * rmean[c] + m * mean[c];
    rvar[c] = (1.f - m) * rvar[c] + m * variance[c] * unbias;
  }
  if (g.fusion == BatchNormFusion::add_relu) add_relu_inplace(y.ptr<float>(), residual->ptr<float>(), y.numel());
}

void OneDnnBackend::batchnorm_forward_inference(const BatchNormPlan& plan, const Tensor& x, const Tensor* residual,
                                                const Tensor& gamma, const Tensor& beta,
                                                const Tensor& running_mean, const Tensor& running_var, Tensor& y) {
  const auto& p = as_onednn(plan);
  const BatchNormGeometry& g = p.geometry;
  check_data(x, g, "batchnorm_forward_inference x");
  check_data(y, g, "batchnorm_forward_inference y");
  for (const Tensor* t : {&gamma, &beta, &running_mean, &running_var}) {
    check_stat(*t, g, "batchnorm_forward_inference parameters/statistics");
  }
  if (g.fusion == BatchNormFusion::add_relu) {
    DLB_CHECK(residual != nullptr, "batch norm with add_relu needs a residual");
    check_data(*residual, g, "batchnorm_forward_inference residual");
  }
  p.forward_inference.execute(stream_, {{DNNL_ARG_SRC, wrap(p.data_md, engine_, x.data())},
                                        {DNNL_ARG_DST, wrap(p.data_md, engine_, y.data())},
                                        {DNNL_ARG_SCALE, wrap(p.stat_md, engine_, gamma.data())},
                                        {DNNL_ARG_SHIFT, wrap(p.stat_md, engine_, beta.data())},
                                        {DNNL_ARG_MEAN, wrap(p.stat_md, engine_, running_mean.data())},
                                        {DNNL_ARG_VARIANCE, wrap(p.stat_md, engine_, running_var.data())}});
  stream_.wait();
  if (g.fusion == BatchNormFusion::add_relu) add_relu_inplace(y.ptr<float>(), residual->ptr<float>(), y.numel());
}

void OneDnnBackend::batchnorm_backward(const BatchNormPlan& plan, const Tensor& x, const Tensor& y,
                                       const Tensor& dy, const Tensor& gamma, const Tensor& saved_mean,
                                       const Tensor& saved_inv_std, Tensor& dx, Tensor* dresidual, Tensor& dgamma,
                                       Tensor& dbeta, Accumulate accumulate, void* workspace) {
  const auto& p = as_onednn(plan);
  const BatchNormGeometry& g = p.geometry;
  check_data(x, g, "batchnorm_backward x");
  check_data(dy, g, "batchnorm_backward dy");
  check_data(dx, g, "batchnorm_backward dx");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&gamma, &saved_mean, &saved_inv_std, &dgamma, &dbeta}) {
    check_stat(*t, g, "batchnorm_backward parameters/statistics");
  }
  DLB_CHECK(workspace != nullptr, "batch norm needs a workspace of plan.workspace_bytes() = {} bytes",
            p.total_bytes);
  const int64_t n = x.numel();
  const float* dy_bn = dy.ptr<float>();  // the gradient reaching the normalisation's output
  if (g.fusion != BatchNormFusion::none) {
    check_data(y, g, "batchnorm_backward y");
    float* masked;
    if (g.fusion == BatchNormFusion::add_relu) {
      DLB_CHECK(dresidual != nullptr, "batch norm with add_relu needs dresidual");
      check_data(*dresidual, g, "batchnorm_backward dresidual");
      masked = dresidual->ptr<float>();
    } else {
      masked = static_cast<float*>(at_offset(workspace, p.masked_dy_offset));
    }
    relu_mask(y.ptr<float>(), dy.ptr<float>(), masked, n);
    dy_bn = masked;
  }
  float* variance = static_cast<float*>(at_offset(workspace, p.variance_offset));
  const float eps = static_cast<float>(g.epsilon);
  const float* inv_std = saved_inv_std.ptr<float>();
  for (int64_t c = 0; c < g.channels; ++c) variance[c] = 1.f / (inv_std[c] * inv_std[c]) - eps;

  const bool add = accumulate == Accumulate::add;
  float* dgamma_out = add ? static_cast<float*>(at_offset(workspace, p.dgamma_offset)) : dgamma.ptr<float>();
  float* dbeta_out = add ? static_cast<float*>(at_offset(workspace, p.dbeta_offset)) : dbeta.ptr<float>();
  p.backward.execute(stream_, with_scratchpad({{DNNL_ARG_SRC, wrap(p.data_md, engine_, x.data())},
                                               {DNNL_ARG_DIFF_DST, wrap(p.data_md, engine_, dy_bn)},
                                               {DNNL_ARG_MEAN, wrap(p.stat_md, engine_, saved_mean.data())},
                                               {DNNL_ARG_VARIANCE, wrap(p.stat_md, engine_, variance)},
                                               {DNNL_ARG_SCALE, wrap(p.stat_md, engine_, gamma.data())},
                                               // oneDNN 2.6 insists on a shift input to the backward when
                                               // use_shift is set, though it does not read it; the
                                               // interface passes no beta here, so gamma stands in.
                                               {DNNL_ARG_SHIFT, wrap(p.stat_md, engine_, gamma.data())},
                                               {DNNL_ARG_DIFF_SRC, wrap(p.data_md, engine_, dx.data())},
                                               {DNNL_ARG_DIFF_SCALE, wrap(p.stat_md, engine_, dgamma_out)},
                                               {DNNL_ARG_DIFF_SHIFT, wrap(p.stat_md, engine_, dbeta_out)}},
                                              scratchpad_memory(engine_, workspace, p.scratch_offset,
                                                                p.scratch_backward)));
  stream_.wait();
  if (add) {
    float* dg = dgamma.ptr<float>();
    float* db = dbeta.ptr<float>();
    for (int64_t c = 0; c < g.channels; ++c) {
      dg[c] += dgamma_out[c];
      db[c] += dbeta_out[c];
    }
  }
}

}  // namespace onednn
}  // namespace dlbench
