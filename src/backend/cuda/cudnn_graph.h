// One convolution direction on cuDNN's graph (backend) API: the operation as a one-node graph, the engines
// cuDNN's heuristics offer for it, and an execution plan of one of them.
//
// cuDNN's legacy API (cudnnConvolutionForward & co.) reaches the kernels behind its fixed algorithm
// numbers; the graph API reaches every engine cuDNN has for a graph. conv/search.cc times both and runs the
// faster (--conv-graph). What that is worth, measured on an H200 with cuDNN 9.19 (bench/results/
// convolution-algorithms): timed as single calls on a stream (as cudnnFind and
// bench/kernels/conv_bn_fusion_probe.cu time them), engines looked up to 4x faster for ResNet-50's 1x1
// FP16 convolutions at batch 256; timed back to back, the legacy algorithm and the engine ran the same
// 0.04 ms there: the difference was the legacy API's host work per call, which a CUDA graph does not
// repeat. In the ResNet-50 step (one CUDA graph) engines chosen by back-to-back times gave 0.3-0.9%.
//
// An engine is kept as numbers (GraphEngine: its global index and knob choices), so that a choice can be
// stored in --algorithm-cache and rebuilt in another process; a rebuilt engine cuDNN refuses is dropped.
// Tensors have fixed unique ids: 1 the convolution's input (x, or dx), 2 the filter (w, or dw), 3 its
// output (y, or dy), whichever direction runs; a forward with its output's statistics adds 4 (the sums)
// and 5 (the sums of squares).
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace dlbench::cuda {

// A cuDNN backend descriptor owned for its lifetime.
class BackendDescriptor {
 public:
  explicit BackendDescriptor(cudnnBackendDescriptorType_t type);
  ~BackendDescriptor();
  BackendDescriptor(const BackendDescriptor&) = delete;
  BackendDescriptor& operator=(const BackendDescriptor&) = delete;
  BackendDescriptor(BackendDescriptor&& other) noexcept : desc_(std::exchange(other.desc_, nullptr)) {}
  BackendDescriptor& operator=(BackendDescriptor&& other) noexcept;
  cudnnBackendDescriptor_t get() const { return desc_; }

  // Setters throw dlbench::Error naming the attribute's purpose (`what`) when cuDNN refuses.
  BackendDescriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                         const void* values, const char* what);
  template <typename T>
  BackendDescriptor& set_one(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, T value,
                             const char* what) {
    return set(name, type, 1, &value, what);
  }
  BackendDescriptor& set_descriptor(cudnnBackendAttributeName_t name, const BackendDescriptor& other,
                                    const char* what);
  BackendDescriptor& finalize(const char* what);
  // Finalizes, returning cuDNN's status instead of throwing (an engine that cannot run a graph).
  cudnnStatus_t try_finalize();

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
};

// The engine configurations cuDNN's heuristics in `mode` list for an operation graph, best first; empty
// when they cannot place it (CUDNN_HEUR_MODE_FALLBACK then may).
std::vector<BackendDescriptor> heuristic_engine_configs(const BackendDescriptor& graph,
                                                        cudnnBackendHeurMode_t mode);

enum class ConvDirection { forward, backward_data, backward_filter };
const char* direction_name(ConvDirection direction);

// An engine configuration as numbers: the engine's global index, then its knobs as (type, value).
struct GraphEngine {
  int64_t index = -1;
  std::vector<std::pair<int64_t, int64_t>> knobs;
  bool operator==(const GraphEngine&) const = default;
};

// The numbers of an engine configuration the heuristics gave (heuristic_engine_configs); nullopt when
// cuDNN does not say them.
std::optional<GraphEngine> engine_config_numbers(cudnnBackendDescriptor_t config);

// An engine configuration rebuilt from its numbers for `graph`, with the engine and knob choices it names,
// kept alive as long as it is (as cudnn-frontend keeps them); nullopt when cuDNN refuses the engine or a
// knob.
struct EngineConfig {
  BackendDescriptor engine;
  std::vector<BackendDescriptor> knobs;
  BackendDescriptor config;
};
std::optional<EngineConfig> engine_config(const BackendDescriptor& graph, const GraphEngine& numbers);

