// The timed search of a convolution's directions: candidates timed back to back on scratch buffers
// allocated for the search and freed after it (tuning/cuda_timing.h: as the step's CUDA graph runs them),
// cuBLAS's GEMM first where the shape is one (gemm.cc), then the legacy algorithms cuDNN's heuristic lists,
// then the graph-API engines. A candidate far slower than the fastest so far is given up after one call.
// A search costs tens to hundreds of milliseconds, and a ResNet repeats a handful of shapes dozens of
// times, so its result goes to the launch's algorithm cache: each distinct shape is searched once, and the
// ranks of one process (--gpus N) run the same choice. Of the candidates whose workspace fits the backend's
// conv_workspace_limit() (--conv-workspace-mb), the first in a fixed order within the timing noise of the
// fastest wins (tuning/pick.h), so two processes choose alike.
//
// Graph-API engines (--conv-graph auto, the default): each direction is also built as a one-operation graph
// (cudnn_graph.h) and the engines cuDNN's heuristics rank first are timed on the same clock. An engine the
// rule picks over the legacy algorithm runs instead — except when a tensor is not aligned as the graph
// declares, or a call's Accumulate is not the one the plan was made for (the legacy algorithm then runs).
// The backward data of a convolution whose input gradient accumulates (a residual block's first
// convolution: ConvGeometry::accumulates_input_grad) is searched with beta = 1, the legacy algorithm too:
// engines add in their epilogue, where legacy algorithms take one more pass over dx. "off" keeps the legacy
// API alone; "force" takes an engine whatever the legacy time (tests). What each measured:
// docs/PERFORMANCE.md.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "backend/cuda/conv/conv_plan.h"
#include "core/log.h"

