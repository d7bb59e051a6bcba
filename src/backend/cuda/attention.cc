// Causal self-attention on the CUDA backend: cuDNN's fused flash attention (sdpa_graph.h) in f16/bf16,
// dlbench's own kernels (attention_kernel.cu) for any f16/bf16 shape cuDNN refuses, and in f32, where
// cuDNN has no fused attention, cuBLAS GEMMs around row kernels (attention_rows.cu). Which of cuDNN and the
// own kernels runs is decided once per pass and shape, when its plan is built at the first call, and kept
// in the backend (CudaBackend::attention_choice): nothing is planned or allocated at later calls, and a
// recorded step replays the same choice. describe_cuda_attention says which it was.
//
// f32 from GEMMs, one sequence at a time, each GEMM batched over the heads (a head's Q, K, V, O and their
// gradients lie d channels apart in the rows of qkv and out; its scores T x T apart in the scratch):
//   forward   S = scale Q K^T;  P = causal softmax(S), stats = its log-sum-exp;  O = P V
//   backward  P again from S and stats;  dV = P^T dO;  dP = dO V^T;  dS = P (dP - rowsum(dO O));
//             dQ = scale dS K;  dK = scale dS^T Q
// The masked half of S is computed and thrown away (twice the FLOPs a fused kernel needs), but the GEMMs
// run on TF32 tensor cores where the backend allows TF32 (plain FP32 otherwise); the own kernels, one warp
// per query row, took 26.6 ms of every gpt2 block's forward and backward at TF32 and batch 16 (2026-12-04,
// 320 of the step's ~380 ms). Scratch: 2 x heads x T x T floats (the scores and their gradient; 100 MB at
// GPT-2's 12 heads and 1024 tokens), whatever the batch.
//
// cuDNN writes Stats as the natural-log log-sum-exp of the scaled, masked scores of each query row,
// [B, H, T, 1] f32: the interface's stats [B, heads, T] as they are, no conversion.
#include <fmt/format.h>

#include <cmath>

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

// The GEMMs of f32 attention (see the top) as column-major cuBLAS calls batched over the heads: C[m x n] =
// alpha op(A) op(B), a head's operands `stride_*` elements after the previous head's.
struct HeadGemm {
  cublasOperation_t op_a, op_b;
  int m, n, k;
  float alpha;
  const float* a;
  int lda;
  int64_t stride_a;
  const float* b;
  int ldb;
  int64_t stride_b;
  float* c;
  int ldc;
  int64_t stride_c;
};

void run_heads(cublasHandle_t handle, const HeadGemm& g, int heads, bool tf32) {
  const float beta = 0;
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle, g.op_a, g.op_b, g.m, g.n, g.k, &g.alpha, g.a, CUDA_R_32F, g.lda, g.stride_a, g.b, CUDA_R_32F,
      g.ldb, g.stride_b, &beta, g.c, CUDA_R_32F, g.ldc, g.stride_c, heads,
      tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// One sequence's scaled scores S = scale Q K^T into `scores` [heads, T, T]: row-major S is column-major
// S^T = K Q^T, with K and Q read as the column-major transposes of their rows.
void scores_gemm(cublasHandle_t handle, const AttentionShape& s, const float* qkv_b, float* scores,
                 bool tf32) {
  const int T = static_cast<int>(s.time), d = static_cast<int>(s.channels / s.heads);
  const int row = static_cast<int>(3 * s.channels);
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  run_heads(handle,
            {CUBLAS_OP_T, CUBLAS_OP_N, T, T, d, scale, qkv_b + s.channels, row, d, qkv_b, row, d, scores, T,
             int64_t{T} * T},
            static_cast<int>(s.heads), tf32);
}

size_t gemm_attention_scratch_bytes(const AttentionShape& s) {
  return 2 * static_cast<size_t>(s.heads * s.time * s.time) * sizeof(float);
}

}  // namespace

