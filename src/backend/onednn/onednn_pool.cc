// Pooling on oneDNN primitives. Max pooling keeps oneDNN's workspace (the argmax) in the caller's `saved`
// buffer between forward and backward; average pooling excludes the padding from the divisor.
#include "backend/onednn/onednn_common.h"

namespace dlbench {
namespace onednn {
namespace {

using dnnl::memory;

class OneDnnPoolPlan final : public PoolPlan {
 public:
  explicit OneDnnPoolPlan(const PoolGeometry& g) : PoolPlan(g) {}
  size_t saved_bytes() const override { return saved_md ? saved_md.get_size() : 0; }

  memory::desc src_md, dst_md, saved_md;  // saved_md is empty for average pooling
  dnnl::pooling_forward forward_training, forward_inference;
  dnnl::pooling_backward backward;
};

const OneDnnPoolPlan& as_onednn(const PoolPlan& plan) {
  auto* p = dynamic_cast<const OneDnnPoolPlan*>(&plan);
  DLB_CHECK(p != nullptr, "pool plan was not made by the onednn backend");
  return *p;
}

void check_pool_tensor(const Tensor& t, const memory::dims& dims, Layout layout, const char* what) {
  check_f32(t, what);
  DLB_CHECK(t.rank() == 4 && t.dim(0) == dims[0] && t.dim(1) == dims[1] && t.dim(2) == dims[2] &&
                t.dim(3) == dims[3] && t.layout() == layout,
            "{}: tensor {} does not match the plan's [{}] {}", what, t.describe(), fmt::join(dims, ", "),
            layout_name(layout));
}

memory::dims src_dims(const PoolGeometry& g) { return {g.batch, g.channels, g.in_h, g.in_w}; }
memory::dims dst_dims(const PoolGeometry& g) { return {g.batch, g.channels, g.out_h(), g.out_w()}; }

}  // namespace

std::unique_ptr<PoolPlan> OneDnnBackend::plan_pool(const PoolGeometry& g) {
  check_f32(g.dtype, "pooling");
  DLB_CHECK(g.batch > 0 && g.channels > 0 && g.out_h() > 0 && g.out_w() > 0, "bad pooling geometry");
  auto plan = std::make_unique<OneDnnPoolPlan>(g);
  plan->src_md = f32_desc(src_dims(g), activation_tag(g.layout));
  plan->dst_md = f32_desc(dst_dims(g), activation_tag(g.layout));
  const auto algo = g.kind == PoolKind::max ? dnnl::algorithm::pooling_max
                                            : dnnl::algorithm::pooling_avg_exclude_padding;
  const memory::dims strides{g.stride_h, g.stride_w}, kernel{g.kernel_h, g.kernel_w}, pad{g.pad_h, g.pad_w};
  const std::string what = fmt::format("{} pool {}x{}x{}x{} k{}x{} s{} p{} {}",
                                       g.kind == PoolKind::max ? "max" : "avg", g.batch, g.channels, g.in_h,
                                       g.in_w, g.kernel_h, g.kernel_w, g.stride_h, g.pad_h, layout_name(g.layout));
  using fwd = dnnl::pooling_forward;
  using bwd = dnnl::pooling_backward;
  fwd::primitive_desc train_pd, infer_pd;
  bwd::primitive_desc bwd_pd;
  DNNL_CHECK((train_pd = fwd::primitive_desc(fwd::desc(dnnl::prop_kind::forward_training, algo, plan->src_md,
                                                       plan->dst_md, strides, kernel, pad, pad),
                                             engine_)),
             "{} forward training", what);
  DNNL_CHECK((infer_pd = fwd::primitive_desc(fwd::desc(dnnl::prop_kind::forward_inference, algo, plan->src_md,
                                                       plan->dst_md, strides, kernel, pad, pad),
                                             engine_)),
             "{} forward inference", what);
  DNNL_CHECK((bwd_pd = bwd::primitive_desc(bwd::desc(algo, plan->src_md, plan->dst_md, strides, kernel, pad, pad),
                                           engine_, train_pd)),
             "{} backward", what);
  DLB_CHECK(train_pd.scratchpad_desc().get_size() == 0 && infer_pd.scratchpad_desc().get_size() == 0 &&
                bwd_pd.scratchpad_desc().get_size() == 0,
            "{}: oneDNN pooling unexpectedly needs a scratchpad", what);
  if (g.kind == PoolKind::max) plan->saved_md = train_pd.workspace_desc();
  plan->forward_training = fwd(train_pd);
  plan->forward_inference = fwd(infer_pd);
  plan->backward = bwd(bwd_pd);
  return plan;
}

void OneDnnBackend::pool_forward(const PoolPlan& plan, const Tensor& x, Tensor& y, void* saved) {
  const auto& p = as_onednn(plan);
  check_pool_tensor(x, src_dims(p.geometry), p.geometry.layout, "pool_forward x");
  check_pool_tensor(y, dst_dims(p.geometry), p.geometry.layout, "pool_forward y");
  ArgMap args{{DNNL_ARG_SRC, wrap(p.src_md, engine_, x.data())}, {DNNL_ARG_DST, wrap(p.dst_md, engine_, y.data())}};
  const bool training = p.saved_md && saved != nullptr;
  if (training) args.emplace(DNNL_ARG_WORKSPACE, wrap(p.saved_md, engine_, saved));
  (training || !p.saved_md ? p.forward_training : p.forward_inference).execute(stream_, args);
  stream_.wait();
}

void OneDnnBackend::pool_backward(const PoolPlan& plan, const Tensor& x, const Tensor& y, const Tensor& dy,
                                  const void* saved, Tensor& dx) {
  const auto& p = as_onednn(plan);
  check_pool_tensor(dy, dst_dims(p.geometry), p.geometry.layout, "pool_backward dy");
  check_pool_tensor(dx, src_dims(p.geometry), p.geometry.layout, "pool_backward dx");
  ArgMap args{{DNNL_ARG_DIFF_DST, wrap(p.dst_md, engine_, dy.data())},
              {DNNL_ARG_DIFF_SRC, wrap(p.src_md, engine_, dx.data())}};
  if (p.saved_md) {
    DLB_CHECK(saved != nullptr, "max-pool backward needs the state its forward saved");
    args.emplace(DNNL_ARG_WORKSPACE, wrap(p.saved_md, engine_, saved));
  }
  p.backward.execute(stream_, args);
  stream_.wait();
}

}  // namespace onednn
}  // namespace dlbench
