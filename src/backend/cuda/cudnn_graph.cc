// cuDNN's graph API for one convolution direction (cudnn_graph.h says what and why).
#include "backend/cuda/cudnn_graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>
#include <vector>

#include "backend/cuda/cuda_check.h"

namespace dlbench::cuda {

BackendDescriptor::BackendDescriptor(cudnnBackendDescriptorType_t type) {
  CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &desc_));
}

BackendDescriptor::~BackendDescriptor() {
  if (desc_) cudnnBackendDestroyDescriptor(desc_);
}

BackendDescriptor& BackendDescriptor::operator=(BackendDescriptor&& other) noexcept {
  if (this != &other) {
    if (desc_) cudnnBackendDestroyDescriptor(desc_);
    desc_ = std::exchange(other.desc_, nullptr);
  }
  return *this;
}

BackendDescriptor& BackendDescriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                                          int64_t count, const void* values, const char* what) {
  const cudnnStatus_t status = cudnnBackendSetAttribute(desc_, name, type, count, values);
  if (status != CUDNN_STATUS_SUCCESS) throw_cudnn_failure(__FILE__, __LINE__, what, status);
  return *this;
}

BackendDescriptor& BackendDescriptor::set_descriptor(cudnnBackendAttributeName_t name,
                                                     const BackendDescriptor& other, const char* what) {
  cudnnBackendDescriptor_t d = other.get();
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d, what);
}

BackendDescriptor& BackendDescriptor::finalize(const char* what) {
  const cudnnStatus_t status = cudnnBackendFinalize(desc_);
  if (status != CUDNN_STATUS_SUCCESS) throw_cudnn_failure(__FILE__, __LINE__, what, status);
  return *this;
}

cudnnStatus_t BackendDescriptor::try_finalize() { return cudnnBackendFinalize(desc_); }

const char* direction_name(ConvDirection direction) {
  switch (direction) {
    case ConvDirection::forward:
      return "forward";
    case ConvDirection::backward_data:
      return "backward-data";
    case ConvDirection::backward_filter:
      return "backward-filter";
  }
  return "?";
}

namespace {

enum : int64_t { kInputId = 1, kFilterId = 2, kOutputId = 3, kSumsId = 4, kSquareSumsId = 5 };

cudnnDataType_t graph_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    case DType::f16:
      return CUDNN_DATA_HALF;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    default:
      DLB_CHECK(false, "conv graph: dtype {} is not FP32, FP16 or BF16", dtype_name(dtype));
  }
  return CUDNN_DATA_FLOAT;
}

// A packed 4-D tensor of logical dims [n, c, h, w] in `layout` (channels innermost for NHWC). Filters
// [k, c, r, s] use the same strides: KRSC for NHWC, KCRS for NCHW, as the legacy filter formats.
BackendDescriptor tensor(int64_t uid, DType dtype, Layout layout, int64_t n, int64_t c, int64_t h,
                         int64_t w) {
  const std::array<int64_t, 4> dims{n, c, h, w};
  const std::array<int64_t, 4> strides = layout == Layout::nhwc
                                             ? std::array<int64_t, 4>{h * w * c, 1, w * c, c}
                                             : std::array<int64_t, 4>{c * h * w, h * w, w, 1};
  BackendDescriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.set_one(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, graph_dtype(dtype), "tensor dtype")
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data(), "tensor dims")
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data(), "tensor strides")
      .set_one(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid, "tensor id")
      .set_one(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64,
               static_cast<int64_t>(GraphPlan::kAlignment), "tensor alignment")
      .finalize("conv graph tensor");
  return t;
}

BackendDescriptor convolution(const ConvGeometry& g) {
  const std::array<int64_t, 2> dilations{1, 1}, strides{g.stride_h, g.stride_w}, pads{g.pad_h, g.pad_w};
  BackendDescriptor conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  conv.set_one(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT, "compute type")
      .set_one(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, CUDNN_CROSS_CORRELATION, "mode")
      .set_one(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, int64_t{2}, "spatial dims")
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilations.data(), "dilations")
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, strides.data(), "strides")
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pads.data(), "paddings")
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pads.data(), "paddings")
      .finalize("conv graph convolution");
  return conv;
}

// The direction's operation: its descriptor type and attribute names differ, its three tensors are always
// x, w, y (forward: X, W, Y; backward data: DX, W, DY; backward filter: X, DW, DY).
struct OperationAttributes {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
  const char* what;
};

OperationAttributes operation_attributes(ConvDirection direction) {
  switch (direction) {
    case ConvDirection::forward:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
              "conv graph forward operation"};
    case ConvDirection::backward_data:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
              "conv graph backward-data operation"};
    case ConvDirection::backward_filter:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
              "conv graph backward-filter operation"};
  }
  DLB_CHECK(false, "conv graph: unknown direction");
  return {};
}

