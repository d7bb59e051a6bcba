// Causal self-attention on the CUDA backend: cuDNN's fused flash attention (sdpa_graph.h) in f16/bf16,
// dlbench's own kernels (attention_kernel.cu) for f32 and for any shape cuDNN refuses, so every dtype
// works. Which runs is decided once per pass and shape, when its plan is built at the first call, and kept
// in the backend (CudaBackend::attention_choice): nothing is planned or allocated at later calls, and a
// recorded step replays the same choice. describe_cuda_attention says which it was.
//
// cuDNN writes Stats as the natural-log log-sum-exp of the scaled, masked scores of each query row,
// [B, H, T, 1] f32: the interface's stats [B, heads, T] as they are, no conversion.
#include <fmt/format.h>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/sdpa_graph.h"

namespace dlbench {
namespace cuda {
namespace {

AttentionShape check_attention(const char* op, const Tensor& qkv, int64_t heads, const Tensor& out,
                               const Tensor& stats) {
  check_device_tensor(op, "qkv", qkv);
  DLB_CHECK(qkv.dtype() == DType::f32 || qkv.dtype() == DType::f16 || qkv.dtype() == DType::bf16,
            "{}: qkv is {}, expected f32, f16 or bf16", op, qkv.describe());
  DLB_CHECK(qkv.rank() == 3 && qkv.dim(2) % 3 == 0 && qkv.dim(2) > 0 && qkv.dim(0) > 0 && qkv.dim(1) > 0,
            "{}: qkv is {}, expected [B, T, 3C]", op, qkv.describe());
  const int64_t B = qkv.dim(0), T = qkv.dim(1), C = qkv.dim(2) / 3;
  DLB_CHECK(heads > 0 && C % heads == 0, "{}: {} heads do not divide C = {}", op, heads, C);
  DLB_CHECK(C / heads <= kOwnAttentionMaxHead, "{}: head size {} is larger than {}, the most it takes", op,
            C / heads, kOwnAttentionMaxHead);
  check_activation(op, "out", out, {B, T, C}, qkv.dtype(), out.layout());
  check_activation(op, "stats", stats, {B, heads, T}, DType::f32, stats.layout());
  return {B, T, C, heads, qkv.dtype()};
}

std::vector<int64_t> plan_key(const AttentionShape& s, AttentionPass pass) {
  return {static_cast<int64_t>(pass), s.batch, s.time, s.channels, s.heads, static_cast<int64_t>(s.dtype)};
}

bool aligned_for_cudnn(std::initializer_list<const void*> pointers, size_t part_bytes) {
  if (part_bytes % AttentionPlan::kAlignment != 0) return false;  // K and V start C elements in
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % AttentionPlan::kAlignment != 0) return false;
  return true;
}

}  // namespace

// The pass's cuDNN plan for the shape, or null (the own kernels run), built at the shape's first call.
static const CudaBackend::AttentionChoice& choice_for(const CudaBackend& backend, const AttentionShape& s,
                                                      AttentionPass pass) {
  return backend.attention_choice(plan_key(s, pass), [&] {
    CudaBackend::AttentionChoice choice;
    choice.plan = AttentionPlan::build(backend.cudnn(), s, pass, choice.why_not);
    return choice;
  });
}

void CudaBackend::attention_forward(const Tensor& qkv, int64_t heads, Tensor& out, Tensor& stats) {
  const char* op = "attention_forward";
  const AttentionShape s = check_attention(op, qkv, heads, out, stats);
  activate();
  const AttentionChoice& choice = choice_for(*this, s, AttentionPass::forward);
  const size_t part = static_cast<size_t>(s.channels) * dtype_size(s.dtype);
  if (choice.plan && aligned_for_cudnn({qkv.data(), out.data(), stats.data()}, part) &&
      choice.plan->forward(qkv.data(), out.data(), stats.ptr<float>()))
    return;
  cuda::attention_forward(qkv.data(), out.data(), stats.ptr<float>(), s.batch, s.time, s.channels, s.heads,
                          s.dtype, stream_);
}

void CudaBackend::attention_backward(const Tensor& qkv, const Tensor& out, const Tensor& stats,
                                     const Tensor& dout, int64_t heads, Tensor& dqkv) {
  const char* op = "attention_backward";
  const AttentionShape s = check_attention(op, qkv, heads, out, stats);
  check_same_shape(op, "out", out, "dout", dout);
  check_same_shape(op, "qkv", qkv, "dqkv", dqkv);
  activate();
  const AttentionChoice& choice = choice_for(*this, s, AttentionPass::backward);
  const size_t part = static_cast<size_t>(s.channels) * dtype_size(s.dtype);
  if (choice.plan &&
      aligned_for_cudnn({qkv.data(), out.data(), stats.data(), dout.data(), dqkv.data()}, part) &&
      choice.plan->backward(qkv.data(), out.data(), stats.ptr<float>(), dout.data(), dqkv.data()))
    return;
  cuda::attention_backward(qkv.data(), out.data(), stats.ptr<float>(), dout.data(), dqkv.data(), s.batch,
                           s.time, s.channels, s.heads, s.dtype, stream_);
}

}  // namespace cuda

std::string describe_cuda_attention(Backend& backend, DType dtype, int64_t batch, int64_t time,
                                    int64_t channels, int64_t heads) {
  const cuda::CudaBackend& b = cuda::as_cuda(backend);
  b.activate();
  DLB_CHECK(heads > 0 && channels % heads == 0, "describe_cuda_attention: {} heads do not divide C = {}",
            heads, channels);
  const cuda::AttentionShape s{batch, time, channels, heads, dtype};
  std::string words;
  for (cuda::AttentionPass pass : {cuda::AttentionPass::forward, cuda::AttentionPass::backward}) {
    const auto& choice = cuda::choice_for(b, s, pass);
    words += fmt::format("{}{}: {}", words.empty() ? "" : " | ",
                         pass == cuda::AttentionPass::forward ? "fwd" : "bwd",
                         choice.plan ? choice.plan->engine() : "own kernels (" + choice.why_not + ")");
  }
  return words;
}

}  // namespace dlbench
