// A CUDA convolution's plan: the descriptors (cuDNN's legacy API), the choice of what runs each direction
// (from the algorithm cache or a search, search.cc), the input's form (space_to_depth.cc), the forward
// with its output's statistics (statistics.cc), and its description for --per-layer.
//
// An estimate plan (estimate_conv) builds the same descriptors but searches nothing: a shape already in the
// cache states its choice's workspace, any other one the limit, which no search result can exceed. The cap
// is the honest bound that costs nothing; cuDNN's heuristic (Get*_v7) would be cheap too, but the timed
// search is free to pick a different algorithm with a larger workspace.
//
// Compute type: FP32 for FP32/FP16/BF16 data (cuDNN's PSEUDO_HALF / PSEUDO_BFLOAT16 configurations), FP64
// for FP64. Math type: FP32 data uses CUDNN_FMA_MATH unless TF32 is allowed (then the default, which lets
// cuDNN pick TF32 tensor cores); FP16/BF16 use tensor cores. Weights are [K, C, R, S] logically in the
// activations' layout, which is exactly cuDNN's filter format of that layout (NHWC: K, R, S, C).
// Accumulate::add is cuDNN's beta = 1.
#include <algorithm>
#include <mutex>

#include "backend/cuda/conv/conv_plan.h"

namespace dlbench::cuda::conv {

// FP64 has no graph engines here: the legacy API alone.
bool uses_graph_engines(const ConvGeometry& g, const CudaOptions& o) {
  return g.dtype != DType::f64 && o.conv_graph != KernelChoice::off;
}

ConvKey make_key(const ConvGeometry& g, const CudaBackend& backend) {
  const CudaOptions& o = backend.options();
  return {g.batch,
          g.in_channels,
          g.in_h,
          g.in_w,
          g.out_channels,
          g.kernel_h,
          g.kernel_w,
          g.stride_h,
          g.stride_w,
          g.pad_h,
          g.pad_w,
          static_cast<int64_t>(g.dtype),
          static_cast<int64_t>(g.layout),
          backend.allow_tf32() ? 1 : 0,
          static_cast<int64_t>(backend.conv_workspace_limit()),
          g.dtype == DType::f64 ? 0 : static_cast<int64_t>(o.conv_graph),
          g.accumulates_input_grad ? 1 : 0,
          uses_gemm(g, o) ? static_cast<int64_t>(o.conv_gemm) : 0};
}

// The math type a plan starts the search with (and keeps for FP32 without TF32).
cudnnMathType_t search_math(DType dtype, bool allow_tf32) {
  switch (dtype) {
    case DType::f32:
      return allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    case DType::f16:
    case DType::bf16:
      return CUDNN_TENSOR_OP_MATH;
    default:
      return CUDNN_DEFAULT_MATH;
  }
}

const char* math_name(cudnnMathType_t math) {
  switch (math) {
    case CUDNN_DEFAULT_MATH:
      return "default math";
    case CUDNN_TENSOR_OP_MATH:
      return "tensor op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
      return "tensor op + conversion";
    case CUDNN_FMA_MATH:
      return "fma";
  }
  return "?";
}

const char* forward_algo_name(int algo) {
  static const char* const names[] = {
      "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
      "WINOGRAD",      "WINOGRAD_NONFUSED"};
  return algo >= 0 && algo < 8 ? names[algo] : "?";
}

const char* backward_data_algo_name(int algo) {
  static const char* const names[] = {"ALGO_0",     "ALGO_1",   "FFT",
                                      "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  return algo >= 0 && algo < 6 ? names[algo] : "?";
}

const char* backward_filter_algo_name(int algo) {
  static const char* const names[] = {"ALGO_0",    "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED",
                                      "FFT_TILING"};
  return algo >= 0 && algo < 7 ? names[algo] : "?";
}

const CudaConvPlan& as_cuda_plan(const ConvPlan& plan) {
  auto* p = dynamic_cast<const CudaConvPlan*>(&plan);
  DLB_CHECK(p != nullptr, "convolution plan was not made by the cuda backend");
  return *p;
}

void check_geometry(const ConvGeometry& g) {
  check_conv_geometry(g);
  DLB_CHECK(is_float_dtype(g.dtype), "conv: dtype {} is not a float dtype", dtype_name(g.dtype));
  // Seen with cuDNN 9.19 on an H200: no FP64 NHWC backward-data algorithm at all.
  DLB_CHECK(g.dtype != DType::f64 || g.layout == Layout::nchw,
            "conv: FP64 convolutions need the NCHW layout (cuDNN has no FP64 NHWC backward-data algorithm)");
}

void set_conv_desc(cudnnConvolutionDescriptor_t desc, const ConvGeometry& g, cudnnMathType_t math) {
  const cudnnDataType_t compute = g.dtype == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      desc, checked_int(g.pad_h, "pad_h"), checked_int(g.pad_w, "pad_w"), checked_int(g.stride_h, "stride_h"),
      checked_int(g.stride_w, "stride_w"), 1, 1, CUDNN_CROSS_CORRELATION, compute));
  CUDNN_CHECK(cudnnSetConvolutionMathType(desc, math));
}