void CudaBackend::gemm_attention_forward(const AttentionShape& s, const float* qkv, float* out,
                                         float* stats) {
  auto* scores = static_cast<float*>(scratch(gemm_attention_scratch_bytes(s), "attention_forward"));
  const int T = static_cast<int>(s.time), C = static_cast<int>(s.channels);
  const int d = static_cast<int>(s.channels / s.heads), heads = static_cast<int>(s.heads);
  for (int64_t b = 0; b < s.batch; ++b) {
    const float* qkv_b = qkv + b * s.time * 3 * s.channels;
    scores_gemm(cublas_, s, qkv_b, scores, allow_tf32());
    causal_softmax_rows(scores, stats + b * s.heads * s.time, s.heads, s.time, stream_);
    // O = P V: column-major O^T [d x T] = V^T P^T.
    run_heads(cublas_,
              {CUBLAS_OP_N, CUBLAS_OP_N, d, T, T, 1.f, qkv_b + 2 * s.channels, 3 * C, d, scores, T,
               int64_t{T} * T, out + b * s.time * s.channels, C, d},
              heads, allow_tf32());
  }
}

void CudaBackend::gemm_attention_backward(const AttentionShape& s, const float* qkv, const float* out,
                                          const float* stats, const float* dout, float* dqkv) {
  auto* probs = static_cast<float*>(scratch(gemm_attention_scratch_bytes(s), "attention_backward"));
  float* grads = probs + s.heads * s.time * s.time;  // dP, then dS
  const int T = static_cast<int>(s.time), C = static_cast<int>(s.channels);
  const int d = static_cast<int>(s.channels / s.heads), heads = static_cast<int>(s.heads);
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  const int64_t square = int64_t{T} * T;
  for (int64_t b = 0; b < s.batch; ++b) {
    const float* qkv_b = qkv + b * s.time * 3 * s.channels;
    const float *q = qkv_b, *k = qkv_b + s.channels, *v = qkv_b + 2 * s.channels;
    const float* out_b = out + b * s.time * s.channels;
    const float* dout_b = dout + b * s.time * s.channels;
    float* dq = dqkv + b * s.time * 3 * s.channels;
    float *dk = dq + s.channels, *dv = dq + 2 * s.channels;
    scores_gemm(cublas_, s, qkv_b, probs, allow_tf32());
    causal_probabilities(probs, stats + b * s.heads * s.time, s.heads, s.time, stream_);
    // dV = P^T dO: column-major dV^T [d x T] = dO^T P.
    run_heads(cublas_, {CUBLAS_OP_N, CUBLAS_OP_T, d, T, T, 1.f, dout_b, C, d, probs, T, square, dv, 3 * C, d},
              heads, allow_tf32());
    // dP = dO V^T: column-major dP^T [T x T] = V dO^T.
    run_heads(cublas_, {CUBLAS_OP_T, CUBLAS_OP_N, T, T, d, 1.f, v, 3 * C, d, dout_b, C, d, grads, T, square},
              heads, allow_tf32());
    causal_softmax_backward_rows(probs, grads, out_b, dout_b, s.heads, s.time, s.channels, stream_);
    // dQ = scale dS K: column-major dQ^T [d x T] = K^T dS^T.
    run_heads(cublas_,
              {CUBLAS_OP_N, CUBLAS_OP_N, d, T, T, scale, k, 3 * C, d, grads, T, square, dq, 3 * C, d}, heads,
              allow_tf32());
    // dK = scale dS^T Q: column-major dK^T [d x T] = Q^T dS.
    run_heads(cublas_,
              {CUBLAS_OP_N, CUBLAS_OP_T, d, T, T, scale, q, 3 * C, d, grads, T, square, dk, 3 * C, d}, heads,
              allow_tf32());
  }
}

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
  if (s.dtype == DType::f32) {
    gemm_attention_forward(s, qkv.ptr<float>(), out.ptr<float>(), stats.ptr<float>());
    return;
  }
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
  if (s.dtype == DType::f32) {
    gemm_attention_backward(s, qkv.ptr<float>(), out.ptr<float>(), stats.ptr<float>(), dout.ptr<float>(),
                            dqkv.ptr<float>());
    return;
  }
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
  if (dtype == DType::f32)
    return fmt::format("cuBLAS GEMMs ({}) + own softmax rows", b.allow_tf32() ? "TF32" : "FP32");
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
