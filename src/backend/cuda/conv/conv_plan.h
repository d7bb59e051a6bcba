// The CUDA convolution's parts, shared by its files (src/backend/cuda/conv/): what a plan holds (the
// choice of each direction, the input's form, the graph-API plans), and the functions one part calls in
// another. Internal to the CUDA backend.
//
//   plan.cc            descriptors, the plan's making (plan_conv, estimate_conv), its description
//   cache_entries.cc   a choice as the algorithm cache (backend/tuning/) holds it
//   search.cc          the timed search of each direction: legacy algorithms, graph engines, the GEMM
//   gemm.cc            1x1 convolutions as cuBLAS GEMMs
//   space_to_depth.cc  the input as 2x2 blocks (stride-2 convolutions on few channels: the stem)
//   statistics.cc      the forward with its output's per-channel sums (for the batch norm after it)
//   execute.cc         the calls: forward, backward data, backward filter
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cudnn_graph.h"
#include "backend/tuning/cuda_timing.h"
#include "backend/tuning/pick.h"
#include "core/log.h"

namespace dlbench::cuda::conv {

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
inline constexpr size_t kGraphCandidates = 8;

// A shape's graph-API plans in the backend's table (CudaBackend::graph_plan): the geometry, dtype, layout,
// the TF32 switch, the workspace limit, the graph-engine and GEMM modes and whether the input gradient
// accumulates (the backward data is searched with beta = 1 then).
using ConvKey = std::array<int64_t, 18>;

// The form a convolution's input (and filter) take for the convolution that runs (space_to_depth.cc):
// as they are, or as 2x2 blocks of pixels (space-to-depth: a stride-2 convolution becomes a stride-1 one
// over 4x the channels).
struct InputForm {
  enum Kind : int64_t { as_is = 0, blocks = 2 };
  Kind kind = as_is;
  ConvGeometry inner;  // the convolution that runs (kind != as_is)
  // blocks: where the input's and the filter's blocks start (space_to_depth2's offsets)
  int64_t x_off_h = 0, x_off_w = 0, w_off_h = 0, w_off_w = 0;
};

// ---- the 1x1 convolutions cuBLAS can run (gemm.cc) ----
bool gemm_shape(const ConvGeometry& g);
size_t gathered_pixels_bytes(const ConvGeometry& g);
bool uses_gemm(const ConvGeometry& g, const CudaOptions& o);

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
  // The output's statistics in the forward's epilogue (a cuDNN graph with a genstats node), where the
  // search found an engine worth it (conv/statistics.cc).
  bool emits_statistics() const override { return statistics_plan != nullptr; }
  // The graph-API plan `direction` runs on, or null (the legacy algorithm).
  const GraphPlan* graph_plan(ConvDirection direction) const {
    return graph_plans[static_cast<size_t>(direction)].get();
  }
  // With an inner plan, the workspace holds its input (or input gradient), then its filter (or filter
  // gradient), then its own workspace.
  size_t inner_x_bytes() const {
    const ConvGeometry& p = inner->geometry;
    return align_up(static_cast<size_t>(p.batch * p.in_channels * p.in_h * p.in_w) * dtype_size(p.dtype),
                    kWorkspaceAlignment);
  }
  size_t inner_w_bytes() const {
    const ConvGeometry& p = inner->geometry;
    return align_up(
        static_cast<size_t>(p.out_channels * p.in_channels * p.kernel_h * p.kernel_w) * dtype_size(p.dtype),
        kWorkspaceAlignment);
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
  // when that runs faster (space_to_depth.cc); the calls then go there.
  std::unique_ptr<CudaConvPlan> inner;
  InputForm form;
  // The forward with its output's statistics (ConvGeometry::output_statistics), where an engine for it won
  // (choose_statistics_engine), and its time back to back.
  std::shared_ptr<const GraphPlan> statistics_plan;
  float statistics_ms = 0;
};

inline std::vector<int64_t> x_dims(const ConvGeometry& g) { return {g.batch, g.in_channels, g.in_h, g.in_w}; }
inline std::vector<int64_t> w_dims(const ConvGeometry& g) {
  return {g.out_channels, g.in_channels, g.kernel_h, g.kernel_w};
}
inline std::vector<int64_t> y_dims(const ConvGeometry& g) {
  return {g.batch, g.out_channels, g.out_h(), g.out_w()};
}

inline size_t tensor_bytes(const std::vector<int64_t>& dims, DType dtype) {
  size_t n = 1;
  for (int64_t d : dims) n *= static_cast<size_t>(d);
  return n * dtype_size(dtype);
}

inline constexpr ConvDirection kDirections[] = {ConvDirection::forward, ConvDirection::backward_data,
                                                ConvDirection::backward_filter};

inline const AlgoChoice& direction_choice(const ConvChoice& c, ConvDirection d) {
  return d == ConvDirection::forward         ? c.forward
         : d == ConvDirection::backward_data ? c.backward_data
                                             : c.backward_filter;
}

inline AlgoChoice& direction_choice(ConvChoice& c, ConvDirection d) {
  return const_cast<AlgoChoice&>(direction_choice(static_cast<const ConvChoice&>(c), d));
}

// The buffers a search runs on: x, w, y of the geometry (zeros: uninitialised memory may hold NaN or
// denormal patterns that slow some algorithms down) and as much workspace as the limit allows and the GPU
// has free (halving on failure).
struct SearchScratch {
  DeviceBuffer x, w, y, ws;
  size_t ws_bytes = 0;
};

// cuBLAS's GEMM time of each direction of the 1x1 convolution `plan`, back to back like the engines (with
// its gathers); none where it failed or its gathered pixels do not fit the workspace.
using GemmTimes = std::array<std::optional<float>, 3>;

// Per direction (ConvDirection's order), the legacy algorithms that ran, in the heuristic's order but for
// the one the rule picked (tuning/pick.h), which comes first.
using LegacyRanking = std::array<std::vector<AlgoChoice>, 3>;

// Where an inner plan's buffers sit in the workspace it is given.
struct InnerBuffers {
  void* x;
  void* w;
  void* inner_workspace;
};

// The timing harness (tuning/cuda_timing.h) on the backend's stream, for calls that return a cuDNN status.
template <typename Run>
std::optional<float> time_calls(const CudaBackend& backend, const Run& run,
                                float give_up_ms = std::numeric_limits<float>::infinity()) {
  return tuning::time_calls(
      backend.stream(), backend.search_gate(), [&] { return run() == CUDNN_STATUS_SUCCESS; }, give_up_ms);
}
using tuning::give_up_time;

// Before a pick: the candidates whose times would decide it by a hair (tuning::ambiguous_contenders) are
// timed again, in more rounds and interleaved (tuning::time_interleaved), and their times in `ms` replaced
// by those (infinity for one that fails). `run(i)` calls candidate i once and returns a cuDNN status.
// Returns how many were looked at again.
template <typename Run>
size_t look_again_at_close_times(const CudaBackend& backend, std::vector<double>& ms, const Run& run) {
  const std::vector<size_t> contenders = tuning::ambiguous_contenders(ms);
  if (contenders.empty()) return 0;
  const std::vector<std::optional<float>> again =
      tuning::time_interleaved(backend.stream(), backend.search_gate(), contenders.size(),
                               [&](size_t k) { return run(contenders[k]) == CUDNN_STATUS_SUCCESS; });
  for (size_t k = 0; k < contenders.size(); ++k) {
    log_debug("  looked at again: candidate {} {:.4f} -> {:.4f} ms", contenders[k], ms[contenders[k]],
              again[k] ? static_cast<double>(*again[k]) : INFINITY);
    ms[contenders[k]] = again[k] ? static_cast<double>(*again[k]) : INFINITY;
  }
  return contenders.size();
}

// ---- the GEMM's calls and times (gemm.cc) ----
cublasStatus_t run_gemm(const CudaBackend& backend, const ConvGeometry& g, ConvDirection d, void* x, void* w,
                        void* y, bool add, void* workspace);
GemmTimes time_gemm(const CudaBackend& backend, const CudaConvPlan& plan, const SearchScratch& scratch,
                    const std::string& key);

// ---- the plan (plan.cc) ----
bool uses_graph_engines(const ConvGeometry& g, const CudaOptions& o);
ConvKey make_key(const ConvGeometry& g, const CudaBackend& backend);
cudnnMathType_t search_math(DType dtype, bool allow_tf32);
const char* math_name(cudnnMathType_t math);
const char* forward_algo_name(int algo);
const char* backward_data_algo_name(int algo);
const char* backward_filter_algo_name(int algo);
const CudaConvPlan& as_cuda_plan(const ConvPlan& plan);
void check_geometry(const ConvGeometry& g);
void set_conv_desc(cudnnConvolutionDescriptor_t desc, const ConvGeometry& g, cudnnMathType_t math);
cudnnMathType_t execution_math(const ConvGeometry& g, bool allow_tf32, cudnnMathType_t found);
std::unique_ptr<CudaConvPlan> new_plan(const CudaBackend& backend, const ConvGeometry& g);
void set_execution(const CudaBackend& backend, CudaConvPlan& plan, ConvDirection d, AlgoChoice& a);
void finish(const CudaBackend& backend, CudaConvPlan& plan);
void assume_workspace_limit(CudaConvPlan& p, size_t limit);

// ---- the algorithm cache's entries (cache_entries.cc) ----
std::string stored_choice_key(const ConvGeometry& g, CudaBackend& backend);
nlohmann::json engine_to_json(const std::optional<GraphEngine>& engine);
std::optional<GraphEngine> engine_from_json(const nlohmann::json& j);
nlohmann::json choice_to_json(const ConvChoice& c);
std::optional<ConvChoice> choice_from_json(const nlohmann::json& j);

// ---- the search (search.cc) ----
SearchScratch search_scratch(const CudaBackend& backend, const ConvGeometry& g);
Scaling direction_scaling(const ConvGeometry& g, ConvDirection d);
void note_close_call(const CudaBackend& backend, const std::string& key, const char* what,
                     const tuning::Pick& pick);
LegacyRanking search_legacy(const CudaBackend& backend, CudaConvPlan& plan, const SearchScratch& scratch,
                            const GemmTimes& gemm, const std::string& key);
void search_graph_engines(const CudaBackend& backend, CudaConvPlan& plan, const LegacyRanking& ranking,
                          const SearchScratch& scratch, const GemmTimes& gemm, bool force,
                          const std::string& key);
void choose_gemm(const CudaBackend& backend, CudaConvPlan& plan, const GemmTimes& times,
                 const SearchScratch& scratch, bool force, const std::string& key);
std::unique_ptr<CudaConvPlan> searched_plan(CudaBackend& backend, const ConvGeometry& g);

// ---- the input as 2x2 blocks (space_to_depth.cc) ----
std::vector<InputForm> input_forms(const ConvGeometry& g, const CudaOptions& o);
void to_inner_input(const ConvGeometry& g, const InputForm& f, const void* x, void* dst, cudaStream_t stream);
void to_inner_filter(const ConvGeometry& g, const InputForm& f, const void* w, void* dst,
                     cudaStream_t stream);
void from_inner_input_grad(const ConvGeometry& g, const InputForm& f, const void* src, void* dx,
                           bool accumulate, cudaStream_t stream);
void from_inner_filter_grad(const ConvGeometry& g, const InputForm& f, const void* src, void* dw,
                            bool accumulate, cudaStream_t stream);
InnerBuffers inner_buffers(const CudaConvPlan& p, void* workspace, const char* op);
void take_input_form(CudaBackend& backend, const ConvGeometry& g, CudaConvPlan& plan);

// ---- the forward with its output's statistics (statistics.cc) ----
bool statistics_shape(const ConvGeometry& g, const CudaOptions& o);
std::shared_ptr<const GraphPlan> choose_statistics_engine(CudaBackend& backend, CudaConvPlan& plan);

// ---- the calls (execute.cc) ----
const GraphPlan* graph_plan_for(const CudaConvPlan& p, ConvDirection direction,
                                std::initializer_list<const void*> tensors, Accumulate accumulate);
cudnnStatus_t run_legacy(cudnnHandle_t handle, const CudaConvPlan& p, ConvDirection d, const AlgoChoice& a,
                         void* x, void* w, void* y, void* workspace, const Scaling& s);
void run_direction(const CudaBackend& backend, const CudaConvPlan& p, ConvDirection d, void* x, void* w,
                   void* y, Accumulate accumulate, void* workspace, const char* op);

}  // namespace dlbench::cuda::conv
