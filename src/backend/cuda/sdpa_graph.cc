// cuDNN's fused attention graphs and plans (sdpa_graph.h says which graphs and why these).
#include "backend/cuda/sdpa_graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cuda/cuda_check.h"

namespace dlbench::cuda {
namespace {

using Dims = std::array<int64_t, 4>;

// Unique ids of the tensors the variant pack names (virtual tensors count up from kFirstVirtual).
enum : int64_t {
  kQ = 1,
  kK = 2,
  kV = 3,
  kO = 4,
  kStats = 5,
  kDO = 6,
  kDQ = 7,
  kDK = 8,
  kDV = 9,
  kScale = 10,
  kMaskValue = 11,
  kOne = 12,
  kSoftmaxSum = 13,
  kDQAccumulator = 14,
  kFirstVirtual = 100,
};

cudnnDataType_t io_dtype(DType dtype) { return dtype == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF; }

// Builds one operation graph: its tensors and operations stay alive (and at fixed addresses) until the
// graph is finalized, as cuDNN's descriptors refer to each other.
class GraphBuilder {
 public:
  explicit GraphBuilder(cudnnHandle_t handle) : handle_(handle) {}

  const BackendDescriptor& tensor(int64_t uid, cudnnDataType_t dtype, const Dims& dims, const Dims& strides,
                                  bool is_virtual = false, bool by_value = false) {
    auto t = std::make_unique<BackendDescriptor>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    t->set_one(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, dtype, "sdpa tensor dtype")
        .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data(), "sdpa tensor dims")
        .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data(), "sdpa tensor strides")
        .set_one(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid, "sdpa tensor id")
        .set_one(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64,
                 static_cast<int64_t>(AttentionPlan::kAlignment), "sdpa tensor alignment");
    if (is_virtual) t->set_one(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, true, "sdpa virtual tensor");
    if (by_value) t->set_one(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, true, "sdpa scalar tensor");
    t->finalize("sdpa tensor");
    tensors_.push_back(std::move(t));
    return *tensors_.back();
  }
  // An intermediate result (f32 unless said): never in memory, the engine keeps it in registers.
  const BackendDescriptor& intermediate(const Dims& dims, const Dims& strides,
                                        cudnnDataType_t dtype = CUDNN_DATA_FLOAT) {
    return tensor(next_virtual_++, dtype, dims, strides, true);
  }
  // A host scalar handed by value at execution ([1, 1, 1, 1] f32).
  const BackendDescriptor& scalar(int64_t uid) {
    return tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
  }

