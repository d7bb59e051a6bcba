// The forward with its output's statistics (--conv-statistics auto, the default; off; force): a
// convolution planned with ConvGeometry::output_statistics, where a batch norm reads its output, also
// searches its forward as a graph with a genstats node (per-channel sums of y and y^2 in the epilogue) and
// runs that in training where it costs less than the statistics pass it saves (what that saved:
// docs/PERFORMANCE.md).
#include <algorithm>
#include <cmath>

#include "backend/cuda/batchnorm_launch.h"
#include "backend/cuda/conv/conv_plan.h"
#include "backend/cuda/kernels.h"
#include "core/log.h"

namespace dlbench::cuda::conv {

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

}  // namespace

// Whether cuDNN's statistics engines may take `g`: graph engines on, the input as it is (no inner plan),
// and the square sums, which follow the sums, on a 16-byte boundary.
bool statistics_shape(const ConvGeometry& g, const CudaOptions& o) {
  return g.output_statistics && o.conv_statistics != KernelChoice::off && uses_graph_engines(g, o) &&
         g.out_channels % 4 == 0;
}

namespace {

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
    log_debug("conv {} statistics forward and its own pass: {:.4f} ms", key, worth);
  }
  std::vector<GraphEngine> worth_it;
  std::vector<std::unique_ptr<GraphPlan>> plans;  // worth_it's, for a second look at close times
  std::vector<double> ms_of;
  try {
    const ConvGraph graph(backend.cudnn(), g, ConvDirection::forward, /*with_statistics=*/true);
    const bool tensor_cores = g.dtype != DType::f32 || backend.allow_tf32();
    for (const GraphEngine& engine : graph.candidates(tensor_cores, kGraphCandidates)) {
      std::unique_ptr<GraphPlan> candidate = GraphPlan::build(graph, engine);
      if (!candidate || candidate->workspace_bytes() > limit) continue;
      const std::optional<float> ms = time_calls(
          backend,
          [&] {
            return candidate->execute(scratch.x.get(), scratch.w.get(), scratch.y.get(), scratch.ws.get(),
                                      sum, sum + g.out_channels);
          },
          give_up_time(worth));
      if (ms) log_debug("conv {} statistics {}: {:.4f} ms", key, engine_name(engine), *ms);
      if (ms && *ms < worth) {
        worth_it.push_back(engine);
        plans.push_back(std::move(candidate));
        ms_of.push_back(*ms);
      }
    }
    look_again_at_close_times(backend, ms_of, [&](size_t i) {
      return plans[i]->execute(scratch.x.get(), scratch.w.get(), scratch.y.get(), scratch.ws.get(), sum,
                               sum + g.out_channels);
    });
  } catch (const Error&) {
    // cuDNN has no such graph for this shape: the batch norm keeps its statistics pass
  }
  CUDA_CHECK(cudaStreamSynchronize(backend.stream()));  // the scratch buffers are freed next
  const std::optional<tuning::Pick> pick = tuning::pick_within_noise(ms_of);
  if (!pick) return {};
  note_close_call(backend, key, "fwd with statistics", *pick);
  return {worth_it[pick->index], static_cast<float>(pick->ms)};
}

}  // namespace

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

}  // namespace dlbench::cuda::conv

namespace dlbench::cuda {

using namespace conv;

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

}  // namespace dlbench::cuda
