// A CUDA convolution's calls: forward, backward data and backward filter, each on what its plan chose —
// cuBLAS's GEMM, a graph-API engine where its tensors and Accumulate allow, else the legacy algorithm — and
// through the inner plan where the input runs in another form (space_to_depth.cc).
#include "backend/cuda/conv/conv_plan.h"

namespace dlbench::cuda::conv {

// Whether the graph plan of `direction` runs this call: there is one, its tensors are aligned as the
// graph declares them, and the call adds to its output exactly when the graph does (graph_adds_to_output).
const GraphPlan* graph_plan_for(const CudaConvPlan& p, ConvDirection direction,
                                std::initializer_list<const void*> tensors, Accumulate accumulate) {
  const GraphPlan* plan = p.graph_plan(direction);
  if (!plan || (accumulate == Accumulate::add) != graph_adds_to_output(p.geometry, direction)) return nullptr;
  for (const void* t : tensors)
    if (reinterpret_cast<uintptr_t>(t) % GraphPlan::kAlignment != 0) return nullptr;
  return plan;
}

namespace {

void check_workspace(const CudaConvPlan& p, const AlgoChoice& a, const void* workspace, const char* op) {
  DLB_CHECK(a.workspace == 0 || workspace != nullptr, "{}: the plan needs a workspace of {} bytes", op,
            p.workspace_bytes());
}

}  // namespace

// One call of direction `d` of `p` on its legacy algorithm `a`. x, w, y in the graphs' order (forward: x,
// w, y; backward data: dx, w, dy; backward filter: x, dw, dy); the output is scaled by s.beta().
cudnnStatus_t run_legacy(cudnnHandle_t handle, const CudaConvPlan& p, ConvDirection d, const AlgoChoice& a,
                         void* x, void* w, void* y, void* workspace, const Scaling& s) {
  switch (d) {
    case ConvDirection::forward:
      return cudnnConvolutionForward(handle, s.alpha(), p.x_desc, x, p.w_desc, w, p.forward_desc,
                                     static_cast<cudnnConvolutionFwdAlgo_t>(a.algo), workspace, a.workspace,
                                     s.beta(), p.y_desc, y);
    case ConvDirection::backward_data:
      return cudnnConvolutionBackwardData(handle, s.alpha(), p.w_desc, w, p.y_desc, y, p.backward_data_desc,
                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algo), workspace,
                                          a.workspace, s.beta(), p.x_desc, x);
    case ConvDirection::backward_filter:
      return cudnnConvolutionBackwardFilter(handle, s.alpha(), p.x_desc, x, p.y_desc, y,
                                            p.backward_filter_desc,
                                            static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algo), workspace,
                                            a.workspace, s.beta(), p.w_desc, w);
  }
  return CUDNN_STATUS_BAD_PARAM;
}

// Runs direction `d` of `p` (x, w, y as run_legacy takes them): on cuBLAS's GEMM where the search chose
// it, on its graph engine where graph_plan_for allows, else on its legacy algorithm, adding to the output
// when `accumulate`.
void run_direction(const CudaBackend& backend, const CudaConvPlan& p, ConvDirection d, void* x, void* w,
                   void* y, Accumulate accumulate, void* workspace, const char* op) {
  if (direction_choice(p.choice, d).gemm) {
    DLB_CHECK(gathered_pixels_bytes(p.geometry) == 0 || workspace != nullptr,
              "{}: the plan needs a workspace of {} bytes", op, p.workspace_bytes());
    backend.activate();
    CUBLAS_CHECK(run_gemm(backend, p.geometry, d, x, w, y, accumulate == Accumulate::add, workspace));
    return;
  }
  if (const GraphPlan* graph = graph_plan_for(p, d, {x, w, y}, accumulate)) {
    DLB_CHECK(graph->workspace_bytes() == 0 || workspace != nullptr,
              "{}: the plan needs a workspace of {} bytes", op, p.workspace_bytes());
    backend.activate();
    CUDNN_CHECK(graph->execute(x, w, y, workspace));
    return;
  }
  const AlgoChoice& a = direction_choice(p.choice, d);
  check_workspace(p, a, workspace, op);
  backend.activate();
  const Scaling s(p.geometry.dtype, 1.0, accumulate == Accumulate::add ? 1.0 : 0.0);
  CUDNN_CHECK(run_legacy(backend.cudnn(), p, d, a, x, w, y, workspace, s));
}

}  // namespace dlbench::cuda::conv