  // y = mode(x[, b][, t]) with arithmetic in `precision`; `axis` for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, const BackendDescriptor& x, const BackendDescriptor* b,
                 const BackendDescriptor& y, cudnnDataType_t precision = CUDNN_DATA_FLOAT,
                 const BackendDescriptor* t = nullptr, int64_t axis = -1) {
    BackendDescriptor pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw.set_one(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, mode, "sdpa pointwise mode")
        .set_one(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, precision, "sdpa pointwise precision");
    if (axis >= 0) pw.set_one(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, axis, "sdpa index axis");
    pw.finalize("sdpa pointwise descriptor");
    auto op = std::make_unique<BackendDescriptor>(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op->set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, "sdpa pointwise")
        .set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, "sdpa pointwise x");
    if (b) op->set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b, "sdpa pointwise b");
    if (t) op->set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t, "sdpa pointwise mask");
    op->set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, "sdpa pointwise y")
        .finalize("sdpa pointwise operation");
    ops_.push_back(std::move(op));
  }
  // c = a b over the last two dims (batched over the first two), f32 arithmetic.
  void matmul(const BackendDescriptor& a, const BackendDescriptor& b, const BackendDescriptor& c) {
    BackendDescriptor mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    mm.set_one(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT, "sdpa matmul precision")
        .finalize("sdpa matmul descriptor");
    auto op = std::make_unique<BackendDescriptor>(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op->set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, "sdpa matmul a")
        .set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b, "sdpa matmul b")
        .set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, "sdpa matmul c")
        .set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm, "sdpa matmul")
        .finalize("sdpa matmul operation");
    ops_.push_back(std::move(op));
  }
  // y = reduce(x) over the dims where y is 1.
  void reduction(cudnnReduceTensorOp_t mode, const BackendDescriptor& x, const BackendDescriptor& y) {
    BackendDescriptor red(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    red.set_one(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, mode,
                "sdpa reduction mode")
        .set_one(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT,
                 "sdpa reduction precision")
        .finalize("sdpa reduction descriptor");
    auto op = std::make_unique<BackendDescriptor>(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op->set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, "sdpa reduction x")
        .set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, "sdpa reduction y")
        .set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_DESC, red, "sdpa reduction")
        .finalize("sdpa reduction operation");
    ops_.push_back(std::move(op));
  }
  // y: x seen with other dims and strides (a transpose, without moving data).
  void reshape(const BackendDescriptor& x, const BackendDescriptor& y) {
    auto op = std::make_unique<BackendDescriptor>(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op->set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x, "sdpa reshape x")
        .set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y, "sdpa reshape y")
        .finalize("sdpa reshape operation");
    ops_.push_back(std::move(op));
  }

  // The causal mask on scores `s` [B, H, T, T]: s where row >= col, else the lowest float (not -inf,
  // whose arithmetic in the engine's softmax would give NaN).
  const BackendDescriptor& causal_mask(const BackendDescriptor& s, const Dims& dims, const Dims& strides) {
    const BackendDescriptor& row = intermediate(dims, strides, CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, row, CUDNN_DATA_INT32, nullptr, 2);
    const BackendDescriptor& col = intermediate(dims, strides, CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, col, CUDNN_DATA_INT32, nullptr, 3);
    const BackendDescriptor& keep = intermediate(dims, strides, CUDNN_DATA_BOOLEAN);
    pointwise(CUDNN_POINTWISE_CMP_GE, row, &col, keep, CUDNN_DATA_BOOLEAN);
    const BackendDescriptor& masked = intermediate(dims, strides);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, &scalar(kMaskValue), masked, CUDNN_DATA_FLOAT, &keep);
    return masked;
  }

  BackendDescriptor finish() {
    std::vector<cudnnBackendDescriptor_t> raw;
    for (const auto& op : ops_) raw.push_back(op->get());
    BackendDescriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    graph
        .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw.size()),
             raw.data(), "sdpa graph ops")
        .set_one(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, handle_, "sdpa graph handle")
        .finalize("sdpa graph");
    return graph;
  }

 private:
  cudnnHandle_t handle_;
  int64_t next_virtual_ = kFirstVirtual;
  std::vector<std::unique_ptr<BackendDescriptor>> tensors_, ops_;
};

// The views of qkv, out and the stats (sdpa_graph.h).
struct Views {
  Dims heads, head_strides;             // Q, K, V, dQ, dK, dV: [B, H, T, d] in [B, T, 3C]
  Dims transposed, transposed_strides;  // K^T, V^T: [B, H, d, T]
  Dims out_strides;                     // O, dO: [B, H, T, d] in [B, T, C]
  Dims rows, row_strides;               // Stats, softmax_sum: [B, H, T, 1]
  Dims scores, score_strides;           // [B, H, T, T], packed
  Dims scores_t_strides;                // the same transposed
  Dims accumulator_strides;             // dQ's f32 accumulator, [B, H, T, d] packed
};

Views views_of(const AttentionShape& s) {
  const int64_t B = s.batch, T = s.time, C = s.channels, H = s.heads, d = s.head_size();
  Views v;
  v.heads = {B, H, T, d};
  v.head_strides = {T * 3 * C, d, 3 * C, 1};
  v.transposed = {B, H, d, T};
  v.transposed_strides = {T * 3 * C, d, 1, 3 * C};
  v.out_strides = {T * C, d, C, 1};
  v.rows = {B, H, T, 1};
  v.row_strides = {H * T, T, 1, 1};
  v.scores = {B, H, T, T};
  v.score_strides = {H * T * T, T * T, T, 1};
  v.scores_t_strides = {H * T * T, T * T, 1, T};
  v.accumulator_strides = {H * T * d, T * d, d, 1};
  return v;
}

