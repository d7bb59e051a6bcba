// Convolutions on oneDNN primitives, planned once per shape.
//
// Each of the three ops (forward, backward data, backward weights) is one oneDNN primitive whose inputs and
// output are either our plain tensors (NCHW/NHWC, weights OIHW/OHWI) or oneDNN's preferred blocked formats
// (format_tag::any), in which case the plan holds reorder primitives into and out of workspace buffers.
// The caller's workspace holds, at offsets fixed at plan time: the primitives' scratchpad (user scratchpad
// mode, so nothing is allocated per call), the reordered inputs and the op's output buffer. An output that
// must be accumulated (Accumulate::add) goes through that buffer and a reorder with a sum post-op.
//
// STRATEGY — measured with bench/kernels/onednn_conv_timing.cc on the project machine (2-core AMD EPYC
// Zen1, AVX2, oneDNN 2.6.3), one thread, process CPU time (the machine is shared: wall time at 2 threads
// was dominated by other processes), fwd + bwd_data + bwd_weights summed over each network's convolutions
// with their layer counts, ms per training step. Left: the strategies forced on every layer, in one run per
// layout. Right: the chosen per-shape mix against PyTorch 1.13's convolutions (the same oneDNN library,
// bench/kernels/torch_conv_timing.py) measured back to back in a later run; runs at different times differ
// by up to ~15% on this shared machine, so compare within each group only.
//
//                          plain    blocked   blocked_weights  |  chosen   PyTorch
//   resnet20 b128 NCHW      1605       766          1433       |    670       735
//   resnet20 b128 NHWC     (27900*)    760           677       |    573       575
//   ResNet-50 b16 NCHW     13258     11584             -       |  10127     11336
//   ResNet-50 b16 NHWC         -     11680         11718       |   9632     11114
//   * plain NHWC = OHWI weights, which no jit kernel takes: oneDNN falls back to its reference kernel
//     (this is the time of ONE 16-channel 28x28 layer). Never chosen.
// ONEDNN_VERBOSE shows PyTorch creating for NHWC exactly the primitives we choose there (nhwc activations,
// blocked weights); for NCHW it reorders to nChw8c around every call (checked on a 1x1 layer).
//
// What wins, per op and shape (the rules in default_onednn_conv_strategy):
//   NHWC: oneDNN's nhwc jit kernels on our activations with blocked weights (`blocked_weights`) for 1x1
//     convolutions (e.g. ResNet-50 64x56x56->256: 140 vs 168 ms) and for 3x3 with < 64 input channels
//     (resnet20: 39 vs 46 ms); full `blocked` (reorder to nChw8c) for 3x3 with 64+ channels (ResNet-50
//     64x56x56 3x3: 319 vs 358 ms) and for 1x1 on small outputs (N*P*Q < 3136, ResNet-50's 7x7 stage).
//   NCHW: `plain` runs oneDNN's im2col + GEMM kernels, `blocked` its jit kernels behind reorders. 3x3:
//     blocked (resnet20 16x28x28: 46 vs 144 ms). 1x1: plain (GEMM) on large outputs (N*P*Q > 3136; ResNet-50
//     64x56x56->256: 137 vs 167 ms), blocked on small ones; plain backward weights for 1x1 and for 3x3 on
//     small outputs with 64+ channels (ResNet-50 512x7x7 3x3: 110 vs 134 ms).
// Differences under ~5% are within the machine's noise and were not used to set a rule.
#include <fmt/format.h>

#include "backend/onednn/onednn_backend.h"
#include "backend/onednn/onednn_common.h"

