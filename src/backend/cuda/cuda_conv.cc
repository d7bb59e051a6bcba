// Convolution on cuDNN's legacy API: cudnnConvolutionForward / BackwardData / BackwardFilter.
//
// plan_conv builds the descriptors and picks what runs each direction by timing the candidates back to back
// (time_calls: as the step's CUDA graph runs them) on scratch buffers allocated for the search and freed
// after it: cuBLAS's GEMM where the shape is one (below), the legacy algorithms cuDNN's heuristic lists
// (search_legacy), then the graph-API engines (below). A candidate far slower than the fastest so far is
// given up after one call. A search costs tens to hundreds of milliseconds, and a ResNet repeats a handful
// of shapes dozens of times, so its result is kept in the launch's algorithm cache (backend/tuning/) keyed
// by everything that decides it (geometry, dtype, layout, the TF32 switch, the options, the GPU's model):
// each distinct shape is searched once, and the ranks of one process (--gpus N) run the same choice. Of
// the candidates whose workspace fits the backend's conv_workspace_limit() (--conv-workspace-mb), the first
// in a fixed order within the timing noise of the fastest wins (tuning/pick.h); workspace_bytes() is the
// largest of the three chosen workspaces.
//
// An estimate plan (estimate_conv) builds the same descriptors but searches nothing: a shape already
// searched states its cached choice's workspace, any other one the limit, which no search result can
// exceed. The cap is the honest bound that costs nothing; cuDNN's heuristic (Get*_v7) would be cheap too,
// but the timed search is free to pick a different algorithm with a larger workspace.
//
// Compute type: FP32 for FP32/FP16/BF16 data (cuDNN's PSEUDO_HALF / PSEUDO_BFLOAT16 configurations), FP64
// for FP64. Math type: FP32 data uses CUDNN_FMA_MATH unless TF32 is allowed (then the default, which lets
// cuDNN pick TF32 tensor cores); FP16/BF16 use tensor cores. Weights are [K, C, R, S] logically in the
// activations' layout, which is exactly cuDNN's filter format of that layout (NHWC: K, R, S, C).
// Accumulate::add is cuDNN's beta = 1.
//
// Input as 2x2 blocks (space-to-depth; --conv-space-to-depth auto, the default; off; force): a
// stride-2 convolution over C channels is a stride-1 convolution over the 2x2 blocks of its input seen as
// 4C channels (padded to a vector), with a kernel of ceil((k + pad % 2) / 2) blocks (backend/conv_blocks.h
// derives it): the stem's 7x7 over 3 channels becomes a 4x4 over 16 (FP16) or 12 (TF32) on 115x115
// blocks, 1.7x the multiply-adds on tensor-core-sized channels. The filter is converted the same way each
// call (K images of 7x7 pixels) and the gradients go back by the transpose (space_to_depth.cu).
//
// plan_conv plans the 2x2-block form of a shape's input, where it is allowed, besides the input as it is and
// keeps the fastest for the forward and filter gradient a layer runs each step, counting the conversions of
// the input (timed); another form must win by 3%. Such a plan converts x and w into the workspace before each
// call and takes the gradients back after it. "force" always converts where it can (tests).
//
// Graph-API engines (--conv-graph auto, the default): after the legacy search, each direction is also
// built as a one-operation graph (cudnn_graph.h) and the engines cuDNN's heuristics rank first for it are
// timed on the same clock. An engine that beats the fastest legacy algorithm runs instead —
// except when a tensor is not aligned as the graph declares, or a call's Accumulate is not the one the plan
// was made for. The backward data of a convolution whose input gradient accumulates (a residual block's
// first convolution: ConvGeometry::accumulates_input_grad) is searched with beta = 1, the legacy algorithm
// too: engines add in their epilogue, where legacy algorithms took one more pass over dx (0.3-0.5 ms per
// layer at batch 256, TF32, measured by --per-layer on an H200). "off" keeps the legacy API alone; "force"
// takes the fastest engine whatever the legacy time (tests). The mode is part of the choice's key, in the
// process and in --algorithm-cache.
//
// 1x1 convolutions as GEMMs (--conv-gemm auto, the default; off; force): in
// NHWC a 1x1 convolution of stride 1 without padding is a matrix product over the M = N*H*W pixels,
// y[M, K] = x[M, C] w[K, C]^T, dx[M, C] = dy[M, K] w[K, C], dw[K, C] = dy[M, K]^T x[M, C] (the filter is
// KRSC = [K, C]); of stride s, the same over the pixels at the stride, gathered into the workspace first
// (the input gradient: computed there, then scattered into dx). cuDNN's FP32 NHWC backward data (no tensor
// cores) ran ResNet-50's 1x1 convolutions at 4-10 TFLOP/s on an H200 — 282 ms of a 478 ms step, 129 ms in
// the one of stride 2 at 56x56 — where cuBLAS's FP32 GEMM reaches 51. cuBLAS's GEMM is then one more
// candidate of each direction, timed back to back after the engines (with its gathers), and runs where it
// is fastest ("force": wherever the shape allows). It adds to its output for any call (BLAS's beta). On an
// H200 it won every direction of every ResNet-50 1x1 convolution in FP32 (the stride-2 one at 56x56: 2.0
// against 129 ms backward data), which made FP32 NHWC 1.40x faster than NCHW (1,437 against 1,029 img/s,
// same call) and NHWC FP32's default; TF32/FP16 steps moved by 0.1%
// (bench/results/2026-11-30-gpu-2xh200-accumulating-dgrad).
//
// The output's statistics (--conv-statistics auto, the default; off; force): a convolution planned
// with ConvGeometry::output_statistics, where a batch norm reads its output, also searches its forward as
// a graph with a genstats node (per-channel sums of y and y^2 in the epilogue) and runs that in training
// where it costs less than the statistics pass it saves (the section "the forward with its output's
// statistics" below; FP16 on an H200: most of ResNet-50's shapes, 4% of the step).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <optional>
#include <vector>

#include "backend/conv_blocks.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cudnn_graph.h"
#include "backend/cuda/kernels.h"
#include "backend/tuning/algorithm_cache.h"
#include "backend/tuning/cuda_timing.h"
#include "backend/tuning/pick.h"
#include "core/log.h"