namespace dlbench::cuda::conv {

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

// The output scaling of direction `d`'s search and graph: beta 1 where the graph adds to its output.
Scaling direction_scaling(const ConvGeometry& g, ConvDirection d) {
  return Scaling(g.dtype, 1.0, graph_adds_to_output(g, d) ? 1.0 : 0.0);
}

// Names a pick whose two fastest candidates were close in the run's result (through the cache).
void note_close_call(const CudaBackend& backend, const std::string& key, const char* what,
                     const tuning::Pick& pick) {
  if (pick.close())
    backend.algorithms().record_close_call(
        {fmt::format("{} {}", key, what), pick.ms, pick.fastest_ms, pick.second_ms});
}

namespace {

// Moves the candidate the rule picks (tuning/pick.h: the first in `timed`'s order within the timing noise
// of the fastest, times near the margin's edge looked at again by `run(algorithm)`) to the front of
// `timed`; nullopt when it is empty.
template <typename Run>
std::optional<tuning::Pick> pick_first(const CudaBackend& backend, std::vector<AlgoChoice>& timed,
                                       const Run& run) {
  std::vector<double> ms;
  for (const AlgoChoice& a : timed) ms.push_back(a.time_ms);
  if (look_again_at_close_times(backend, ms, [&](size_t i) { return run(timed[i]); }))
    for (size_t i = 0; i < timed.size(); ++i)
      timed[i].time_ms = timed[i].legacy_ms = static_cast<float>(ms[i]);
  const std::optional<tuning::Pick> pick = tuning::pick_within_noise(ms);
  if (pick)  // the others keep their order behind it
    for (size_t k = pick->index; k > 0; --k) std::swap(timed[k], timed[k - 1]);
  return pick;
}

}  // namespace

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
    std::vector<std::pair<int, cudnnMathType_t>> listed, without_tensor_cores;
    // Never CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION for FP32 data: it lets cuDNN compute in FP16. For FP16
    // and BF16 data the tensor cores' math first where the heuristic lists it: its algorithms without them
    // never came within 2.3x of the fastest (eight fresh ResNet-50 fp16 searches on an H200, 72 shapes
    // and directions each), and timing them took 5.6 s of each first start
    // (bench/results/algorithm-search/2026-12-03-noise-and-margin). The others are timed only where no
    // tensor-core algorithm runs within the workspace (ResNet-50's stem at 2,672 images in fp16).
    const bool half = g.dtype == DType::f16 || g.dtype == DType::bf16;
    auto take = [&](const auto* results, int returned) {
      bool tensor_op_listed = false;
      for (int i = 0; i < returned; ++i)
        tensor_op_listed |=
            results[i].status == CUDNN_STATUS_SUCCESS && results[i].mathType == CUDNN_TENSOR_OP_MATH;
      for (int i = 0; i < returned; ++i) {
        if (results[i].status != CUDNN_STATUS_SUCCESS ||
            (g.dtype == DType::f32 && results[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
          continue;
        const bool second = half && tensor_op_listed && results[i].mathType != CUDNN_TENSOR_OP_MATH;
        (second ? without_tensor_cores : listed)
            .emplace_back(static_cast<int>(results[i].algo), results[i].mathType);
      }
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
    auto time_each = [&](const std::vector<std::pair<int, cudnnMathType_t>>& candidates) {
      for (const auto& [algo, math] : candidates) {
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
        log_debug("conv {} {} legacy {} math {}: {:.4f} ms", key, direction_name(d), a.algo,
                  math_name(a.math), *ms);
        a.time_ms = a.legacy_ms = *ms;
        ranked.push_back(a);
        if (!fastest || *ms < *fastest) fastest = *ms;
      }
    };
    time_each(listed);
    if (ranked.empty()) time_each(without_tensor_cores);
    auto run = [&](AlgoChoice& a) {
      set_execution(backend, plan, d, a);
      return run_legacy(handle, plan, d, a, x, w, y, ws, s);
    };
    if (const std::optional<tuning::Pick> pick = pick_first(backend, ranked, run))
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
    std::vector<std::unique_ptr<GraphPlan>> built(1);  // kept for a second look at close times
    for (const GraphEngine& engine : engines) {
      // Engine 0, cuDNN's generic fallback, on FP32 data: never within 8.9x of the fastest in two fresh
      // ResNet-50 fp32 searches on an H200, at 26-830 ms a call; its two timed calls were 5.7 s of each
      // first start (bench/results/algorithm-search/2026-12-03-noise-and-margin).
      if (engine.index == 0 && g.dtype == DType::f32 && !force) continue;
      std::unique_ptr<GraphPlan> candidate = GraphPlan::build(*graph, engine);
      if (!candidate || candidate->workspace_bytes() > limit) continue;
      // With `force` an engine must be chosen: each is timed in full.
      const std::optional<float> ms = time_calls(
          backend, [&] { return candidate->execute(x, w, y, ws); },
          force ? std::numeric_limits<float>::infinity() : give_up_time(fastest));
      if (!ms) continue;
      log_debug("conv {} {} {}: {:.4f} ms", key, direction_name(d), engine_name(engine), *ms);
      timed.push_back(engine);
      ms_of.push_back(*ms);
      built.push_back(std::move(candidate));
      fastest = std::min(fastest, *ms);
    }
    const Scaling s = direction_scaling(g, d);
    look_again_at_close_times(backend, ms_of, [&](size_t i) {
      return i == 0 ? run_legacy(handle, plan, d, a, x, w, y, ws, s) : built[i]->execute(x, w, y, ws);
    });
    if (!force && std::isfinite(ms_of[0])) a.legacy_ms = static_cast<float>(ms_of[0]);
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
void choose_gemm(const CudaBackend& backend, CudaConvPlan& plan, const GemmTimes& times,
                 const SearchScratch& scratch, bool force, const std::string& key) {
  const ConvGeometry& g = plan.geometry;
  void *x = scratch.x.get(), *w = scratch.w.get(), *y = scratch.y.get(), *ws = scratch.ws.get();
  for (ConvDirection d : kDirections) {
    AlgoChoice& a = direction_choice(plan.choice, d);
    const std::optional<float>& ms = times[static_cast<size_t>(d)];
    if (!ms) continue;
    std::vector<double> order{static_cast<double>(a.run_ms()), static_cast<double>(*ms)};
    if (!force) {
      // Candidate 0 is what the direction runs: the legacy algorithm, or its engine (built again here
      // only if the two times are close enough to look at again); candidate 1 the GEMM.
      std::optional<ConvGraph> graph;
      std::unique_ptr<GraphPlan> engine_plan;
      look_again_at_close_times(backend, order, [&](size_t i) -> cudnnStatus_t {
        if (i == 1)
          return run_gemm(backend, g, d, x, w, y, graph_adds_to_output(g, d), ws) == CUBLAS_STATUS_SUCCESS
                     ? CUDNN_STATUS_SUCCESS
                     : CUDNN_STATUS_EXECUTION_FAILED;
        if (!a.engine) {
          set_execution(backend, plan, d, a);
          return run_legacy(backend.cudnn(), plan, d, a, x, w, y, ws, direction_scaling(g, d));
        }
        if (!graph) {
          graph.emplace(backend.cudnn(), g, d);
          engine_plan = GraphPlan::build(*graph, *a.engine);
        }
        return engine_plan ? engine_plan->execute(x, w, y, ws) : CUDNN_STATUS_NOT_SUPPORTED;
      });
    }
    const std::optional<tuning::Pick> pick = tuning::pick_within_noise(order);
    if (!force) note_close_call(backend, key, fmt::format("{} gemm", direction_name(d)).c_str(), *pick);
    if (force || pick->index == 1) {
      a.gemm = true;
      a.gemm_ms = static_cast<float>(order[1]);
    }
  }
}

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
    const GemmTimes gemm = with_gemm ? time_gemm(backend, *plan, scratch, key) : GemmTimes{};
    const LegacyRanking ranking = search_legacy(backend, *plan, scratch, gemm, key);
    plan->choice = ConvChoice{ranking[0].front(), ranking[1].front(), ranking[2].front()};
    if (with_engines)
      search_graph_engines(backend, *plan, ranking, scratch, gemm, o.conv_graph == KernelChoice::force, key);
    if (with_gemm) choose_gemm(backend, *plan, gemm, scratch, o.conv_gemm == KernelChoice::force, key);
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

}  // namespace dlbench::cuda::conv