namespace dlbench {
namespace onednn {
namespace {

using dnnl::memory;

// One argument of an op: the plain layout we hold and the layout the primitive wants.
struct OpArg {
  int arg_id = 0;
  memory::desc plain, impl;
  bool reordered = false;  // impl != plain: goes through a workspace buffer
  size_t offset = 0;       // of that buffer in the workspace
};

// One planned op: a primitive, its inputs a and b, its output, and the reorders around it.
struct ConvOp {
  dnnl::primitive primitive;
  std::string impl;
  OpArg a, b, out;
  dnnl::reorder a_in, b_in, out_overwrite, out_accumulate;
  size_t scratchpad_offset = 0, scratchpad_bytes = 0;
  size_t workspace_bytes = 0;
};

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// Lays out the workspace of an op and builds its reorders, once the primitive descriptor is known.
// `accumulates`: the op may be asked to add into its output (the backward ops).
void finish_op(ConvOp& op, const dnnl::primitive_desc_base& pd, const dnnl::engine& engine,
               bool accumulates) {
  WorkspaceLayout layout;
  size_t scratch = pd.scratchpad_desc().get_size();
  auto add_reorder = [&](const memory::desc& from, const memory::desc& to, bool accumulate) {
    dnnl::primitive_attr attr = user_scratchpad();
    if (accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.f);
      attr.set_post_ops(ops);
    }
    dnnl::reorder::primitive_desc rpd(engine, from, engine, to, attr);
    scratch = std::max(scratch, rpd.scratchpad_desc().get_size());
    return dnnl::reorder(rpd);
  };
  for (OpArg* arg : {&op.a, &op.b}) {
    arg->reordered = arg->impl != arg->plain;
    if (arg->reordered) arg->offset = layout.reserve(arg->impl.get_size());
  }
  if (op.a.reordered) op.a_in = add_reorder(op.a.plain, op.a.impl, false);
  if (op.b.reordered) op.b_in = add_reorder(op.b.plain, op.b.impl, false);
  op.out.reordered = op.out.impl != op.out.plain;
  // The output goes through a workspace buffer when its format differs, and for accumulation (oneDNN's
  // backward convolutions take no sum post-op) even where the formats agree.
  if (op.out.reordered || accumulates) op.out.offset = layout.reserve(op.out.impl.get_size());
  if (op.out.reordered) op.out_overwrite = add_reorder(op.out.impl, op.out.plain, false);
  if (accumulates) op.out_accumulate = add_reorder(op.out.impl, op.out.plain, true);
  op.scratchpad_bytes = scratch;
  op.scratchpad_offset = layout.reserve(scratch);
  op.workspace_bytes = layout.total();
  op.impl = pd.impl_info_str();
}

class OneDnnConvPlan final : public ConvPlan {
 public:
  OneDnnConvPlan(const ConvGeometry& g, const OneDnnConvStrategy& s) : ConvPlan(g), strategy(s) {}
  size_t workspace_bytes() const override {
    return std::max(
        {forward.workspace_bytes, backward_data.workspace_bytes, backward_weights.workspace_bytes});
  }
  OneDnnConvStrategy strategy;
  ConvOp forward, backward_data, backward_weights;
};

memory::desc any_desc(const memory::dims& dims) { return memory::desc(dims, dt::f32, tag::any); }

std::unique_ptr<OneDnnConvPlan> build_conv_plan(const dnnl::engine& engine, const ConvGeometry& g,
                                                const OneDnnConvStrategy& strategy) {
  check_f32(g.dtype, "convolution");
  DLB_CHECK(g.batch > 0 && g.in_channels > 0 && g.out_channels > 0 && g.out_h() > 0 && g.out_w() > 0,
            "bad convolution geometry");
  auto plan = std::make_unique<OneDnnConvPlan>(g, strategy);
  const memory::dims src_dims{g.batch, g.in_channels, g.in_h, g.in_w};
  const memory::dims wei_dims{g.out_channels, g.in_channels, g.kernel_h, g.kernel_w};
  const memory::dims dst_dims{g.batch, g.out_channels, g.out_h(), g.out_w()};
  const memory::dims strides{g.stride_h, g.stride_w}, padding{g.pad_h, g.pad_w};
  const memory::desc src_plain = f32_desc(src_dims, activation_tag(g.layout));
  const memory::desc wei_plain = f32_desc(wei_dims, weights_tag(g.layout));
  const memory::desc dst_plain = f32_desc(dst_dims, activation_tag(g.layout));
  auto act = [&](OneDnnConvFormat f, const memory::desc& plain, const memory::dims& dims) {
    return f == OneDnnConvFormat::blocked ? any_desc(dims) : plain;
  };
  auto wei = [&](OneDnnConvFormat f) {
    return f == OneDnnConvFormat::plain ? wei_plain : any_desc(wei_dims);
  };
  const auto algo = dnnl::algorithm::convolution_direct;
  const std::string what =
      fmt::format("conv {}x{}x{}x{} k{} {}x{} s{} p{} {}", g.batch, g.in_channels, g.in_h, g.in_w,
                  g.out_channels, g.kernel_h, g.kernel_w, g.stride_h, g.pad_h, layout_name(g.layout));
  const dnnl::primitive_attr attr = user_scratchpad();

  // Forward (training: the backward primitives take it as their hint).
  dnnl::convolution_forward::primitive_desc fwd_pd;
  {
    const OneDnnConvFormat f = strategy.forward;
    DNNL_CHECK((fwd_pd = dnnl::convolution_forward::primitive_desc(
                    dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo,
                                                    act(f, src_plain, src_dims), wei(f),
                                                    act(f, dst_plain, dst_dims), strides, padding, padding),
                    attr, engine)),
               "{} forward", what);
    ConvOp& op = plan->forward;
    op.a = {DNNL_ARG_SRC, src_plain, fwd_pd.src_desc()};
    op.b = {DNNL_ARG_WEIGHTS, wei_plain, fwd_pd.weights_desc()};
    op.out = {DNNL_ARG_DST, dst_plain, fwd_pd.dst_desc()};
    op.primitive = dnnl::convolution_forward(fwd_pd);
    finish_op(op, fwd_pd, engine, /*accumulates=*/false);
  }
  // The hint for the backward ops: a forward descriptor in the backward op's own formats, so that oneDNN
  // does not steer the backward towards the forward's choice.
  auto hint_for = [&](OneDnnConvFormat f) {
    dnnl::convolution_forward::primitive_desc hint;
    DNNL_CHECK((hint = dnnl::convolution_forward::primitive_desc(
                    dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo,
                                                    act(f, src_plain, src_dims), wei(f),
                                                    act(f, dst_plain, dst_dims), strides, padding, padding),
                    attr, engine)),
               "{} forward hint", what);
    return hint;
  };
  {
    const OneDnnConvFormat f = strategy.backward_data;
    dnnl::convolution_backward_data::primitive_desc pd;
    DNNL_CHECK(
        (pd = dnnl::convolution_backward_data::primitive_desc(
             dnnl::convolution_backward_data::desc(algo, act(f, src_plain, src_dims), wei(f),
                                                   act(f, dst_plain, dst_dims), strides, padding, padding),
             attr, engine, hint_for(f))),
        "{} backward data", what);
    ConvOp& op = plan->backward_data;
    op.a = {DNNL_ARG_DIFF_DST, dst_plain, pd.diff_dst_desc()};
    op.b = {DNNL_ARG_WEIGHTS, wei_plain, pd.weights_desc()};
    op.out = {DNNL_ARG_DIFF_SRC, src_plain, pd.diff_src_desc()};
    op.primitive = dnnl::convolution_backward_data(pd);
    finish_op(op, pd, engine, /*accumulates=*/true);
  }
  {
    const OneDnnConvFormat f = strategy.backward_weights;
    dnnl::convolution_backward_weights::primitive_desc pd;
    DNNL_CHECK(
        (pd = dnnl::convolution_backward_weights::primitive_desc(
             dnnl::convolution_backward_weights::desc(algo, act(f, src_plain, src_dims), wei(f),
                                                      act(f, dst_plain, dst_dims), strides, padding, padding),
             attr, engine, hint_for(f))),
        "{} backward weights", what);
    ConvOp& op = plan->backward_weights;
    op.a = {DNNL_ARG_SRC, src_plain, pd.src_desc()};
    op.b = {DNNL_ARG_DIFF_DST, dst_plain, pd.diff_dst_desc()};
    op.out = {DNNL_ARG_DIFF_WEIGHTS, wei_plain, pd.diff_weights_desc()};
    op.primitive = dnnl::convolution_backward_weights(pd);
    finish_op(op, pd, engine, /*accumulates=*/true);
  }
  return plan;
}