// The math type a direction executes with: what its algorithm was timed with, except that FP32 without
// TF32 stays on FMA whatever cuDNN reports.
cudnnMathType_t execution_math(const ConvGeometry& g, bool allow_tf32, cudnnMathType_t found) {
  if (g.dtype == DType::f32 && !allow_tf32) return CUDNN_FMA_MATH;
  return found;
}

// A plan with its descriptors set and checked, no algorithm chosen yet.
std::unique_ptr<CudaConvPlan> new_plan(const CudaBackend& backend, const ConvGeometry& g) {
  check_geometry(g);
  backend.activate();
  auto plan = std::make_unique<CudaConvPlan>(g);
  set_tensor_4d(plan->x_desc, g.dtype, g.layout, g.batch, g.in_channels, g.in_h, g.in_w);
  set_tensor_4d(plan->y_desc, g.dtype, g.layout, g.batch, g.out_channels, g.out_h(), g.out_w());
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(plan->w_desc, cudnn_dtype(g.dtype), cudnn_format(g.layout),
                                         checked_int(g.out_channels, "K"), checked_int(g.in_channels, "C"),
                                         checked_int(g.kernel_h, "R"), checked_int(g.kernel_w, "S")));
  {  // cuDNN must agree on the output shape
    int n = 0, c = 0, h = 0, w = 0;
    set_conv_desc(plan->forward_desc, g, search_math(g.dtype, backend.allow_tf32()));
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(plan->forward_desc, plan->x_desc, plan->w_desc, &n, &c,
                                                      &h, &w));
    DLB_CHECK(n == g.batch && c == g.out_channels && h == g.out_h() && w == g.out_w(),
              "conv: cuDNN's output {}x{}x{}x{} differs from the geometry's {}x{}x{}x{}", n, c, h, w, g.batch,
              g.out_channels, g.out_h(), g.out_w());
  }
  set_conv_desc(plan->backward_data_desc, g, search_math(g.dtype, backend.allow_tf32()));
  set_conv_desc(plan->backward_filter_desc, g, search_math(g.dtype, backend.allow_tf32()));
  return plan;
}