namespace dlbench::cuda {

using namespace conv;

void CudaBackend::conv_forward(const ConvPlan& plan, const Tensor& x, const Tensor& w, Tensor& y,
                               void* workspace) {
  const auto& p = as_cuda_plan(plan);
  const ConvGeometry& g = p.geometry;
  const char* op = "conv_forward";
  check_activation(op, "x", x, x_dims(g), g.dtype, g.layout);
  check_activation(op, "w", w, w_dims(g), g.dtype, g.layout);
  check_activation(op, "y", y, y_dims(g), g.dtype, g.layout);
  if (p.inner) {
    const ConvGeometry& in = p.inner->geometry;
    const InnerBuffers b = inner_buffers(p, workspace, op);
    activate();
    to_inner_input(g, p.form, x.data(), b.x, stream_);
    to_inner_filter(g, p.form, w.data(), b.w, stream_);
    const Tensor xi(b.x, x_dims(in), g.dtype, g.layout, device()),
        wi(b.w, w_dims(in), g.dtype, g.layout, device());
    conv_forward(*p.inner, xi, wi, y, b.inner_workspace);
    return;
  }
  run_direction(*this, p, ConvDirection::forward, x.data(), w.data(), y.data(), Accumulate::overwrite,
                workspace, op);
}

void CudaBackend::conv_backward_data(const ConvPlan& plan, const Tensor& dy, const Tensor& w, Tensor& dx,
                                     Accumulate accumulate, void* workspace) {
  const auto& p = as_cuda_plan(plan);
  const ConvGeometry& g = p.geometry;
  const char* op = "conv_backward_data";
  check_activation(op, "dy", dy, y_dims(g), g.dtype, g.layout);
  check_activation(op, "w", w, w_dims(g), g.dtype, g.layout);
  check_activation(op, "dx", dx, x_dims(g), g.dtype, g.layout);
  if (p.inner) {
    // The inner input's gradient, then back into dx.
    const ConvGeometry& in = p.inner->geometry;
    const InnerBuffers b = inner_buffers(p, workspace, op);
    activate();
    to_inner_filter(g, p.form, w.data(), b.w, stream_);
    const Tensor wi(b.w, w_dims(in), g.dtype, g.layout, device());
    Tensor dxi(b.x, x_dims(in), g.dtype, g.layout, device());
    conv_backward_data(*p.inner, dy, wi, dxi, Accumulate::overwrite, b.inner_workspace);
    from_inner_input_grad(g, p.form, b.x, dx.data(), accumulate == Accumulate::add, stream_);
    return;
  }
  run_direction(*this, p, ConvDirection::backward_data, dx.data(), w.data(), dy.data(), accumulate, workspace,
                op);
}

void CudaBackend::conv_backward_filter(const ConvPlan& plan, const Tensor& x, const Tensor& dy, Tensor& dw,
                                       Accumulate accumulate, void* workspace) {
  const auto& p = as_cuda_plan(plan);
  const ConvGeometry& g = p.geometry;
  const char* op = "conv_backward_filter";
  check_activation(op, "x", x, x_dims(g), g.dtype, g.layout);
  check_activation(op, "dy", dy, y_dims(g), g.dtype, g.layout);
  check_activation(op, "dw", dw, w_dims(g), g.dtype, g.layout);
  if (p.inner) {
    // The inner filter's gradient from the inner input, then back into dw.
    const ConvGeometry& in = p.inner->geometry;
    const InnerBuffers b = inner_buffers(p, workspace, op);
    activate();
    to_inner_input(g, p.form, x.data(), b.x, stream_);
    const Tensor xi(b.x, x_dims(in), g.dtype, g.layout, device());
    Tensor dwi(b.w, w_dims(in), g.dtype, g.layout, device());
    conv_backward_filter(*p.inner, xi, dy, dwi, Accumulate::overwrite, b.inner_workspace);
    from_inner_filter_grad(g, p.form, b.w, dw.data(), accumulate == Accumulate::add, stream_);
    return;
  }
  run_direction(*this, p, ConvDirection::backward_filter, x.data(), dw.data(), dy.data(), accumulate,
                workspace, op);
}

}  // namespace dlbench::cuda