const OneDnnConvPlan& as_onednn(const ConvPlan& plan) {
  auto* p = dynamic_cast<const OneDnnConvPlan*>(&plan);
  DLB_CHECK(p != nullptr, "conv plan was not made by the onednn backend");
  return *p;
}

void check_conv_tensor(const Tensor& t, const memory::dims& dims, Layout layout, const char* what) {
  check_f32(t, what);
  DLB_CHECK(t.rank() == 4 && t.dim(0) == dims[0] && t.dim(1) == dims[1] && t.dim(2) == dims[2] &&
                t.dim(3) == dims[3] && t.layout() == layout,
            "{}: tensor {} does not match the plan's [{}] {}", what, t.describe(), fmt::join(dims, ", "),
            layout_name(layout));
}

void run_op_unchecked(OneDnnBackend& backend, const ConvOp& op, const void* a, const void* b, void* out,
                      Accumulate accumulate, void* workspace) {
  const dnnl::engine& engine = backend.engine();
  dnnl::stream& stream = backend.stream();
  DLB_CHECK(workspace != nullptr || op.workspace_bytes == 0,
            "onednn conv needs a workspace of plan.workspace_bytes() = {} bytes", op.workspace_bytes);
  memory scratchpad = scratchpad_memory(engine, workspace, op.scratchpad_offset, op.scratchpad_bytes);
  auto input = [&](const OpArg& arg, const dnnl::reorder& in, const void* ptr) {
    memory plain = wrap(arg.plain, engine, ptr);
    if (!arg.reordered) return plain;
    memory impl = wrap(arg.impl, engine, at_offset(workspace, arg.offset));
    in.execute(stream, with_scratchpad({{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, impl}}, scratchpad));
    return impl;
  };
  memory a_mem = input(op.a, op.a_in, a);
  memory b_mem = input(op.b, op.b_in, b);
  memory out_plain = wrap(op.out.plain, engine, out);
  const bool via_buffer = op.out.reordered || accumulate == Accumulate::add;
  memory out_mem = via_buffer ? wrap(op.out.impl, engine, at_offset(workspace, op.out.offset)) : out_plain;
  op.primitive.execute(
      stream,
      with_scratchpad({{op.a.arg_id, a_mem}, {op.b.arg_id, b_mem}, {op.out.arg_id, out_mem}}, scratchpad));
  if (via_buffer) {
    const dnnl::reorder& out_reorder = accumulate == Accumulate::add ? op.out_accumulate : op.out_overwrite;
    out_reorder.execute(stream,
                        with_scratchpad({{DNNL_ARG_FROM, out_mem}, {DNNL_ARG_TO, out_plain}}, scratchpad));
  }
  stream.wait();
}

