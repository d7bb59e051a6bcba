// cuDNN's fused flash attention (SDPA) for causal self-attention, through cuDNN 9's graph (backend) API:
// the training forward graph (with Stats) and the backward graph, built once per shape as execution plans.
//
// The graphs are the ones cudnn-frontend's CompositeSDPANode and CompositeSDPABackwardNode lower to, the
// pattern cuDNN's fused attention engines recognise:
//   forward:  S = Q K^T * scale; causal mask (row >= col, else the lowest float); softmax with
//             Stats = max + log(sum exp(S - max)) (natural log, of the scaled, masked scores: exactly the
//             interface's stats); O = P V, P in the data's dtype.
//   backward: softmax_sum = rowsum(dO * O) (an f32 workspace tensor); P = exp(mask(S * scale - Stats));
//             dV = P^T dO; dS = P * (dO V^T - softmax_sum) * scale; dK = dS^T Q; dQ = dS K, accumulated
//             in an f32 workspace tensor and copied out.
// The heads are read in place from qkv [B, T, 3C]: Q, K and V are [B, H, T, d] views with strides
// (T * 3C, d, 3C, 1), K^T and V^T the same with the last two swapped, so no transposing copy runs; out
// and dout are [B, H, T, d] views of [B, T, C]; dqkv is written through the same views as qkv.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cudnn_graph.h"

namespace dlbench::cuda {

struct AttentionShape {
  int64_t batch = 0, time = 0, channels = 0, heads = 0;
  DType dtype = DType::f16;
  int64_t head_size() const { return channels / heads; }
};

enum class AttentionPass : uint8_t { forward, backward };

// One pass's execution plan with the workspace it runs in (cuDNN's own, then for the backward the f32
// softmax_sum and dQ accumulator), allocated once when the plan is built.
class AttentionPlan {
 public:
  // Null, with `why_not` saying why, when cuDNN builds no plan for the shape (the caller then runs the
  // own kernels). Throws only when the device memory for the workspace is not there. `config`: which of
  // the heuristics' configurations that build, in their order: the backend runs the first; the probe
  // bench/kernels/sdpa_engine_probe times the others.
  static std::unique_ptr<AttentionPlan> build(cudnnHandle_t handle, const AttentionShape& shape,
                                              AttentionPass pass, std::string& why_not, int config = 0);
  // A plan of one engine configuration given as numbers (attention_engine_space lists them); for the probe.
  static std::unique_ptr<AttentionPlan> build(cudnnHandle_t handle, const AttentionShape& shape,
                                              AttentionPass pass, std::string& why_not,
                                              const GraphEngine& engine);

  // Enqueues the pass on the handle's stream; false when cuDNN refuses to run it.
  bool forward(const void* qkv, void* out, float* stats) const;
  bool backward(const void* qkv, const void* out, const float* stats, const void* dout, void* dqkv) const;
  const std::string& engine() const { return engine_; }

  // Tensors must be aligned to this many bytes (what the graph's tensors declare).
  static constexpr size_t kAlignment = 16;

 private:
  AttentionPlan(cudnnHandle_t handle, BackendDescriptor plan, const AttentionShape& shape, AttentionPass pass,
                size_t cudnn_workspace, std::string engine);
  cudnnStatus_t execute(int64_t count, const int64_t* uids, void* const* pointers) const;

  cudnnHandle_t handle_;
  BackendDescriptor plan_;
  AttentionShape shape_;
  AttentionPass pass_;
  size_t cudnn_workspace_;
  DeviceBuffer workspace_;
  std::string engine_;
  float scale_;
};

// Every configuration of every engine cuDNN's heuristics offer for the pass's graph, each engine's knobs
// over their whole ranges (knob_space), at most `limit`: what bench/kernels/sdpa_engine_probe
// --knob-space times beside the heuristics' own configurations.
std::vector<GraphEngine> attention_engine_space(cudnnHandle_t handle, const AttentionShape& shape,
                                                AttentionPass pass, size_t limit);

// Whether cuDNN's fused attention may take the shape at all (f16/bf16, head size a multiple of 8 up to
// 128); "" if so, else why not.
std::string sdpa_refusal(const AttentionShape& shape, AttentionPass pass);

}  // namespace dlbench::cuda