BackendDescriptor forward_graph(cudnnHandle_t handle, const AttentionShape& s) {
  const Views v = views_of(s);
  const cudnnDataType_t io = io_dtype(s.dtype);
  GraphBuilder g(handle);
  const auto& q = g.tensor(kQ, io, v.heads, v.head_strides);
  const auto& kt = g.tensor(kK, io, v.transposed, v.transposed_strides);
  const auto& value = g.tensor(kV, io, v.heads, v.head_strides);
  const auto& o = g.tensor(kO, io, v.heads, v.out_strides);
  const auto& stats = g.tensor(kStats, CUDNN_DATA_FLOAT, v.rows, v.row_strides);

  const auto& scores = g.intermediate(v.scores, v.score_strides);
  g.matmul(q, kt, scores);
  const auto& scaled = g.intermediate(v.scores, v.score_strides);
  g.pointwise(CUDNN_POINTWISE_MUL, scores, &g.scalar(kScale), scaled);
  const auto& masked = g.causal_mask(scaled, v.scores, v.score_strides);
  // The softmax with its statistics, as cudnn-frontend's softmax node spells it.
  const auto& row_max = g.intermediate(v.rows, v.row_strides);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, row_max);
  const auto& centred = g.intermediate(v.scores, v.score_strides);
  g.pointwise(CUDNN_POINTWISE_SUB, masked, &row_max, centred);
  const auto& exponent = g.intermediate(v.scores, v.score_strides);
  g.pointwise(CUDNN_POINTWISE_EXP, centred, nullptr, exponent);
  const auto& row_sum = g.intermediate(v.rows, v.row_strides);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, exponent, row_sum);
  const auto& log_sum = g.intermediate(v.rows, v.row_strides);
  g.pointwise(CUDNN_POINTWISE_LOG, row_sum, nullptr, log_sum);
  g.pointwise(CUDNN_POINTWISE_ADD, row_max, &log_sum, stats);
  // P in the data's dtype: the second matmul's A operand must be (cuDNN's rule for this pattern).
  const auto& p = g.intermediate(v.scores, v.score_strides, io);
  g.pointwise(CUDNN_POINTWISE_DIV, exponent, &row_sum, p);
  g.matmul(p, value, o);
  return g.finish();
}