// The operation of `direction` with alpha 1 and beta 0 (its result overwrites its output), or beta 1 for
// the backward data of a convolution whose input gradient accumulates (added in the engine's epilogue,
// one more read of dx, instead of a second pass over it).
BackendDescriptor conv_operation(const ConvGeometry& g, ConvDirection direction, const BackendDescriptor& x,
                                 const BackendDescriptor& w, const BackendDescriptor& y) {
  const BackendDescriptor conv = convolution(g);
  const OperationAttributes a = operation_attributes(direction);
  const float alpha = 1.f, beta = graph_adds_to_output(g, direction) ? 1.f : 0.f;
  BackendDescriptor op(a.type);
  op.set_descriptor(a.x, x, "x")
      .set_descriptor(a.w, w, "w")
      .set_descriptor(a.y, y, "y")
      .set_descriptor(a.conv, conv, "conv")
      .set_one(a.alpha, CUDNN_TYPE_FLOAT, alpha, "alpha")
      .set_one(a.beta, CUDNN_TYPE_FLOAT, beta, "beta")
      .finalize(a.what);
  return op;
}

// The genstats node: per channel of y, its sum and its sum of squares (FP32, [1, K, 1, 1]).
BackendDescriptor statistics_operation(const BackendDescriptor& y, const BackendDescriptor& sums,
                                       const BackendDescriptor& square_sums) {
  BackendDescriptor op(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
  op.set_one(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, CUDNN_GENSTATS_SUM_SQSUM,
             "genstats mode")
      .set_one(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT,
               "genstats precision")
      .set_descriptor(CUDNN_ATTR_OPERATION_GENSTATS_XDESC, y, "genstats input")
      .set_descriptor(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, sums, "genstats sums")
      .set_descriptor(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, square_sums, "genstats square sums")
      .finalize("conv graph statistics operation");
  return op;
}

BackendDescriptor operation_graph(cudnnHandle_t handle, const ConvGeometry& g, ConvDirection direction,
                                  bool with_statistics) {
  DLB_CHECK(!with_statistics || direction == ConvDirection::forward,
            "conv graph: statistics are the forward's output's");
  const BackendDescriptor x = tensor(kInputId, g.dtype, g.layout, g.batch, g.in_channels, g.in_h, g.in_w);
  const BackendDescriptor w =
      tensor(kFilterId, g.dtype, g.layout, g.out_channels, g.in_channels, g.kernel_h, g.kernel_w);
  const BackendDescriptor y =
      tensor(kOutputId, g.dtype, g.layout, g.batch, g.out_channels, g.out_h(), g.out_w());
  std::vector<BackendDescriptor> ops;
  ops.push_back(conv_operation(g, direction, x, w, y));
  if (with_statistics) {
    const BackendDescriptor sums = tensor(kSumsId, DType::f32, g.layout, 1, g.out_channels, 1, 1);
    const BackendDescriptor square_sums =
        tensor(kSquareSumsId, DType::f32, g.layout, 1, g.out_channels, 1, 1);
    ops.push_back(statistics_operation(y, sums, square_sums));
  }
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const BackendDescriptor& op : ops) raw.push_back(op.get());
  BackendDescriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph
      .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw.size()),
           raw.data(), "graph ops")
      .set_one(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, handle, "graph handle")
      .finalize("conv graph");
  return graph;
}

EngineNotes notes_of(cudnnBackendDescriptor_t engine) {
  EngineNotes notes;
  int64_t count = 0;
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> numerical{};
  if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               static_cast<int64_t>(numerical.size()), &count,
                               numerical.data()) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < count; ++i) {
      switch (numerical[static_cast<size_t>(i)]) {
        case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
          notes.tensor_cores = true;
          break;
        case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
        case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
          notes.reduced_precision = true;
          break;
        case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC:
          notes.nondeterministic = true;
          break;
        default:
          break;
      }
    }
  }
  std::array<cudnnBackendBehaviorNote_t, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT> behaviour{};
  if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               static_cast<int64_t>(behaviour.size()), &count,
                               behaviour.data()) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < count; ++i)
      if (behaviour[static_cast<size_t>(i)] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION)
        notes.runtime_compiled = true;
  }
  return notes;
}

// `count` fresh descriptors of one type with their raw handles, for an attribute cuDNN fills as an array.
struct DescriptorArray {
  std::vector<BackendDescriptor> owned;
  std::vector<cudnnBackendDescriptor_t> raw;
  DescriptorArray(cudnnBackendDescriptorType_t type, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
      owned.emplace_back(type);
      raw.push_back(owned.back().get());
    }
  }
  int64_t size() const { return static_cast<int64_t>(raw.size()); }
};

