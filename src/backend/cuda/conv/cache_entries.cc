// A convolution's choice as the algorithm cache (backend/tuning/algorithm_cache.h) holds it: its key (what
// the choice depends on) and its JSON value. An entry that is not one reads as none: searched again.
#include "backend/cuda/conv/conv_plan.h"

namespace dlbench::cuda::conv {

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

namespace {

constexpr const char* kDirectionKeys[] = {"forward", "backward_data", "backward_filter"};

}  // namespace

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

}  // namespace dlbench::cuda::conv