BackendDescriptor backward_graph(cudnnHandle_t handle, const AttentionShape& s) {
  const Views v = views_of(s);
  const cudnnDataType_t io = io_dtype(s.dtype);
  GraphBuilder g(handle);
  const auto& q = g.tensor(kQ, io, v.heads, v.head_strides);
  const auto& kt = g.tensor(kK, io, v.transposed, v.transposed_strides);
  const auto& vt = g.tensor(kV, io, v.transposed, v.transposed_strides);
  const auto& o = g.tensor(kO, io, v.heads, v.out_strides);
  const auto& stats = g.tensor(kStats, CUDNN_DATA_FLOAT, v.rows, v.row_strides);
  const auto& dout = g.tensor(kDO, io, v.heads, v.out_strides);
  const auto& dq = g.tensor(kDQ, io, v.heads, v.head_strides);
  const auto& dk = g.tensor(kDK, io, v.heads, v.head_strides);
  const auto& dv = g.tensor(kDV, io, v.heads, v.head_strides);
  const auto& scale = g.scalar(kScale);

  // softmax_sum = rowsum(dO * O): in the workspace, read by every key tile of a row.
  const auto& products = g.intermediate(
      v.heads, {s.heads * s.time * s.head_size(), s.time * s.head_size(), s.heads * s.head_size(), 1});
  g.pointwise(CUDNN_POINTWISE_MUL, dout, &o, products);
  const auto& row_dot = g.intermediate(v.rows, v.row_strides);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, products, row_dot);
  const auto& softmax_sum = g.tensor(kSoftmaxSum, CUDNN_DATA_FLOAT, v.rows, v.row_strides);
  g.pointwise(CUDNN_POINTWISE_MUL, row_dot, &g.scalar(kOne), softmax_sum);

  // P = exp(mask(Q K^T * scale - Stats)), rebuilt from the forward's statistics.
  const auto& scores = g.intermediate(v.scores, v.score_strides);
  g.matmul(q, kt, scores);
  const auto& scaled = g.intermediate(v.scores, v.score_strides);
  g.pointwise(CUDNN_POINTWISE_MUL, scores, &scale, scaled);
  const auto& centred = g.intermediate(v.scores, v.score_strides);
  g.pointwise(CUDNN_POINTWISE_SUB, scaled, &stats, centred);
  const auto& masked = g.causal_mask(centred, v.scores, v.score_strides);
  const auto& p = g.intermediate(v.scores, v.score_strides);
  g.pointwise(CUDNN_POINTWISE_EXP, masked, nullptr, p);

  // dV = P^T dO.
  const auto& p_t = g.intermediate(v.scores, v.scores_t_strides, io);
  g.reshape(p, p_t);
  g.matmul(p_t, dout, dv);

  // dS = P * (dO V^T - softmax_sum) * scale.
  const auto& dp = g.intermediate(v.scores, v.score_strides);
  g.matmul(dout, vt, dp);
  const auto& dp_centred = g.intermediate(v.scores, v.score_strides);
  g.pointwise(CUDNN_POINTWISE_SUB, dp, &softmax_sum, dp_centred);
  const auto& ds_unscaled = g.intermediate(v.scores, v.score_strides);
  g.pointwise(CUDNN_POINTWISE_MUL, dp_centred, &p, ds_unscaled);
  const auto& ds = g.intermediate(v.scores, v.score_strides);
  g.pointwise(CUDNN_POINTWISE_MUL, ds_unscaled, &scale, ds);

  // dK = dS^T Q.
  const auto& ds_t = g.intermediate(v.scores, v.scores_t_strides, io);
  g.reshape(ds, ds_t);
  g.matmul(ds_t, q, dk);

  // dQ = dS K, summed over the key tiles in f32 (the workspace), then written in the data's dtype.
  const auto& k = g.intermediate(v.heads, v.head_strides, io);
  g.reshape(kt, k);
  const auto& dq_accumulator = g.tensor(kDQAccumulator, CUDNN_DATA_FLOAT, v.heads, v.accumulator_strides);
  g.matmul(ds, k, dq_accumulator);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, dq_accumulator, nullptr, dq);
  return g.finish();
}

// The `index`-th engine configuration (from 0) of cuDNN's heuristics (mode A, then the fallback list) that
// builds an execution plan for `graph`, with its global index; an empty descriptor slot when none does.
struct BuiltPlan {
  std::unique_ptr<BackendDescriptor> plan;
  int64_t engine = -1;
  size_t workspace = 0;
};

// A plan of one engine configuration; an empty slot when cuDNN does not build it.
BuiltPlan plan_of(cudnnHandle_t handle, cudnnBackendDescriptor_t config, int64_t engine) {
  auto plan = std::make_unique<BackendDescriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  plan->set_one(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, handle, "sdpa plan handle");
  plan->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &config,
            "sdpa plan engine");
  if (plan->try_finalize() != CUDNN_STATUS_SUCCESS) return {};
  BuiltPlan built;
  int64_t got = 0, workspace = 0;
  CUDNN_CHECK(cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                       CUDNN_TYPE_INT64, 1, &got, &workspace));
  built.workspace = static_cast<size_t>(workspace);
  built.engine = engine;
  built.plan = std::move(plan);
  return built;
}

BuiltPlan nth_plan(cudnnHandle_t handle, const BackendDescriptor& graph, int index) {
  int built_before = 0;  // configurations that built, before this one
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    for (const BackendDescriptor& candidate : heuristic_engine_configs(graph, mode)) {
      const std::optional<GraphEngine> numbers = engine_config_numbers(candidate.get());
      BuiltPlan built = plan_of(handle, candidate.get(), numbers ? numbers->index : -1);
      if (built.plan && built_before++ == index) return built;
    }
  }
  return {};
}