// Engine `index` for `graph`, finalized; nullopt when it does not take the graph.
std::optional<BackendDescriptor> finalized_engine(const BackendDescriptor& graph, int64_t index) {
  BackendDescriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  engine.set_descriptor(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph, "engine graph")
      .set_one(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, index, "engine index");
  if (engine.try_finalize() != CUDNN_STATUS_SUCCESS) return std::nullopt;
  return engine;
}

// An engine configuration from the heuristics as numbers, with its engine's notes.
std::optional<std::pair<GraphEngine, EngineNotes>> read_engine_config(cudnnBackendDescriptor_t config) {
  BackendDescriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t count = 0;
  if (cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count,
                               &e) != CUDNN_STATUS_SUCCESS)
    return std::nullopt;
  GraphEngine numbers;
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &count,
                               &numbers.index) != CUDNN_STATUS_SUCCESS)
    return std::nullopt;
  DescriptorArray choices(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, CUDNN_KNOB_TYPE_COUNTS);
  if (cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               choices.size(), &count, choices.raw.data()) != CUDNN_STATUS_SUCCESS)
    return std::nullopt;
  for (int64_t i = 0; i < count; ++i) {
    cudnnBackendKnobType_t type{};
    int64_t value = 0, got = 0;
    if (cudnnBackendGetAttribute(choices.raw[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                 CUDNN_TYPE_KNOB_TYPE, 1, &got, &type) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(choices.raw[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                                 CUDNN_TYPE_INT64, 1, &got, &value) != CUDNN_STATUS_SUCCESS)
      return std::nullopt;
    numbers.knobs.emplace_back(static_cast<int64_t>(type), value);
  }
  return std::make_pair(std::move(numbers), notes_of(e));
}

}  // namespace

std::vector<BackendDescriptor> heuristic_engine_configs(const BackendDescriptor& graph,
                                                        cudnnBackendHeurMode_t mode) {
  BackendDescriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heuristics.set_descriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "heuristics graph")
      .set_one(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, mode, "heuristics mode");
  if (heuristics.try_finalize() != CUDNN_STATUS_SUCCESS) return {};
  int64_t count = 0;
  if (cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               0, &count, nullptr) != CUDNN_STATUS_SUCCESS ||
      count <= 0)
    return {};
  DescriptorArray results(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, count);
  int64_t returned = 0;
  if (cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               count, &returned, results.raw.data()) != CUDNN_STATUS_SUCCESS)
    return {};
  results.owned.erase(results.owned.begin() + std::clamp<int64_t>(returned, 0, count), results.owned.end());
  return std::move(results.owned);
}

std::optional<GraphEngine> engine_config_numbers(cudnnBackendDescriptor_t config) {
  const auto read = read_engine_config(config);
  if (!read) return std::nullopt;
  return read->first;
}