void run_op(OneDnnBackend& backend, const ConvOp& op, const void* a, const void* b, void* out,
            Accumulate accumulate, void* workspace) {
  DNNL_CHECK(run_op_unchecked(backend, op, a, b, out, accumulate, workspace), "executing {}", op.impl);
}

}  // namespace

std::unique_ptr<ConvPlan> OneDnnBackend::plan_conv(const ConvGeometry& geometry) {
  return build_conv_plan(engine_, geometry, default_onednn_conv_strategy(geometry));
}

void OneDnnBackend::conv_forward(const ConvPlan& plan, const Tensor& x, const Tensor& w, Tensor& y,
                                 void* workspace) {
  const auto& p = as_onednn(plan);
  const ConvGeometry& g = p.geometry;
  check_conv_tensor(x, {g.batch, g.in_channels, g.in_h, g.in_w}, g.layout, "conv_forward x");
  check_conv_tensor(w, {g.out_channels, g.in_channels, g.kernel_h, g.kernel_w}, g.layout, "conv_forward w");
  check_conv_tensor(y, {g.batch, g.out_channels, g.out_h(), g.out_w()}, g.layout, "conv_forward y");
  run_op(*this, p.forward, x.data(), w.data(), y.data(), Accumulate::overwrite, workspace);
}

void OneDnnBackend::conv_backward_data(const ConvPlan& plan, const Tensor& dy, const Tensor& w, Tensor& dx,
                                       Accumulate accumulate, void* workspace) {
  const auto& p = as_onednn(plan);
  const ConvGeometry& g = p.geometry;
  check_conv_tensor(dy, {g.batch, g.out_channels, g.out_h(), g.out_w()}, g.layout, "conv_backward_data dy");
  check_conv_tensor(w, {g.out_channels, g.in_channels, g.kernel_h, g.kernel_w}, g.layout,
                    "conv_backward_data w");
  check_conv_tensor(dx, {g.batch, g.in_channels, g.in_h, g.in_w}, g.layout, "conv_backward_data dx");
  run_op(*this, p.backward_data, dy.data(), w.data(), dx.data(), accumulate, workspace);
}