BackendDescriptor pass_graph(cudnnHandle_t handle, const AttentionShape& shape, AttentionPass pass) {
  return pass == AttentionPass::forward ? forward_graph(handle, shape) : backward_graph(handle, shape);
}

// The pass's graph and the plan `choose` builds of it; an empty slot with `why_not` said (the shape's
// refusal, cuDNN's refusal of the graph, or `none` where no plan builds) otherwise.
template <typename Choose>
BuiltPlan plan_for(cudnnHandle_t handle, const AttentionShape& shape, AttentionPass pass,
                   std::string& why_not, const std::string& none, Choose&& choose) {
  why_not = sdpa_refusal(shape, pass);
  if (!why_not.empty()) return {};
  BuiltPlan built;
  try {
    built = choose(pass_graph(handle, shape, pass));
  } catch (const Error& e) {
    why_not = fmt::format("cuDNN refused the graph: {}", e.what());
    return {};
  }
  if (!built.plan) why_not = none;
  return built;
}

}  // namespace

std::string sdpa_refusal(const AttentionShape& s, AttentionPass pass) {
  if (s.dtype != DType::f16 && s.dtype != DType::bf16) return "cuDNN's fused attention takes f16 and bf16";
  const int64_t d = s.head_size();
  if (d % 8 != 0 || d > 128) return fmt::format("head size {} (cuDNN takes multiples of 8 up to 128)", d);
  // Before 9.16 cuDNN's backward needed a padding mask where the keys are not a multiple of 128
  // (cudnn-frontend adds one); these graphs carry none.
  if (pass == AttentionPass::backward && cudnnGetVersion() < 91600 && s.time % 128 != 0)
    return fmt::format("T = {} is no multiple of 128, which cuDNN {} needs in the backward", s.time,
                       cudnnGetVersion());
  return {};
}

AttentionPlan::AttentionPlan(cudnnHandle_t handle, BackendDescriptor plan, const AttentionShape& shape,
                             AttentionPass pass, size_t cudnn_workspace, std::string engine)
    : handle_(handle),
      plan_(std::move(plan)),
      shape_(shape),
      pass_(pass),
      cudnn_workspace_(align_up(cudnn_workspace, kWorkspaceAlignment)),
      engine_(std::move(engine)),
      scale_(static_cast<float>(1.0 / std::sqrt(double(shape.head_size())))) {
  size_t bytes = cudnn_workspace_;
  if (pass == AttentionPass::backward) {
    const size_t rows = static_cast<size_t>(shape.batch * shape.heads * shape.time);
    bytes += align_up(rows * sizeof(float), kWorkspaceAlignment) +
             rows * static_cast<size_t>(shape.head_size()) * sizeof(float);
  }
  workspace_ = DeviceBuffer(bytes);
}

std::unique_ptr<AttentionPlan> AttentionPlan::build(cudnnHandle_t handle, const AttentionShape& shape,
                                                    AttentionPass pass, std::string& why_not, int config) {
  BuiltPlan built = plan_for(handle, shape, pass, why_not, "no cuDNN engine builds a plan for the graph",
                             [&](const BackendDescriptor& graph) { return nth_plan(handle, graph, config); });
  if (!built.plan) return nullptr;
  return std::unique_ptr<AttentionPlan>(new AttentionPlan(handle, std::move(*built.plan), shape, pass,
                                                          built.workspace,
                                                          fmt::format("cuDNN engine {}", built.engine)));
}

std::unique_ptr<AttentionPlan> AttentionPlan::build(cudnnHandle_t handle, const AttentionShape& shape,
                                                    AttentionPass pass, std::string& why_not,
                                                    const GraphEngine& engine) {
  BuiltPlan built =
      plan_for(handle, shape, pass, why_not, fmt::format("cuDNN builds no plan of {}", engine_name(engine)),
               [&](const BackendDescriptor& graph) {
                 const std::optional<EngineConfig> config = engine_config(graph, engine);
                 return config ? plan_of(handle, config->config.get(), engine.index) : BuiltPlan{};
               });
  if (!built.plan) return nullptr;
  return std::unique_ptr<AttentionPlan>(
      new AttentionPlan(handle, std::move(*built.plan), shape, pass, built.workspace, engine_name(engine)));
}