// Every configuration of engine `engine_index` for `graph` that its knobs' ranges allow
// (CUDNN_ATTR_ENGINE_KNOB_INFO: each knob from its minimum to its maximum by its stride), at most `limit`
// of them. The heuristics list a few of these; a probe may time them all. Empty when the engine does not
// take the graph.
std::vector<GraphEngine> knob_space(const BackendDescriptor& graph, int64_t engine_index, size_t limit);

// What an engine says of its arithmetic and behaviour.
struct EngineNotes {
  bool tensor_cores = false;       // TF32 for FP32 data
  bool reduced_precision = false;  // reduces in the data's precision (FP16 sums) or converts inputs down
  bool runtime_compiled = false;   // compiles its kernel when the plan is built
  bool nondeterministic = false;
};

// Whether the graph of `direction` adds its result to its output (beta 1): the backward data of a
// convolution whose input gradient accumulates (ConvGeometry::accumulates_input_grad).
inline bool graph_adds_to_output(const ConvGeometry& g, ConvDirection direction) {
  return direction == ConvDirection::backward_data && g.accumulates_input_grad;
}

// One direction of the convolution `g` as a graph: the tensors of the layout g.layout (filters KRSC for
// NHWC, KCRS for NCHW), FP32 compute, alpha 1 and beta 0 (the result overwrites its output; beta 1 where
// graph_adds_to_output). Throws
// dlbench::Error when cuDNN refuses the graph. Not for FP64 (callers keep the legacy API there).
class ConvGraph {
 public:
  // `with_statistics` (forward only): a genstats node on y as well, the sum and the sum of squares of each
  // output channel over N, H, W in FP32 (tensors 4 and 5, [1, K, 1, 1]), for the batch norm after the
  // convolution (Backend::conv_forward_with_statistics).
  ConvGraph(cudnnHandle_t handle, const ConvGeometry& g, ConvDirection direction,
            bool with_statistics = false);

  // The engines cuDNN's heuristics rank for this graph (mode A; the fallback list when A has none), in
  // their order, without those whose arithmetic is not the precision's: no reduction or input conversion
  // below FP32, and no tensor cores unless `tensor_cores_allowed` (FP32 without TF32). At most `limit`.
  std::vector<GraphEngine> candidates(bool tensor_cores_allowed, size_t limit) const;

  cudnnHandle_t handle() const { return handle_; }
  const BackendDescriptor& graph() const { return graph_; }

 private:
  cudnnHandle_t handle_;
  BackendDescriptor graph_;
};

// An execution plan of one engine for a ConvGraph.
class GraphPlan {
 public:
  // Null when cuDNN does not build this engine for this graph (e.g. an engine stored by another version).
  static std::unique_ptr<GraphPlan> build(const ConvGraph& graph, const GraphEngine& engine);

  const GraphEngine& engine() const { return engine_; }
  const EngineNotes& notes() const { return notes_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  // Runs on the handle's stream. x, w, y are the direction's tensors in the order of the unique ids
  // (forward: x, w, y; backward data: dx, w, dy; backward filter: x, dw, dy); cuDNN writes only the
  // direction's output.
  cudnnStatus_t execute(const void* x, const void* w, const void* y, void* workspace) const;
  // A graph made with_statistics: also the sums and the sums of squares, K floats each (written, not added
  // to).
  cudnnStatus_t execute(const void* x, const void* w, const void* y, void* workspace, float* sums,
                        float* square_sums) const;
  // Tensors must be aligned to this many bytes (what the graph's tensors declare).
  static constexpr size_t kAlignment = 16;

 private:
  static std::unique_ptr<GraphPlan> build_or_throw(const ConvGraph& graph, const GraphEngine& engine);
  GraphPlan(cudnnHandle_t handle, BackendDescriptor plan, GraphEngine engine, EngineNotes notes,
            size_t workspace_bytes)
      : handle_(handle),
        plan_(std::move(plan)),
        engine_(std::move(engine)),
        notes_(notes),
        workspace_bytes_(workspace_bytes) {}
  cudnnHandle_t handle_;
  BackendDescriptor plan_;
  GraphEngine engine_;
  EngineNotes notes_;
  size_t workspace_bytes_;
};

// "engine 12 (knobs 3=1 5=0)": how describe() names an engine.
std::string engine_name(const GraphEngine& engine);

}  // namespace dlbench::cuda