// Sets the legacy algorithm of direction `d` to execute: its math type on the plan's descriptor of that
// direction, and its exact workspace under it.
void set_execution(const CudaBackend& backend, CudaConvPlan& plan, ConvDirection d, AlgoChoice& a) {
  const ConvGeometry& g = plan.geometry;
  a.math = execution_math(g, backend.allow_tf32(), a.math);
  switch (d) {
    case ConvDirection::forward:
      CUDNN_CHECK(cudnnSetConvolutionMathType(plan.forward_desc, a.math));
      CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
          backend.cudnn(), plan.x_desc, plan.w_desc, plan.forward_desc, plan.y_desc,
          static_cast<cudnnConvolutionFwdAlgo_t>(a.algo), &a.workspace));
      break;
    case ConvDirection::backward_data:
      CUDNN_CHECK(cudnnSetConvolutionMathType(plan.backward_data_desc, a.math));
      CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
          backend.cudnn(), plan.w_desc, plan.y_desc, plan.backward_data_desc, plan.x_desc,
          static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algo), &a.workspace));
      break;
    case ConvDirection::backward_filter:
      CUDNN_CHECK(cudnnSetConvolutionMathType(plan.backward_filter_desc, a.math));
      CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
          backend.cudnn(), plan.x_desc, plan.y_desc, plan.backward_filter_desc, plan.w_desc,
          static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algo), &a.workspace));
      break;
  }
}

// Sets the chosen algorithms to execute (set_execution) and builds the chosen graph engines' plans.
void finish(const CudaBackend& backend, CudaConvPlan& plan) {
  ConvChoice& c = plan.choice;
  const ConvGeometry& g = plan.geometry;
  for (ConvDirection d : kDirections) set_execution(backend, plan, d, direction_choice(c, d));
  // The chosen graph engines' plans, shared through the backend by the layers of this shape. An engine
  // cuDNN no longer builds (a stored choice) leaves its direction on the legacy algorithm.
  for (ConvDirection d : kDirections) {
    AlgoChoice& a = direction_choice(c, d);
    std::shared_ptr<const GraphPlan>& graph_plan = plan.graph_plans[static_cast<size_t>(d)];
    graph_plan = nullptr;
    if (!a.engine) continue;
    const ConvKey shape = make_key(g, backend);
    std::vector<int64_t> plan_key(shape.begin(), shape.end());
    plan_key.insert(plan_key.end(), {static_cast<int64_t>(d), a.engine->index});
    for (const auto& [type, value] : a.engine->knobs) plan_key.insert(plan_key.end(), {type, value});
    const GraphEngine engine = *a.engine;
    graph_plan = backend.graph_plan(plan_key, [&]() -> std::unique_ptr<GraphPlan> {
      try {
        const ConvGraph graph(backend.cudnn(), g, d);
        return GraphPlan::build(graph, engine);
      } catch (const Error&) {
        return nullptr;
      }
    });
    if (!graph_plan) a.engine.reset();
  }
}

// An estimate plan's workspaces before any search: the limit, which no search result can exceed.
void assume_workspace_limit(CudaConvPlan& p, size_t limit) {
  p.choice.forward.workspace = p.choice.backward_data.workspace = p.choice.backward_filter.workspace = limit;
}

}  // namespace dlbench::cuda::conv

namespace dlbench::cuda {

using namespace conv;

std::unique_ptr<ConvPlan> CudaBackend::estimate_conv(const ConvGeometry& g) {
  auto plan = new_plan(*this, g);
  const std::optional<nlohmann::json> entry = algorithms().find(stored_choice_key(g, *this));
  if (const std::optional<ConvChoice> choice = entry ? choice_from_json(*entry) : std::nullopt) {
    // A run plan would take this choice: the same sizes.
    plan->choice = *choice;
    plan->from_cache = true;
    finish(*this, *plan);
  } else {
    assume_workspace_limit(*plan, conv_workspace_limit());
  }
  // A run plan may convert its input (2x2 blocks): then it needs the converted buffers besides its
  // workspace, at most the largest form's.
  const std::vector<InputForm> forms = input_forms(g, options_);
  if (!forms.empty()) {
    auto converted_bytes = [](const InputForm& f) {
      return tensor_bytes(x_dims(f.inner), f.inner.dtype) + tensor_bytes(w_dims(f.inner), f.inner.dtype);
    };
    const auto biggest = std::max_element(
        forms.begin(), forms.end(),
        [&](const InputForm& a, const InputForm& b) { return converted_bytes(a) < converted_bytes(b); });
    plan->inner = new_plan(*this, biggest->inner);
    assume_workspace_limit(*plan->inner, conv_workspace_limit());
    plan->form = *biggest;
  }
  return plan;
}

std::unique_ptr<ConvPlan> CudaBackend::plan_conv(const ConvGeometry& g) {
  std::unique_ptr<CudaConvPlan> plan = searched_plan(*this, g);
  take_input_form(*this, g, *plan);
  if (!plan->inner && statistics_shape(g, options_))
    plan->statistics_plan = choose_statistics_engine(*this, *plan);
  return plan;
}

}  // namespace dlbench::cuda