std::vector<GraphEngine> attention_engine_space(cudnnHandle_t handle, const AttentionShape& shape,
                                                AttentionPass pass, size_t limit) {
  if (!sdpa_refusal(shape, pass).empty()) return {};
  const BackendDescriptor graph = pass_graph(handle, shape, pass);
  std::vector<int64_t> engines;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK})
    for (const BackendDescriptor& candidate : heuristic_engine_configs(graph, mode)) {
      const std::optional<GraphEngine> numbers = engine_config_numbers(candidate.get());
      if (numbers && std::find(engines.begin(), engines.end(), numbers->index) == engines.end())
        engines.push_back(numbers->index);
    }
  std::vector<GraphEngine> space;
  for (int64_t engine : engines)
    for (GraphEngine& e : knob_space(graph, engine, limit - std::min(limit, space.size())))
      space.push_back(std::move(e));
  return space;
}

cudnnStatus_t AttentionPlan::execute(int64_t count, const int64_t* uids, void* const* pointers) const {
  BackendDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, count, uids, "sdpa variant ids")
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, count, pointers,
           "sdpa variant pointers")
      .set_one(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, workspace_.get(), "sdpa workspace")
      .finalize("sdpa variant pack");
  return cudnnBackendExecute(handle_, plan_.get(), pack.get());
}

bool AttentionPlan::forward(const void* qkv, void* out, float* stats) const {
  DLB_CHECK(pass_ == AttentionPass::forward, "attention: a backward plan asked to run the forward");
  const size_t part = static_cast<size_t>(shape_.channels) * dtype_size(shape_.dtype);
  auto* base = static_cast<std::byte*>(const_cast<void*>(qkv));
  // By-value scalars are read from host memory when the plan runs (and baked into a captured graph).
  float scale = scale_, mask_value = std::numeric_limits<float>::lowest();
  const std::array<int64_t, 7> uids{kQ, kK, kV, kO, kStats, kScale, kMaskValue};
  const std::array<void*, 7> pointers{base, base + part, base + 2 * part, out, stats, &scale, &mask_value};
  return execute(static_cast<int64_t>(uids.size()), uids.data(), pointers.data()) == CUDNN_STATUS_SUCCESS;
}

bool AttentionPlan::backward(const void* qkv, const void* out, const float* stats, const void* dout,
                             void* dqkv) const {
  DLB_CHECK(pass_ == AttentionPass::backward, "attention: a forward plan asked to run the backward");
  const size_t part = static_cast<size_t>(shape_.channels) * dtype_size(shape_.dtype);
  auto* base = static_cast<std::byte*>(const_cast<void*>(qkv));
  auto* grad = static_cast<std::byte*>(dqkv);
  const size_t rows = static_cast<size_t>(shape_.batch * shape_.heads * shape_.time);
  auto* softmax_sum = static_cast<std::byte*>(workspace_.get()) + cudnn_workspace_;
  auto* dq_accumulator = softmax_sum + align_up(rows * sizeof(float), kWorkspaceAlignment);
  float scale = scale_, mask_value = std::numeric_limits<float>::lowest(), one = 1.f;
  const std::array<int64_t, 14> uids{kQ,  kK,  kV,     kO,         kStats, kDO,         kDQ,
                                     kDK, kDV, kScale, kMaskValue, kOne,   kSoftmaxSum, kDQAccumulator};
  const std::array<void*, 14> pointers{base,
                                       base + part,
                                       base + 2 * part,
                                       const_cast<void*>(out),
                                       const_cast<float*>(stats),
                                       const_cast<void*>(dout),
                                       grad,
                                       grad + part,
                                       grad + 2 * part,
                                       &scale,
                                       &mask_value,
                                       &one,
                                       softmax_sum,
                                       dq_accumulator};
  return execute(static_cast<int64_t>(uids.size()), uids.data(), pointers.data()) == CUDNN_STATUS_SUCCESS;
}

}  // namespace dlbench::cuda