std::optional<EngineConfig> engine_config(const BackendDescriptor& graph, const GraphEngine& numbers) {
  std::optional<BackendDescriptor> engine = finalized_engine(graph, numbers.index);
  if (!engine) return std::nullopt;
  std::vector<BackendDescriptor> knobs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const auto& [type, value] : numbers.knobs) {
    BackendDescriptor knob(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    knob.set_one(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE,
                 static_cast<cudnnBackendKnobType_t>(type), "knob type")
        .set_one(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, value, "knob value");
    if (knob.try_finalize() != CUDNN_STATUS_SUCCESS) return std::nullopt;
    raw.push_back(knob.get());
    knobs.push_back(std::move(knob));
  }
  BackendDescriptor config(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  config.set_descriptor(CUDNN_ATTR_ENGINECFG_ENGINE, *engine, "engine config");
  if (!raw.empty())
    config.set(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
               static_cast<int64_t>(raw.size()), raw.data(), "knob choices");
  if (config.try_finalize() != CUDNN_STATUS_SUCCESS) return std::nullopt;
  return EngineConfig{std::move(*engine), std::move(knobs), std::move(config)};
}

std::vector<GraphEngine> knob_space(const BackendDescriptor& graph, int64_t engine_index, size_t limit) {
  const std::optional<BackendDescriptor> engine = finalized_engine(graph, engine_index);
  if (!engine) return {};
  DescriptorArray infos(CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR, CUDNN_KNOB_TYPE_COUNTS);
  int64_t count = 0;
  if (cudnnBackendGetAttribute(engine->get(), CUDNN_ATTR_ENGINE_KNOB_INFO, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               infos.size(), &count, infos.raw.data()) != CUDNN_STATUS_SUCCESS)
    return {};
  struct Range {
    int64_t type, low, high, stride;
  };
  std::vector<Range> ranges;
  for (int64_t i = 0; i < count; ++i) {
    cudnnBackendKnobType_t type{};
    Range r{};
    int64_t got = 0;
    if (cudnnBackendGetAttribute(infos.raw[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_INFO_TYPE,
                                 CUDNN_TYPE_KNOB_TYPE, 1, &got, &type) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(infos.raw[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE,
                                 CUDNN_TYPE_INT64, 1, &got, &r.low) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(infos.raw[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE,
                                 CUDNN_TYPE_INT64, 1, &got, &r.high) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(infos.raw[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_INFO_STRIDE,
                                 CUDNN_TYPE_INT64, 1, &got, &r.stride) != CUDNN_STATUS_SUCCESS)
      return {};
    r.type = static_cast<int64_t>(type);
    r.stride = std::max<int64_t>(r.stride, 1);
    if (r.high >= r.low) ranges.push_back(r);
  }
  // The product of the ranges, the first knob varying fastest, as an odometer.
  std::vector<GraphEngine> space;
  std::vector<int64_t> value;
  for (const Range& r : ranges) value.push_back(r.low);
  while (space.size() < limit) {
    GraphEngine e;
    e.index = engine_index;
    for (size_t k = 0; k < ranges.size(); ++k) e.knobs.emplace_back(ranges[k].type, value[k]);
    space.push_back(std::move(e));
    size_t k = 0;
    for (; k < ranges.size(); ++k) {
      value[k] += ranges[k].stride;
      if (value[k] <= ranges[k].high) break;
      value[k] = ranges[k].low;
    }
    if (k == ranges.size()) break;  // every combination listed
  }
  return space;
}

ConvGraph::ConvGraph(cudnnHandle_t handle, const ConvGeometry& g, ConvDirection direction,
                     bool with_statistics)
    : handle_(handle), graph_(operation_graph(handle, g, direction, with_statistics)) {}

std::vector<GraphEngine> ConvGraph::candidates(bool tensor_cores_allowed, size_t limit) const {
  std::vector<GraphEngine> engines;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    const std::vector<BackendDescriptor> configs = heuristic_engine_configs(graph_, mode);
    for (size_t i = 0; i < configs.size() && engines.size() < limit; ++i) {
      const auto read = read_engine_config(configs[i].get());
      if (!read) continue;
      const auto& [engine, notes] = *read;
      if (notes.reduced_precision || (notes.tensor_cores && !tensor_cores_allowed)) continue;
      if (std::find(engines.begin(), engines.end(), engine) == engines.end()) engines.push_back(engine);
    }
    if (!engines.empty()) break;  // the fallback list is for graphs mode A cannot place
  }
  return engines;
}

std::unique_ptr<GraphPlan> GraphPlan::build(const ConvGraph& graph, const GraphEngine& numbers) {
  try {
    return build_or_throw(graph, numbers);
  } catch (const Error&) {
    return nullptr;  // cuDNN refused an attribute of this engine: as if it did not build
  }
}

std::unique_ptr<GraphPlan> GraphPlan::build_or_throw(const ConvGraph& graph, const GraphEngine& numbers) {
  const std::optional<EngineConfig> config = engine_config(graph.graph(), numbers);
  if (!config) return nullptr;
  BackendDescriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  cudnnHandle_t handle = graph.handle();
  plan.set_one(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, handle, "plan handle")
      .set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config->config, "plan engine");
  if (plan.try_finalize() != CUDNN_STATUS_SUCCESS) return nullptr;
  int64_t workspace = 0, got = 0;
  CUDNN_CHECK(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                       1, &got, &workspace));
  return std::unique_ptr<GraphPlan>(new GraphPlan(
      handle, std::move(plan), numbers, notes_of(config->engine.get()), static_cast<size_t>(workspace)));
}

cudnnStatus_t GraphPlan::execute(const void* x, const void* w, const void* y, void* workspace) const {
  return execute(x, w, y, workspace, nullptr, nullptr);
}

cudnnStatus_t GraphPlan::execute(const void* x, const void* w, const void* y, void* workspace, float* sums,
                                 float* square_sums) const {
  const std::array<int64_t, 5> ids{kInputId, kFilterId, kOutputId, kSumsId, kSquareSumsId};
  // The variant pack takes every tensor as non-const; cuDNN writes only the direction's outputs.
  const std::array<void*, 5> pointers{const_cast<void*>(x), const_cast<void*>(w), const_cast<void*>(y), sums,
                                      square_sums};
  const int64_t count = sums ? 5 : 3;
  BackendDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, count, ids.data(), "variant ids")
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, count, pointers.data(),
           "variant pointers")
      .set_one(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, workspace, "variant workspace")
      .finalize("conv graph variant pack");
  return cudnnBackendExecute(handle_, plan_.get(), pack.get());
}

std::string engine_name(const GraphEngine& engine) {
  std::string name = fmt::format("engine {}", engine.index);
  if (!engine.knobs.empty()) {
    name += " (knobs";
    for (const auto& [type, value] : engine.knobs) name += fmt::format(" {}={}", type, value);
    name += ")";
  }
  return name;
}

}  // namespace dlbench::cuda