void OneDnnBackend::conv_backward_filter(const ConvPlan& plan, const Tensor& x, const Tensor& dy, Tensor& dw,
                                         Accumulate accumulate, void* workspace) {
  const auto& p = as_onednn(plan);
  const ConvGeometry& g = p.geometry;
  check_conv_tensor(x, {g.batch, g.in_channels, g.in_h, g.in_w}, g.layout, "conv_backward_filter x");
  check_conv_tensor(dy, {g.batch, g.out_channels, g.out_h(), g.out_w()}, g.layout, "conv_backward_filter dy");
  check_conv_tensor(dw, {g.out_channels, g.in_channels, g.kernel_h, g.kernel_w}, g.layout,
                    "conv_backward_filter dw");
  run_op(*this, p.backward_weights, x.data(), dy.data(), dw.data(), accumulate, workspace);
}

}  // namespace onednn

OneDnnConvStrategy default_onednn_conv_strategy(const ConvGeometry& g) {
  // The rules distilled from the measurements at the top of this file. "pixels" is the output's N*P*Q,
  // the GEMM dimension a 1x1 convolution is made of.
  using F = OneDnnConvFormat;
  const int64_t pixels = g.batch * g.out_h() * g.out_w();
  const bool one_by_one = g.kernel_h == 1 && g.kernel_w == 1;
  if (g.layout == Layout::nhwc) {
    // NHWC activations go straight into oneDNN's nhwc kernels (weights blocked) except where the blocked
    // kernels are clearly faster: 3x3 with 64+ input channels, and 1x1 on small pixel counts.
    if (one_by_one) {
      const F f = pixels >= 3136 ? F::blocked_weights : F::blocked;
      return {f, f, f};
    }
    const F f = g.in_channels >= 64 ? F::blocked : F::blocked_weights;
    return {f, f, f};
  }
  // NCHW: plain NCHW runs oneDNN's im2col+GEMM kernels; blocked reorders into nChw8c for the jit kernels.
  if (one_by_one) {
    const F f = pixels > 3136 ? F::plain : F::blocked;
    return {f, f, F::plain};
  }
  // oneDNN's GEMM-based backward-weights kernel reduces over the batch between threads; with few input
  // channels (resnet20's 1- and 16-channel 3x3 layers) that went pathological at 2 threads on a busy machine
  // (seconds per call), so it is used only where it measured faster and has 64+ channels.
  return {F::blocked, F::blocked, pixels <= 3136 && g.in_channels >= 64 ? F::plain : F::blocked};
}

std::unique_ptr<ConvPlan> plan_onednn_conv(Backend& backend, const ConvGeometry& geometry,
                                           const OneDnnConvStrategy& strategy) {
  auto* b = dynamic_cast<onednn::OneDnnBackend*>(&backend);
  DLB_CHECK(b != nullptr, "plan_onednn_conv needs the onednn backend, got {}", backend.name());
  return onednn::build_conv_plan(b->engine(), geometry, strategy);
}

std::string describe_onednn_conv_plan(const ConvPlan& plan) {
  const auto& p = onednn::as_onednn(plan);
  auto one = [](const onednn::ConvOp& op) {
    return fmt::format("{}{}", op.impl,
                       op.a.reordered || op.b.reordered || op.out.reordered ? " +reorders" : "");
  };
  return fmt::format("fwd[{}]: {} | bwd_data[{}]: {} | bwd_weights[{}]: {}",
                     onednn_conv_format_name(p.strategy.forward), one(p.forward),
                     onednn_conv_format_name(p.strategy.backward_data), one(p.backward_data),
                     onednn_conv_format_name(p.strategy.backward_weights), one(p.backward_weights));
}

const char* onednn_conv_format_name(OneDnnConvFormat format) {
  switch (format) {
    case OneDnnConvFormat::plain:
      return "plain";
    case OneDnnConvFormat::blocked:
      return "blocked";
    case OneDnnConvFormat::blocked_weights:
      return "blocked_weights";
  }
  return "?";
}

}  // namespace dlbench