namespace dlbench {
namespace cuda {
namespace {

// One direction's choice: the legacy algorithm, the graph-API engine or cuBLAS's GEMM that runs instead
// where it timed faster, with their times back to back (time_ms: the legacy algorithm's; an algorithm cache
// written before dlbench timed legacy algorithms itself holds cudnnFind's there).
struct AlgoChoice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
  float time_ms = 0;
  std::optional<GraphEngine> engine;
  float engine_ms = 0, legacy_ms = 0;
  bool gemm = false;  // cuBLAS's GEMM runs this direction (a 1x1 convolution; see the top of this file)
  float gemm_ms = 0;
  // What this direction costs per call: what runs — the GEMM, the engine, else the legacy algorithm.
  float run_ms() const { return gemm ? gemm_ms : engine ? engine_ms : (legacy_ms > 0 ? legacy_ms : time_ms); }
};

struct ConvChoice {
  AlgoChoice forward, backward_data, backward_filter;
};

// How many of the engines cuDNN's heuristics rank first are timed per direction. The rest are rarely
// faster and each costs a plan (docs/PERFORMANCE.md: all of them bought no faster step and cost start-up).
constexpr size_t kGraphCandidates = 8;

// FP64 has no graph engines here: the legacy API alone.
bool uses_graph_engines(const ConvGeometry& g, const CudaOptions& o) {
  return g.dtype != DType::f64 && o.conv_graph != KernelChoice::off;
}

// Whether `g` is a matrix product cuBLAS can run: NHWC, 1x1, one stride for both axes, no padding, not
// FP64, and every dimension within cuBLAS's int.
bool gemm_shape(const ConvGeometry& g) {
  const int64_t pixels = g.batch * g.out_h() * g.out_w();
  return g.layout == Layout::nhwc && g.kernel_h == 1 && g.kernel_w == 1 && g.stride_h == g.stride_w &&
         g.pad_h == 0 && g.pad_w == 0 && g.dtype != DType::f64 && pixels <= INT32_MAX &&
         g.in_channels <= INT32_MAX && g.out_channels <= INT32_MAX;
}

// The workspace a strided GEMM convolution gathers its input's (or input gradient's) pixels into.
size_t gathered_pixels_bytes(const ConvGeometry& g) {
  if (g.stride_h == 1) return 0;
  return static_cast<size_t>(g.batch * g.out_h() * g.out_w() * g.in_channels) * dtype_size(g.dtype);
}

// Whether the search of `g` times cuBLAS's GEMM.
bool uses_gemm(const ConvGeometry& g, const CudaOptions& o) {
  return o.conv_gemm != KernelChoice::off && gemm_shape(g);
}

// A shape's graph-API plans in the backend's table (CudaBackend::graph_plan): the geometry, dtype, layout,
// the TF32 switch, the workspace limit, the graph-engine and GEMM modes and whether the input gradient
// accumulates (the backward data is searched with beta = 1 then).
using ConvKey = std::array<int64_t, 18>;

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

// The key of a shape's choice in the algorithm cache (backend/tuning/algorithm_cache.h): everything the
// search result depends on — the geometry, dtype, layout, the TF32 switch, the workspace limit, the
// options that decide the candidates, whether the input gradient accumulates — and the GPU's model. Not
// the GPU itself: with --gpus N, the ranks' threads search the same shapes at the same time, and the
// first result stored is the one every rank runs, so all ranks run the same kernels.
std::string stored_choice_key(const ConvGeometry& g, CudaBackend& backend) {
  const CudaOptions& o = backend.options();
  const std::optional<DeviceMemory> device = backend.device_memory();
  return fmt::format("cudnn-conv {} cudnn{} n{} c{} {}x{} k{} {}x{} s{}x{} p{}x{} {} {} tf32:{} ws:{}",
                     device ? device->name : "?", cudnnGetVersion(), g.batch, g.in_channels, g.in_h, g.in_w,
                     g.out_channels, g.kernel_h, g.kernel_w, g.stride_h, g.stride_w, g.pad_h, g.pad_w,
                     dtype_name(g.dtype), layout_name(g.layout), backend.allow_tf32() ? 1 : 0,
                     backend.conv_workspace_limit()) +
         (!uses_graph_engines(g, o)             ? ""
          : o.conv_graph == KernelChoice::force ? " graph:force"
                                                : " graph:auto") +
         (g.accumulates_input_grad ? " dx:add" : "") +
         (!uses_gemm(g, o)                     ? ""
          : o.conv_gemm == KernelChoice::force ? " gemm:force"
                                               : " gemm:auto");
}

// A choice as the cache holds it, per direction: {"algo", "math", "ms" (the legacy algorithm's time back to
// back), "engine": {"index", "knobs": [[type, value], ...]} or null, "engine_ms", "gemm", "gemm_ms"}.
// Workspaces are not stored: finish() asks cuDNN for them.
nlohmann::json engine_to_json(const std::optional<GraphEngine>& engine) {
  if (!engine) return nullptr;
  nlohmann::json knobs = nlohmann::json::array();
  for (const auto& [type, value] : engine->knobs) knobs.push_back({type, value});
  return {{"index", engine->index}, {"knobs", knobs}};
}

// Nullopt (no engine) for null; throws nlohmann::json's exceptions for a malformed value.
std::optional<GraphEngine> engine_from_json(const nlohmann::json& j) {
  if (j.is_null()) return std::nullopt;
  GraphEngine e{j.at("index").get<int64_t>(), {}};
  for (const auto& knob : j.at("knobs"))
    e.knobs.emplace_back(knob.at(0).get<int64_t>(), knob.at(1).get<int64_t>());
  return e;
}

constexpr const char* kDirectionKeys[] = {"forward", "backward_data", "backward_filter"};

nlohmann::json choice_to_json(const ConvChoice& c) {
  nlohmann::json j;
  const AlgoChoice* directions[] = {&c.forward, &c.backward_data, &c.backward_filter};
  for (size_t d = 0; d < 3; ++d) {
    const AlgoChoice& a = *directions[d];
    j[kDirectionKeys[d]] = {{"algo", a.algo},           {"math", static_cast<int>(a.math)},
                            {"ms", a.legacy_ms},        {"engine", engine_to_json(a.engine)},
                            {"engine_ms", a.engine_ms}, {"gemm", a.gemm},
                            {"gemm_ms", a.gemm_ms}};
  }
  return j;
}

// The choice an entry holds; nullopt when it is not one (the cache then forgets it).
std::optional<ConvChoice> choice_from_json(const nlohmann::json& j) {
  try {
    ConvChoice c;
    AlgoChoice* directions[] = {&c.forward, &c.backward_data, &c.backward_filter};
    for (size_t d = 0; d < 3; ++d) {
      const nlohmann::json& e = j.at(kDirectionKeys[d]);
      AlgoChoice& a = *directions[d];
      a.algo = e.at("algo").get<int>();
      a.math = static_cast<cudnnMathType_t>(e.at("math").get<int>());
      a.time_ms = a.legacy_ms = e.at("ms").get<float>();
      a.engine = engine_from_json(e.at("engine"));
      a.engine_ms = e.at("engine_ms").get<float>();
      a.gemm = e.at("gemm").get<bool>();
      a.gemm_ms = e.at("gemm_ms").get<float>();
    }
    return c;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
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

// The form a convolution's input (and filter) take for the convolution that runs (see the top of this file):
// as they are, or as 2x2 blocks of pixels (space-to-depth: a stride-2 convolution becomes a stride-1 one
// over 4x the channels).
struct InputForm {
  enum Kind : int64_t { as_is = 0, blocks = 2 };
  Kind kind = as_is;
  ConvGeometry inner;  // the convolution that runs (kind != as_is)
  // blocks: where the input's and the filter's blocks start (space_to_depth2's offsets)
  int64_t x_off_h = 0, x_off_w = 0, w_off_h = 0, w_off_w = 0;
};

// Byte offsets in a workspace are kept 256-aligned, as cuDNN's allocations are.
size_t aligned_bytes(size_t bytes) { return (bytes + 255) / 256 * 256; }

class CudaConvPlan final : public ConvPlan {
 public:
  explicit CudaConvPlan(const ConvGeometry& g) : ConvPlan(g) {}
  size_t workspace_bytes() const override {
    if (inner) return inner_x_bytes() + inner_w_bytes() + inner->workspace_bytes();
    size_t bytes = std::max(
        {choice.forward.workspace, choice.backward_data.workspace, choice.backward_filter.workspace});
    if (choice.forward.gemm || choice.backward_data.gemm || choice.backward_filter.gemm)
      bytes = std::max(bytes, gathered_pixels_bytes(geometry));
    for (const auto& plan : graph_plans)
      if (plan) bytes = std::max(bytes, plan->workspace_bytes());
    if (statistics_plan) bytes = std::max(bytes, statistics_plan->workspace_bytes());
    return bytes;
  }
  // The graph-API plan `direction` runs on, or null (the legacy algorithm).
  const GraphPlan* graph_plan(ConvDirection direction) const {
    return graph_plans[static_cast<size_t>(direction)].get();
  }
  // With an inner plan, the workspace holds its input (or input gradient), then its filter (or filter
  // gradient), then its own workspace.
  size_t inner_x_bytes() const {
    const ConvGeometry& p = inner->geometry;
    return aligned_bytes(static_cast<size_t>(p.batch * p.in_channels * p.in_h * p.in_w) *
                         dtype_size(p.dtype));
  }
  size_t inner_w_bytes() const {
    const ConvGeometry& p = inner->geometry;
    return aligned_bytes(static_cast<size_t>(p.out_channels * p.in_channels * p.kernel_h * p.kernel_w) *
                         dtype_size(p.dtype));
  }

  TensorDescriptor x_desc, y_desc;
  FilterDescriptor w_desc;
  // One convolution descriptor per direction: each carries the math type its algorithm was timed with.
  ConvolutionDescriptor forward_desc, backward_data_desc, backward_filter_desc;
  ConvChoice choice;
  // Per direction (ConvDirection's order): the execution plan of the chosen graph engine, if any.
  std::array<std::shared_ptr<const GraphPlan>, 3> graph_plans;
  bool from_cache = false;
  // The plan of this convolution on its input in another form (2x2 blocks: `form`),
  // when that runs faster (see the top of this file); the calls then go there.
  std::unique_ptr<CudaConvPlan> inner;
  InputForm form;
  // The forward with its output's statistics (ConvGeometry::output_statistics), where an engine for it won
  // (choose_statistics_engine), and its time back to back.
  std::shared_ptr<const GraphPlan> statistics_plan;
  float statistics_ms = 0;
};

const CudaConvPlan& as_cuda_plan(const ConvPlan& plan) {
  auto* p = dynamic_cast<const CudaConvPlan*>(&plan);
  DLB_CHECK(p != nullptr, "convolution plan was not made by the cuda backend");
  return *p;
}

void check_geometry(const ConvGeometry& g) {
  DLB_CHECK(g.batch > 0 && g.in_channels > 0 && g.in_h > 0 && g.in_w > 0 && g.out_channels > 0,
            "conv: sizes must be positive (batch {}, in_channels {}, in {}x{}, out_channels {})", g.batch,
            g.in_channels, g.in_h, g.in_w, g.out_channels);
  DLB_CHECK(
      g.kernel_h > 0 && g.kernel_w > 0 && g.stride_h > 0 && g.stride_w > 0 && g.pad_h >= 0 && g.pad_w >= 0,
      "conv: kernel {}x{}, stride {}x{}, pad {}x{} are invalid", g.kernel_h, g.kernel_w, g.stride_h,
      g.stride_w, g.pad_h, g.pad_w);
  DLB_CHECK(g.in_h + 2 * g.pad_h >= g.kernel_h && g.in_w + 2 * g.pad_w >= g.kernel_w,
            "conv: kernel {}x{} is larger than the padded input {}x{}", g.kernel_h, g.kernel_w,
            g.in_h + 2 * g.pad_h, g.in_w + 2 * g.pad_w);
  DLB_CHECK(is_float_dtype(g.dtype), "conv: dtype {} is not a float dtype", dtype_name(g.dtype));
  // Seen with cuDNN 9.19 on an H200: no FP64 NHWC backward-data algorithm at all.
  DLB_CHECK(g.dtype != DType::f64 || g.layout == Layout::nchw,
            "conv: FP64 convolutions need the NCHW layout (cuDNN has no FP64 NHWC backward-data algorithm)");
}

std::vector<int64_t> x_dims(const ConvGeometry& g) { return {g.batch, g.in_channels, g.in_h, g.in_w}; }
std::vector<int64_t> w_dims(const ConvGeometry& g) {
  return {g.out_channels, g.in_channels, g.kernel_h, g.kernel_w};
}
std::vector<int64_t> y_dims(const ConvGeometry& g) { return {g.batch, g.out_channels, g.out_h(), g.out_w()}; }

size_t tensor_bytes(const std::vector<int64_t>& dims, DType dtype) {
  size_t n = 1;
  for (int64_t d : dims) n *= static_cast<size_t>(d);
  return n * dtype_size(dtype);
}

// The buffers a search runs on: x, w, y of the geometry (zeros: uninitialised memory may hold NaN or
// denormal patterns that slow some algorithms down) and as much workspace as the limit allows and the GPU
// has free (halving on failure).
struct SearchScratch {
  DeviceBuffer x, w, y, ws;
  size_t ws_bytes = 0;
};

SearchScratch search_scratch(const CudaBackend& backend, const ConvGeometry& g) {
  SearchScratch s;
  const size_t x_bytes = tensor_bytes(x_dims(g), g.dtype), w_bytes = tensor_bytes(w_dims(g), g.dtype),
               y_bytes = tensor_bytes(y_dims(g), g.dtype);
  s.x = DeviceBuffer(x_bytes), s.w = DeviceBuffer(w_bytes), s.y = DeviceBuffer(y_bytes);
  CUDA_CHECK(cudaMemsetAsync(s.x.get(), 0, x_bytes, backend.stream()));
  CUDA_CHECK(cudaMemsetAsync(s.w.get(), 0, w_bytes, backend.stream()));
  CUDA_CHECK(cudaMemsetAsync(s.y.get(), 0, y_bytes, backend.stream()));
  const size_t limit = backend.conv_workspace_limit();
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  s.ws_bytes = std::min(limit, free_bytes > (size_t{256} << 20) ? free_bytes - (size_t{256} << 20) : 0);
  while (s.ws_bytes >= (size_t{1} << 20) && !s.ws.get()) {
    s.ws = DeviceBuffer::try_allocate(s.ws_bytes);
    if (!s.ws.get()) s.ws_bytes /= 2;
  }
  if (!s.ws.get()) s.ws_bytes = 0;
  return s;
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

constexpr ConvDirection kDirections[] = {ConvDirection::forward, ConvDirection::backward_data,
                                         ConvDirection::backward_filter};

const AlgoChoice& direction_choice(const ConvChoice& c, ConvDirection d) {
  return d == ConvDirection::forward         ? c.forward
         : d == ConvDirection::backward_data ? c.backward_data
                                             : c.backward_filter;
}
AlgoChoice& direction_choice(ConvChoice& c, ConvDirection d) {
  return const_cast<AlgoChoice&>(direction_choice(static_cast<const ConvChoice&>(c), d));
}

// The output scaling of direction `d`'s search and graph: beta 1 where the graph adds to its output.
Scaling direction_scaling(const ConvGeometry& g, ConvDirection d) {
  return Scaling(g.dtype, 1.0, graph_adds_to_output(g, d) ? 1.0 : 0.0);
}

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

void check_workspace(const CudaConvPlan& p, const AlgoChoice& a, const void* workspace, const char* op) {
  DLB_CHECK(a.workspace == 0 || workspace != nullptr, "{}: the plan needs a workspace of {} bytes", op,
            p.workspace_bytes());
}

// Elements of a tensor-core vector along NHWC channels: 8 for FP16/BF16, 4 for FP32 (TF32).
int64_t channel_vector(const ConvGeometry& g) { return g.dtype == DType::f32 ? 4 : 8; }

// The 2x2-block form of `g` (backend/conv_blocks.h), for an NHWC convolution whose channels do not fill a
// tensor-core vector (the stem).
std::optional<InputForm> blocks_form(const ConvGeometry& g) {
  if (g.layout != Layout::nhwc || g.dtype == DType::f64 || g.in_channels >= channel_vector(g))
    return std::nullopt;
  const std::optional<ConvBlocks> b = conv_blocks(g, channel_vector(g));
  if (!b) return std::nullopt;
  InputForm f;
  f.kind = InputForm::blocks;
  f.inner = b->inner;
  f.x_off_h = b->x_off_h, f.x_off_w = b->x_off_w, f.w_off_h = b->w_off_h, f.w_off_w = b->w_off_w;
  return f;
}

// Every form besides `g` as it is that the options allow.
std::vector<InputForm> input_forms(const ConvGeometry& g, const CudaOptions& o) {
  std::vector<InputForm> forms;
  if (o.conv_space_to_depth != KernelChoice::off) {
    if (std::optional<InputForm> f = blocks_form(g)) forms.push_back(*f);
  }
  return forms;
}

// x of `g` into `dst` in form `f` (the inner convolution's input).
void to_inner_input(const ConvGeometry& g, const InputForm& f, const void* x, void* dst,
                    cudaStream_t stream) {
  const ConvGeometry& in = f.inner;
  space_to_depth2(x, g.batch, g.in_h, g.in_w, g.in_channels, f.x_off_h, f.x_off_w, dst, in.in_h, in.in_w,
                  in.in_channels, g.dtype, stream);
}
// w of `g` into `dst` in form `f`: [K, R, S, C] is an NHWC tensor of K images.
void to_inner_filter(const ConvGeometry& g, const InputForm& f, const void* w, void* dst,
                     cudaStream_t stream) {
  const ConvGeometry& in = f.inner;
  space_to_depth2(w, g.out_channels, g.kernel_h, g.kernel_w, g.in_channels, f.w_off_h, f.w_off_w, dst,
                  in.kernel_h, in.kernel_w, in.in_channels, g.dtype, stream);
}
// The inner convolution's input gradient `src` into dx of `g` (adding with `accumulate`).
void from_inner_input_grad(const ConvGeometry& g, const InputForm& f, const void* src, void* dx,
                           bool accumulate, cudaStream_t stream) {
  const ConvGeometry& in = f.inner;
  depth_to_space2(src, in.in_h, in.in_w, in.in_channels, g.batch, g.in_h, g.in_w, g.in_channels, f.x_off_h,
                  f.x_off_w, dx, g.dtype, accumulate, stream);
}
// The inner convolution's filter gradient `src` into dw of `g` (adding with `accumulate`).
void from_inner_filter_grad(const ConvGeometry& g, const InputForm& f, const void* src, void* dw,
                            bool accumulate, cudaStream_t stream) {
  const ConvGeometry& in = f.inner;
  depth_to_space2(src, in.kernel_h, in.kernel_w, in.in_channels, g.out_channels, g.kernel_h, g.kernel_w,
                  g.in_channels, f.w_off_h, f.w_off_w, dw, g.dtype, accumulate, stream);
}

// Milliseconds one conversion of the input of `g` to form `f` takes (best of three, on scratch).
double time_input_conversion(const CudaBackend& backend, const ConvGeometry& g, const InputForm& f) {
  const size_t src_bytes =
      static_cast<size_t>(g.batch * g.in_h * g.in_w * g.in_channels) * dtype_size(g.dtype);
  const ConvGeometry& in = f.inner;
  DeviceBuffer src(src_bytes),
      dst(static_cast<size_t>(in.batch * in.in_h * in.in_w * in.in_channels) * dtype_size(g.dtype));
  CUDA_CHECK(cudaMemsetAsync(src.get(), 0, src_bytes, backend.stream()));
  const tuning::EventPair events;
  float best = INFINITY;
  for (int round = 0; round < 4; ++round) {  // the first is a warm-up
    CUDA_CHECK(cudaEventRecord(events.start, backend.stream()));
    to_inner_input(g, f, src.get(), dst.get(), backend.stream());
    CUDA_CHECK(cudaEventRecord(events.stop, backend.stream()));
    const float ms = events.elapsed_ms();
    if (round > 0) best = std::min(best, ms);
  }
  return best;
}

// Where an inner plan's buffers sit in the workspace it is given.
struct InnerBuffers {
  void* x;
  void* w;
  void* inner_workspace;
};
InnerBuffers inner_buffers(const CudaConvPlan& p, void* workspace, const char* op) {
  DLB_CHECK(workspace != nullptr, "{}: the plan needs a workspace of {} bytes", op, p.workspace_bytes());
  auto* base = static_cast<std::byte*>(workspace);
  return {base, base + p.inner_x_bytes(), base + p.inner_x_bytes() + p.inner_w_bytes()};
}

}  // namespace

namespace {

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

// A row-major product c[m, n] = alpha op(a)[m, k] op(b)[k, n] + beta c on cuBLAS (column-major): the
// column-major c^T = op(b)^T op(a)^T, so the operands swap and each leading dimension is a stored row's
// length (lda, ldb, ldc below).
cublasStatus_t row_major_gemm(cublasHandle_t handle, const ConvGeometry& g, bool allow_tf32, bool transpose_a,
                              bool transpose_b, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda,
                              const void* b, int64_t ldb, void* c, int64_t ldc, const Scaling& s) {
  // FP32: plain FP32 (CUDNN_FMA_MATH's counterpart) unless TF32 is allowed; FP16/BF16 accumulate in FP32.
  const cublasComputeType_t compute =
      g.dtype == DType::f32 && allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType_t t = cuda_dtype(g.dtype);
  auto i = [](int64_t v) { return static_cast<int>(v); };  // gemm_shape checked the range
  return cublasGemmEx(handle, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                      transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, i(n), i(m), i(k), s.alpha(), b, t, i(ldb), a,
                      t, i(lda), s.beta(), c, t, i(ldc), compute, CUBLAS_GEMM_DEFAULT);
}

// One call of direction `d` of the 1x1 convolution `g` as a GEMM over its M = N*out_h*out_w output pixels
// (x, w, y as run_legacy takes them; NHWC: x [pixels, C], y [M, K], w [K, C]), adding to the output when
// `add`. A strided one gathers x's pixels into `workspace` (gathered_pixels_bytes), or computes dx's there
// and scatters them.
cublasStatus_t run_gemm(const CudaBackend& backend, const ConvGeometry& g, ConvDirection d, void* x, void* w,
                        void* y, bool add, void* workspace) {
  const int64_t pixels = g.batch * g.out_h() * g.out_w(), c = g.in_channels, k = g.out_channels;
  const int64_t stride = g.stride_h;
  cublasHandle_t handle = backend.cublas();
  cudaStream_t stream = backend.stream();
  const bool tf32 = backend.allow_tf32();
  const Scaling s(g.dtype, 1.0, add ? 1.0 : 0.0);
  void* dense_x = x;  // x's pixels at the stride, [M, C]
  if (stride > 1 && d != ConvDirection::backward_data) {
    gather_strided_pixels(x, g.batch, g.in_h, g.in_w, c, stride, workspace, g.dtype, stream);
    dense_x = workspace;
  }
  switch (d) {
    case ConvDirection::forward:  // y[M, K] = x[M, C] w[K, C]^T
      return row_major_gemm(handle, g, tf32, false, true, pixels, k, c, dense_x, c, w, c, y, k, s);
    case ConvDirection::backward_data: {  // dx[M, C] = dy[M, K] w[K, C]
      if (stride == 1)
        return row_major_gemm(handle, g, tf32, false, false, pixels, c, k, y, k, w, c, x, c, s);
      const cublasStatus_t status = row_major_gemm(handle, g, tf32, false, false, pixels, c, k, y, k, w, c,
                                                   workspace, c, Scaling(g.dtype, 1.0, 0.0));
      if (status == CUBLAS_STATUS_SUCCESS)
        scatter_strided_pixels(workspace, g.batch, g.in_h, g.in_w, c, stride, x, g.dtype, add, stream);
      return status;
    }
    case ConvDirection::backward_filter:  // dw[K, C] = dy[M, K]^T x[M, C]
      return row_major_gemm(handle, g, tf32, true, false, k, c, pixels, y, k, dense_x, c, w, c, s);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
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

// The timing harness (tuning/cuda_timing.h) on the backend's stream, for calls that return a cuDNN status.
template <typename Run>
std::optional<float> time_calls(const CudaBackend& backend, const Run& run,
                                float give_up_ms = std::numeric_limits<float>::infinity()) {
  return tuning::time_calls(
      backend.stream(), [&] { return run() == CUDNN_STATUS_SUCCESS; }, give_up_ms);
}
using tuning::give_up_time;

// Names a pick whose two fastest candidates were close in the run's result (through the cache).
void note_close_call(const CudaBackend& backend, const std::string& key, const char* what,
                     const tuning::Pick& pick) {
  if (pick.close())
    backend.algorithms().record_close_call(
        {fmt::format("{} {}", key, what), pick.ms, pick.fastest_ms, pick.second_ms});
}

// Moves the candidate the rule picks (tuning/pick.h: the first in `timed`'s order within the timing noise
// of the fastest) to the front of `timed`; nullopt when it is empty.
std::optional<tuning::Pick> pick_first(std::vector<AlgoChoice>& timed) {
  std::vector<double> ms;
  for (const AlgoChoice& a : timed) ms.push_back(a.time_ms);
  const std::optional<tuning::Pick> pick = tuning::pick_within_noise(ms);
  if (pick)
    std::rotate(timed.begin(), timed.begin() + static_cast<std::ptrdiff_t>(pick->index),
                timed.begin() + static_cast<std::ptrdiff_t>(pick->index) + 1);
  return pick;
}

// cuBLAS's GEMM time of each direction of the 1x1 convolution `plan`, back to back like the engines (with
// its gathers); none where it failed or its gathered pixels do not fit the workspace.
using GemmTimes = std::array<std::optional<float>, 3>;

GemmTimes time_gemm(const CudaBackend& backend, const CudaConvPlan& plan, const SearchScratch& scratch) {
  const ConvGeometry& g = plan.geometry;
  void *x = scratch.x.get(), *w = scratch.w.get(), *y = scratch.y.get(), *ws = scratch.ws.get();
  GemmTimes times;
  if (gathered_pixels_bytes(g) > std::min(scratch.ws_bytes, backend.conv_workspace_limit())) return times;
  for (ConvDirection d : kDirections) {
    times[static_cast<size_t>(d)] = time_calls(backend, [&] {
      return run_gemm(backend, g, d, x, w, y, graph_adds_to_output(g, d), ws) == CUBLAS_STATUS_SUCCESS
                 ? CUDNN_STATUS_SUCCESS
                 : CUDNN_STATUS_EXECUTION_FAILED;
    });
  }
  CUDA_CHECK(cudaStreamSynchronize(backend.stream()));  // the scratch buffers are freed next
  return times;
}

// Per direction (ConvDirection's order), the legacy algorithms that ran, in the heuristic's order but for
// the one the rule picked (tuning/pick.h), which comes first.
using LegacyRanking = std::array<std::vector<AlgoChoice>, 3>;

// The legacy algorithms of each direction, ranked on the clock of the engines and the GEMM: cuDNN's
// heuristic lists them (cudnnGet*Algorithm_v7, untimed) and each is timed back to back (time_calls), the
// slow ones given up after one call (kGiveUpFactor; `gemm`, timed first where the GEMM can run the shape,
// sets the pace). cudnnFind, which this replaces, timed every algorithm in full on an idle stream (its
// times held the API's host work, up to 4x a small convolution's kernel) and dlbench ran it three times
// (kSearchRounds): cuDNN's FP32 NHWC algorithms take up to 110 ms a call where the GEMM takes 1.5, and the
// first FP32 NHWC start without an algorithm cache took 50 s.
LegacyRanking search_legacy(const CudaBackend& backend, CudaConvPlan& plan, const SearchScratch& scratch,
                            const GemmTimes& gemm, const std::string& key) {
  const ConvGeometry& g = plan.geometry;
  cudnnHandle_t handle = backend.cudnn();
  void *x = scratch.x.get(), *w = scratch.w.get(), *y = scratch.y.get(), *ws = scratch.ws.get();
  const size_t limit = std::min(backend.conv_workspace_limit(), scratch.ws_bytes);
  constexpr int kMaxResults = 16;
  LegacyRanking ranking;
  for (ConvDirection d : kDirections) {
    // The heuristic's (algorithm, math type) list, in its order.
    std::vector<std::pair<int, cudnnMathType_t>> listed;
    // Never CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION for FP32 data: it lets cuDNN compute in FP16.
    auto take = [&](const auto* results, int returned) {
      for (int i = 0; i < returned; ++i)
        if (results[i].status == CUDNN_STATUS_SUCCESS &&
            !(g.dtype == DType::f32 && results[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
          listed.emplace_back(static_cast<int>(results[i].algo), results[i].mathType);
    };
    int returned = 0;
    switch (d) {
      case ConvDirection::forward: {
        cudnnConvolutionFwdAlgoPerf_t results[kMaxResults];
        CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, plan.x_desc, plan.w_desc,
                                                           plan.forward_desc, plan.y_desc, kMaxResults,
                                                           &returned, results));
        take(results, returned);
        break;
      }
      case ConvDirection::backward_data: {
        cudnnConvolutionBwdDataAlgoPerf_t results[kMaxResults];
        CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, plan.w_desc, plan.y_desc,
                                                                plan.backward_data_desc, plan.x_desc,
                                                                kMaxResults, &returned, results));
        take(results, returned);
        break;
      }
      case ConvDirection::backward_filter: {
        cudnnConvolutionBwdFilterAlgoPerf_t results[kMaxResults];
        CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, plan.x_desc, plan.y_desc,
                                                                  plan.backward_filter_desc, plan.w_desc,
                                                                  kMaxResults, &returned, results));
        take(results, returned);
        break;
      }
    }
    const Scaling s = direction_scaling(g, d);
    std::optional<float> fastest = gemm[static_cast<size_t>(d)];
    std::vector<AlgoChoice>& ranked = ranking[static_cast<size_t>(d)];
    for (const auto& [algo, math] : listed) {
      AlgoChoice a;
      a.algo = algo;
      a.math = math;
      set_execution(backend, plan, d, a);  // the math type it executes with, and its exact workspace
      if (a.workspace > limit) continue;
      const bool seen = std::any_of(ranked.begin(), ranked.end(), [&](const AlgoChoice& r) {
        return r.algo == a.algo && r.math == a.math;  // FP32 without TF32 folds every math type into FMA
      });
      if (seen) continue;
      const std::optional<float> ms = time_calls(
          backend, [&] { return run_legacy(handle, plan, d, a, x, w, y, ws, s); }, give_up_time(fastest));
      if (!ms) continue;
      a.time_ms = a.legacy_ms = *ms;
      ranked.push_back(a);
      if (!fastest || *ms < *fastest) fastest = *ms;
    }
    if (const std::optional<tuning::Pick> pick = pick_first(ranked))
      note_close_call(backend, key, fmt::format("{} legacy", direction_name(d)).c_str(), *pick);
    DLB_CHECK(!ranked.empty(),
              "conv: no {} algorithm of cuDNN ran within {} bytes of workspace for {}x{}x{}x{} -> {} ({}x{} "
              "stride {}x{} pad {}x{}, {} {})",
              direction_name(d), limit, g.batch, g.in_channels, g.in_h, g.in_w, g.out_channels, g.kernel_h,
              g.kernel_w, g.stride_h, g.stride_w, g.pad_h, g.pad_w, dtype_name(g.dtype),
              layout_name(g.layout));
  }
  CUDA_CHECK(cudaStreamSynchronize(backend.stream()));  // the scratch buffers are freed next
  return ranking;
}

// Times, back to back, the graph engines the heuristics offer for each direction of `plan`, on the search's
// scratch buffers, after its legacy algorithms (search_legacy) and the GEMM (`gemm`); records in
// `plan.choice` the legacy algorithm the rule picked and the engine that runs instead where the rule picks
// one over it: in the order legacy algorithm, then the engines in the heuristics' order (with `force`, the
// engines alone).
void search_graph_engines(const CudaBackend& backend, CudaConvPlan& plan, const LegacyRanking& ranking,
                          const SearchScratch& scratch, const GemmTimes& gemm, bool force,
                          const std::string& key) {
  const ConvGeometry& g = plan.geometry;
  cudnnHandle_t handle = backend.cudnn();
  void *x = scratch.x.get(), *w = scratch.w.get(), *y = scratch.y.get(), *ws = scratch.ws.get();
  const size_t limit = std::min(backend.conv_workspace_limit(), scratch.ws_bytes);
  const bool tensor_cores = g.dtype != DType::f32 || backend.allow_tf32();
  for (ConvDirection d : kDirections) {
    AlgoChoice& a = direction_choice(plan.choice, d);
    a = ranking[static_cast<size_t>(d)].front();
    set_execution(backend, plan, d, a);
    std::optional<ConvGraph> graph;
    std::vector<GraphEngine> engines;
    try {
      graph.emplace(handle, g, d);
      engines = graph->candidates(tensor_cores, kGraphCandidates);
    } catch (const Error&) {
      continue;  // cuDNN has no graph of this direction for this shape: the legacy algorithm stays
    }
    const std::optional<float>& gemm_ms = gemm[static_cast<size_t>(d)];
    float fastest = gemm_ms ? std::min(*gemm_ms, a.legacy_ms) : a.legacy_ms;
    // Candidate 0 is the legacy algorithm (not with `force`), then the engines that ran, in order.
    std::vector<GraphEngine> timed{GraphEngine{}};
    std::vector<double> ms_of{force ? INFINITY : static_cast<double>(a.legacy_ms)};
    for (const GraphEngine& engine : engines) {
      const std::unique_ptr<GraphPlan> candidate = GraphPlan::build(*graph, engine);
      if (!candidate || candidate->workspace_bytes() > limit) continue;
      // With `force` an engine must be chosen: each is timed in full.
      const std::optional<float> ms = time_calls(
          backend, [&] { return candidate->execute(x, w, y, ws); },
          force ? std::numeric_limits<float>::infinity() : give_up_time(fastest));
      if (!ms) continue;
      timed.push_back(engine);
      ms_of.push_back(*ms);
      fastest = std::min(fastest, *ms);
    }
    const std::optional<tuning::Pick> pick = tuning::pick_within_noise(ms_of);
    if (!pick) continue;
    note_close_call(backend, key, fmt::format("{} engine", direction_name(d)).c_str(), *pick);
    if (pick->index > 0) {
      a.engine = timed[pick->index];
      a.engine_ms = static_cast<float>(pick->ms);
    }
  }
  CUDA_CHECK(cudaStreamSynchronize(backend.stream()));  // the scratch buffers are freed next
}

// Chooses the GEMM for each direction where the rule picks it after what the direction runs (with `force`,
// wherever it ran).
void choose_gemm(const CudaBackend& backend, CudaConvPlan& plan, const GemmTimes& times, bool force,
                 const std::string& key) {
  for (ConvDirection d : kDirections) {
    AlgoChoice& a = direction_choice(plan.choice, d);
    const std::optional<float>& ms = times[static_cast<size_t>(d)];
    if (!ms) continue;
    const double order[] = {static_cast<double>(a.run_ms()), static_cast<double>(*ms)};
    const std::optional<tuning::Pick> pick = tuning::pick_within_noise(order);
    if (!force) note_close_call(backend, key, fmt::format("{} gemm", direction_name(d)).c_str(), *pick);
    if (force || pick->index == 1) {
      a.gemm = true;
      a.gemm_ms = *ms;
    }
  }
}

// An estimate plan's workspaces before any search: the limit, which no search result can exceed.
void assume_workspace_limit(CudaConvPlan& p, size_t limit) {
  p.choice.forward.workspace = p.choice.backward_data.workspace = p.choice.backward_filter.workspace = limit;
}

}  // namespace

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

namespace {

// The plan of `g` as it is, its algorithms from the cache or a search (recorded there).
std::unique_ptr<CudaConvPlan> searched_plan(CudaBackend& backend, const ConvGeometry& g) {
  auto plan = new_plan(backend, g);
  tuning::AlgorithmCache& cache = backend.algorithms();
  const std::string key = stored_choice_key(g, backend);
  std::optional<ConvChoice> cached;
  if (const std::optional<nlohmann::json> entry = cache.find(key)) {
    cached = choice_from_json(*entry);
    if (!cached) cache.forget(key, "is not a convolution's choice");
  }
  if (cached) {
    plan->choice = *cached;
  } else {
    // Searched outside any lock (it takes a while; two threads racing on one shape both search, and the
    // first recorded is what both run).
    const CudaOptions& o = backend.options();
    const bool with_engines = uses_graph_engines(g, o), with_gemm = uses_gemm(g, o);
    const auto started = std::chrono::steady_clock::now();
    const SearchScratch scratch = search_scratch(backend, g);
    // A shape the GEMM can run times it first: the candidates far slower than it are given up early.
    const GemmTimes gemm = with_gemm ? time_gemm(backend, *plan, scratch) : GemmTimes{};
    const LegacyRanking ranking = search_legacy(backend, *plan, scratch, gemm, key);
    plan->choice = ConvChoice{ranking[0].front(), ranking[1].front(), ranking[2].front()};
    if (with_engines)
      search_graph_engines(backend, *plan, ranking, scratch, gemm, o.conv_graph == KernelChoice::force, key);
    if (with_gemm) choose_gemm(backend, *plan, gemm, o.conv_gemm == KernelChoice::force, key);
    log_debug("conv search {}x{}x{}x{} -> {} {}x{} stride {} {} {}: {:.2f} s", g.batch, g.in_channels, g.in_h,
              g.in_w, g.out_channels, g.kernel_h, g.kernel_w, g.stride_h, dtype_name(g.dtype),
              layout_name(g.layout),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    // What another rank recorded first, if one did, is what this one runs too.
    plan->choice = choice_from_json(cache.put(key, choice_to_json(plan->choice))).value_or(plan->choice);
  }
  plan->from_cache = cached.has_value();

  finish(backend, *plan);
  return plan;
}

// The fastest of `g` as it is and `g` in each of `forms`, for what a layer runs every step: the forward and
// the filter gradient (a first layer's input needs no gradient), with the conversions of the input (timed;
// the filter's are negligible). Another form must beat `g` as it is by 3% to be worth its workspace;
// `force` takes the fastest other form whatever the times.
InputForm choose_input_form(CudaBackend& backend, const ConvGeometry& g, const CudaConvPlan& plain,
                            const std::vector<InputForm>& forms, bool force) {
  auto step_ms = [](const CudaConvPlan& p) {
    return static_cast<double>(p.choice.forward.run_ms()) +
           static_cast<double>(p.choice.backward_filter.run_ms());
  };
  InputForm best;
  double best_ms = force ? INFINITY : 0.97 * step_ms(plain);
  for (const InputForm& f : forms) {
    const std::unique_ptr<CudaConvPlan> inner = searched_plan(backend, f.inner);
    const double ms = step_ms(*inner) + 2 * time_input_conversion(backend, g, f);
    log_debug("conv {}x{}x{}x{} -> {} {}x{}: {} form {} channels {:.3f} ms (as it is {:.3f})", g.batch,
              g.in_channels, g.in_h, g.in_w, g.out_channels, g.kernel_h, g.kernel_w, "2x2-block",
              f.inner.in_channels, ms, step_ms(plain));
    if (ms < best_ms) {
      best_ms = ms;
      best = f;
    }
  }
  return best;
}

}  // namespace

namespace {

// ---- the forward with its output's statistics (ConvGeometry::output_statistics) ----
// cuDNN's graph API takes a genstats node on the forward's output: the engines that run it sum each output
// channel, and its squares, in the convolution's epilogue, while y is still on chip. The batch norm after
// the convolution then needs no pass over y for its statistics. Measured on an H200 (fp16, ResNet-50's
// convolutions, bench/kernels/conv_bn_fusion_probe.cu): 4.40 ms for all of them with the statistics against
// 4.00 without, where the batch norms' statistics passes took about 1.8 ms.
//
// An engine is taken where it costs less than the convolution as searched (its forward's time back to
// back) plus the batch norm's statistics pass it saves (statistics_pass_ms, timed the same way: a bound of
// one read of y at the memory's peak bandwidth turned away engines that saved time on the small layers,
// where a pass costs its launch and finalize more than its bytes). Decided once per shape like the algorithms
// (for the process, and in
// --algorithm-cache as the key's " statistics" entry: the engine's index, or -1 for none, its time in
// microseconds, its knobs).
struct StatisticsChoice {
  std::optional<GraphEngine> engine;
  float ms = 0;
};

// What the batch norm after the convolution spends on its statistics pass over y (`y`, scratch): its
// training forward on the own kernels (no fusion; the pass does not depend on it) timed back to back with
// its statistics made from y and from given sums, the difference. `out` is a scratch of y's size.
float statistics_pass_ms(const CudaBackend& backend, const ConvGeometry& g, const void* y, void* out) {
  BatchNormGeometry b;
  b.batch = g.batch, b.channels = g.out_channels, b.h = g.out_h(), b.w = g.out_w();
  b.dtype = g.dtype, b.layout = g.layout, b.fusion = BatchNormFusion::none;
  const OwnBatchNormLaunch launch = own_batchnorm_launch(b);
  // gamma, beta, the running and saved statistics, and the sums (two channel vectors): zeros will do.
  const size_t channel_bytes = static_cast<size_t>(b.channels) * sizeof(float);
  const DeviceBuffer channels(8 * channel_bytes), workspace(own_batchnorm_workspace_bytes(launch)),
      held(own_batchnorm_held_bytes(launch));
  CUDA_CHECK(cudaMemsetAsync(channels.get(), 0, 8 * channel_bytes, backend.stream()));
  float* c = static_cast<float*>(channels.get());
  const int64_t k = b.channels;
  auto forward = [&](const float* sums) {
    own_batchnorm_forward_training(launch, y, nullptr, c, c + k, out, c + 2 * k, c + 3 * k, c + 4 * k,
                                   c + 5 * k, workspace.get(), held.get(), backend.stream(), sums);
    return CUDNN_STATUS_SUCCESS;
  };
  const std::optional<float> with_pass = time_calls(backend, [&] { return forward(nullptr); }),
                             from_sums = time_calls(backend, [&] { return forward(c + 6 * k); });
  CUDA_CHECK(cudaStreamSynchronize(backend.stream()));  // the buffers are freed next
  return with_pass && from_sums ? std::max(0.f, *with_pass - *from_sums) : 0.f;
}

// Whether cuDNN's statistics engines may take `g`: graph engines on, the input as it is (no inner plan),
// and the square sums, which follow the sums, on a 16-byte boundary.
bool statistics_shape(const ConvGeometry& g, const CudaOptions& o) {
  return g.output_statistics && o.conv_statistics != KernelChoice::off && uses_graph_engines(g, o) &&
         g.out_channels % 4 == 0;
}

// Times the engines of the forward-with-statistics graph back to back on scratch buffers; of those worth it
// (all of them with force), the one the rule picks in the heuristics' order (tuning/pick.h), or none.
StatisticsChoice search_statistics(const CudaBackend& backend, const CudaConvPlan& plan,
                                   const std::string& key) {
  const ConvGeometry& g = plan.geometry;
  const SearchScratch scratch = search_scratch(backend, g);
  const DeviceBuffer sums(static_cast<size_t>(2 * g.out_channels) * sizeof(float));
  float* sum = static_cast<float*>(sums.get());
  const size_t limit = std::min(backend.conv_workspace_limit(), scratch.ws_bytes);
  const bool force = backend.options().conv_statistics == KernelChoice::force;
  float worth = std::numeric_limits<float>::infinity();
  if (!force) {
    const DeviceBuffer out(tensor_bytes(y_dims(g), g.dtype));
    worth = plan.choice.forward.run_ms() + statistics_pass_ms(backend, g, scratch.y.get(), out.get());
  }
  std::vector<GraphEngine> worth_it;
  std::vector<double> ms_of;
  try {
    const ConvGraph graph(backend.cudnn(), g, ConvDirection::forward, /*with_statistics=*/true);
    const bool tensor_cores = g.dtype != DType::f32 || backend.allow_tf32();
    for (const GraphEngine& engine : graph.candidates(tensor_cores, kGraphCandidates)) {
      log_debug("conv statistics {}x{}x{}x{} -> {} {}x{} {}: {}", g.batch, g.in_channels, g.in_h, g.in_w,
                g.out_channels, g.kernel_h, g.kernel_w, dtype_name(g.dtype), engine_name(engine));
      const std::unique_ptr<GraphPlan> candidate = GraphPlan::build(graph, engine);
      if (!candidate || candidate->workspace_bytes() > limit) continue;
      log_debug("  built, workspace {} B, timing", candidate->workspace_bytes());
      const std::optional<float> ms = time_calls(
          backend,
          [&] {
            return candidate->execute(scratch.x.get(), scratch.w.get(), scratch.y.get(), scratch.ws.get(),
                                      sum, sum + g.out_channels);
          },
          give_up_time(worth));
      if (ms && *ms < worth) {
        worth_it.push_back(engine);
        ms_of.push_back(*ms);
      }
    }
  } catch (const Error&) {
    // cuDNN has no such graph for this shape: the batch norm keeps its statistics pass
  }
  CUDA_CHECK(cudaStreamSynchronize(backend.stream()));  // the scratch buffers are freed next
  const std::optional<tuning::Pick> pick = tuning::pick_within_noise(ms_of);
  if (!pick) return {};
  note_close_call(backend, key, "fwd with statistics", *pick);
  return {worth_it[pick->index], static_cast<float>(pick->ms)};
}

// The forward-with-statistics plan of `plan` (null: none is worth it), from the cache or a search. The
// cache's entry: {"engine": {"index", "knobs"} or null, "ms"}.
std::shared_ptr<const GraphPlan> choose_statistics_engine(CudaBackend& backend, CudaConvPlan& plan) {
  // Keyed by the forward alone: whether the input gradient accumulates (a backward-data matter) must not
  // make a shape search its statistics twice.
  ConvGeometry g = plan.geometry;
  g.accumulates_input_grad = false;
  const KernelChoice mode = backend.options().conv_statistics;
  tuning::AlgorithmCache& cache = backend.algorithms();
  const std::string key =
      stored_choice_key(g, backend) + (mode == KernelChoice::force ? " statistics:force" : " statistics");
  auto from_json = [](const nlohmann::json& j) -> std::optional<StatisticsChoice> {
    try {
      return StatisticsChoice{engine_from_json(j.at("engine")), j.at("ms").get<float>()};
    } catch (const nlohmann::json::exception&) {
      return std::nullopt;
    }
  };
  std::optional<StatisticsChoice> chosen;
  if (const std::optional<nlohmann::json> entry = cache.find(key)) {
    chosen = from_json(*entry);
    if (!chosen) cache.forget(key, "is not a statistics engine");
  }
  if (!chosen) {
    const StatisticsChoice searched = search_statistics(backend, plan, key);
    chosen = from_json(cache.put(key, {{"engine", engine_to_json(searched.engine)}, {"ms", searched.ms}}))
                 .value_or(searched);
  }
  const ConvKey shape = make_key(g, backend);
  if (!chosen->engine) return nullptr;
  plan.statistics_ms = chosen->ms;
  std::vector<int64_t> plan_key(shape.begin(), shape.end());
  plan_key.insert(plan_key.end(), {-1, chosen->engine->index});  // -1: not a direction's plan
  for (const auto& [type, value] : chosen->engine->knobs) plan_key.insert(plan_key.end(), {type, value});
  const GraphEngine engine = *chosen->engine;
  return backend.graph_plan(plan_key, [&]() -> std::unique_ptr<GraphPlan> {
    try {
      const ConvGraph graph(backend.cudnn(), g, ConvDirection::forward, /*with_statistics=*/true);
      return GraphPlan::build(graph, engine);
    } catch (const Error&) {
      return nullptr;  // a stored engine cuDNN no longer builds: the batch norm keeps its pass
    }
  });
}

// The form `plan`'s input runs in (InputForm): decided once per shape and mode, from the cache ({"kind",
// "in_channels"}: the inner input's) or choose_input_form; another form than the input as it is puts its
// plan in plan.inner.
void take_input_form(CudaBackend& backend, const ConvGeometry& g, CudaConvPlan& plan) {
  const std::vector<InputForm> forms = input_forms(g, backend.options());
  if (forms.empty()) return;
  const KernelChoice blocks = backend.options().conv_space_to_depth;
  tuning::AlgorithmCache& cache = backend.algorithms();
  const std::string key =
      stored_choice_key(g, backend) + fmt::format(" input:{}", kernel_choice_name(blocks));
  auto from_json = [](const nlohmann::json& j) -> std::optional<std::pair<int64_t, int64_t>> {
    try {
      return std::pair{j.at("kind").get<int64_t>(), j.at("in_channels").get<int64_t>()};
    } catch (const nlohmann::json::exception&) {
      return std::nullopt;
    }
  };
  std::optional<std::pair<int64_t, int64_t>> chosen;  // (kind, inner channels)
  if (const std::optional<nlohmann::json> entry = cache.find(key)) {
    chosen = from_json(*entry);
    if (!chosen) cache.forget(key, "is not an input form");
  }
  if (!chosen) {
    // "force" takes the fastest other form whatever the times.
    const InputForm f = choose_input_form(backend, g, plan, forms, blocks == KernelChoice::force);
    const std::pair<int64_t, int64_t> searched{
        f.kind, f.kind == InputForm::as_is ? g.in_channels : f.inner.in_channels};
    chosen = from_json(cache.put(key, {{"kind", searched.first}, {"in_channels", searched.second}}))
                 .value_or(searched);
  }
  for (const InputForm& f : forms) {
    if (f.kind == chosen->first && f.inner.in_channels == chosen->second) {
      plan.inner = searched_plan(backend, f.inner);
      plan.form = f;
    }
  }
}

}  // namespace

std::unique_ptr<ConvPlan> CudaBackend::plan_conv(const ConvGeometry& g) {
  std::unique_ptr<CudaConvPlan> plan = searched_plan(*this, g);
  take_input_form(*this, g, *plan);
  if (!plan->inner && statistics_shape(g, options_))
    plan->statistics_plan = choose_statistics_engine(*this, *plan);
  return plan;
}

bool CudaBackend::conv_emits_statistics(const ConvPlan& plan) const {
  return as_cuda_plan(plan).statistics_plan != nullptr;
}

void CudaBackend::conv_forward_with_statistics(const ConvPlan& plan, const Tensor& x, const Tensor& w,
                                               Tensor& y, Tensor& sums, void* workspace) {
  const auto& p = as_cuda_plan(plan);
  const ConvGeometry& g = p.geometry;
  const char* op = "conv_forward_with_statistics";
  DLB_CHECK(p.statistics_plan != nullptr, "{}: the plan has no engine for its output's statistics", op);
  check_activation(op, "x", x, x_dims(g), g.dtype, g.layout);
  check_activation(op, "w", w, w_dims(g), g.dtype, g.layout);
  check_activation(op, "y", y, y_dims(g), g.dtype, g.layout);
  check_device_tensor(op, "sums", sums);
  DLB_CHECK(sums.dtype() == DType::f32 && sums.numel() == 2 * g.out_channels,
            "{}: sums must hold 2 x {} FP32 values, got {}", op, g.out_channels, sums.describe());
  for (const void* q : {x.data(), w.data(), y.data(), sums.data()})
    DLB_CHECK(reinterpret_cast<uintptr_t>(q) % GraphPlan::kAlignment == 0,
              "{}: a tensor is not {}-byte aligned", op, GraphPlan::kAlignment);
  DLB_CHECK(workspace != nullptr || p.statistics_plan->workspace_bytes() == 0,
            "{}: the plan needs a workspace of {} bytes", op, p.statistics_plan->workspace_bytes());
  activate();
  float* sum = static_cast<float*>(sums.data());
  CUDNN_CHECK(p.statistics_plan->execute(x.data(), w.data(), y.data(), workspace, sum, sum + g.out_channels));
}

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

}  // namespace cuda

std::string describe_cuda_conv_plan(const ConvPlan& plan) {
  const auto& p = cuda::as_cuda_plan(plan);
  if (p.inner) {
    const ConvGeometry& g = p.geometry;
    const ConvGeometry& in = p.inner->geometry;
    return fmt::format("input as 2x2 blocks {}x{}x{} -> {}x{}x{}, {}x{} stride 1: {}", g.in_channels, g.in_h,
                       g.in_w, in.in_channels, in.in_h, in.in_w, in.kernel_h, in.kernel_w,
                       describe_cuda_conv_plan(*p.inner));
  }
  const auto& c = p.choice;
  auto one = [&](cuda::ConvDirection d, const char* name, const cuda::AlgoChoice& a) {
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
    return fmt::format("{} ({}, {} B, {:.3f} ms)", name, cuda::math_name(a.math), a.workspace, a.run_ms());
  };
  const std::string statistics =
      p.statistics_plan ? fmt::format(" | fwd with output statistics: graph {} ({} B, {:.3f} ms{})",
                                      cuda::engine_name(p.statistics_plan->engine()),
                                      p.statistics_plan->workspace_bytes(), p.statistics_ms,
                                      p.statistics_plan->notes().nondeterministic ? ", nondeterministic" : "")
                        : std::string();
  return fmt::format("fwd: {}{} | bwd_data{}: {} | bwd_filter: {}{}",
                     one(cuda::ConvDirection::forward, cuda::forward_algo_name(c.forward.algo), c.forward),
                     statistics, p.geometry.accumulates_input_grad ? " (adds to dx)" : "",
                     one(cuda::ConvDirection::backward_data,
                         cuda::backward_data_algo_name(c.backward_data.algo), c.backward_data),
                     one(cuda::ConvDirection::backward_filter,
                         cuda::backward_filter_algo_name(c.backward_filter.algo), c.backward_filter),
                     p.from_cache ? " [cached search]" : "");
}

}  // namespace dlbench