namespace dlbench {

std::string describe_cuda_conv_plan(const ConvPlan& plan) {
  const auto& p = cuda::conv::as_cuda_plan(plan);
  if (p.inner) {
    const ConvGeometry& g = p.geometry;
    const ConvGeometry& in = p.inner->geometry;
    return fmt::format("input as 2x2 blocks {}x{}x{} -> {}x{}x{}, {}x{} stride 1: {}", g.in_channels, g.in_h,
                       g.in_w, in.in_channels, in.in_h, in.in_w, in.kernel_h, in.kernel_w,
                       describe_cuda_conv_plan(*p.inner));
  }
  const auto& c = p.choice;
  auto one = [&](cuda::ConvDirection d, const char* name, const cuda::conv::AlgoChoice& a) {
    if (a.gemm) {
      // FP32 without TF32 executes cuDNN on FMA (execution_math), and the GEMM in plain FP32.
      const bool tf32 = p.geometry.dtype == DType::f32 && p.choice.forward.math != CUDNN_FMA_MATH;
      return fmt::format("cuBLAS GEMM ({}, 0 B, {:.3f} ms; legacy {} {:.3f} ms)",
                         p.geometry.dtype != DType::f32 ? "tensor op"
                         : tf32                         ? "tf32"
                                                        : "fma",
                         a.gemm_ms, name, a.legacy_ms);
    }
    if (const cuda::GraphPlan* graph = p.graph_plan(d)) {
      return fmt::format("graph {} ({}, {} B, {:.3f} ms; legacy {} {:.3f} ms)",
                         cuda::engine_name(graph->engine()),
                         graph->notes().tensor_cores ? "tensor op" : "no tensor cores",
                         graph->workspace_bytes(), a.engine_ms, name, a.legacy_ms);
    }
    // The time back to back (an older algorithm cache's legacy-only entries: cudnnFind's).
    return fmt::format("{} ({}, {} B, {:.3f} ms)", name, cuda::conv::math_name(a.math), a.workspace,
                       a.run_ms());
  };
  const std::string statistics =
      p.statistics_plan ? fmt::format(" | fwd with output statistics: graph {} ({} B, {:.3f} ms{})",
                                      cuda::engine_name(p.statistics_plan->engine()),
                                      p.statistics_plan->workspace_bytes(), p.statistics_ms,
                                      p.statistics_plan->notes().nondeterministic ? ", nondeterministic" : "")
                        : std::string();
  return fmt::format(
      "fwd: {}{} | bwd_data{}: {} | bwd_filter: {}{}",
      one(cuda::ConvDirection::forward, cuda::conv::forward_algo_name(c.forward.algo), c.forward), statistics,
      p.geometry.accumulates_input_grad ? " (adds to dx)" : "",
      one(cuda::ConvDirection::backward_data, cuda::conv::backward_data_algo_name(c.backward_data.algo),
          c.backward_data),
      one(cuda::ConvDirection::backward_filter, cuda::conv::backward_filter_algo_name(c.backward_filter.algo),
          c.backward_filter),
      p.from_cache ? " [cached search]" : "");
}

}  // namespace dlbench
