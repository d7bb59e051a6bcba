// GEMMs on cuBLASLt with an epilogue: the bias, GELU and its gradient and a residual applied by the GEMM's
// kernel as it writes its result, instead of by a pass of its own over the result (llm.c's and Transformer
// Engine's way of running a transformer's dense layers).
//
// Row-major, like Backend::gemm: c[m, n] = op(a)[m, k] op(b)[k, n] (+ beta c_in, where c_in is c itself or
// another [m, n] matrix: a residual). cuBLASLt is column-major; a row-major matrix is the column-major one
// of its transpose, so the call is c^T = op(b)^T op(a)^T with the operands swapped (cuda_dense.cc).
//
// Each distinct shape, dtype, epilogue and operand alignment gets its descriptors and cuBLASLt's
// heuristic's first algorithms once, at its first call, and keeps them: a GEMM inside a recorded step asks
// the heuristic nothing. A shape for which cuBLASLt offers no algorithm is remembered as such, and run()
// then returns false, so that the caller composes the op from its single kernels instead.
//
// FP8 GEMMs take their operands' dequantizing scales as cuBLASLt's A and B scale pointers, read when the
// GEMM runs, so that a recorded step follows scales that change every step. cuBLASLt's FP8 kernels refuse
// scale pointers that are not 16-byte aligned (kFp8InverseScaleStride in backend.h).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "backend/backend.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda_options.h"

namespace dlbench::cuda {

enum class LtEpilogue : uint8_t {
  none,       // c = ab
  bias,       // c = ab + bias[n] (before beta c_in is added: cuBLASLt adds the bias to alpha ab + beta c)
  bias_gelu,  // aux = ab + bias[n]; c = gelu(aux) (GPT-2's tanh form)
  dgelu,      // c = ab * gelu'(aux)
};

struct LtGemm {
  Transpose ta = Transpose::no, tb = Transpose::no;
  int64_t m = 0, n = 0, k = 0;
  DType dtype = DType::f32;
  const void* a = nullptr;
  const void* b = nullptr;
  float beta = 0.f;
  const void* c_in = nullptr;  // read where beta != 0: c itself, or another [m, n]
  void* c = nullptr;
  LtEpilogue epilogue = LtEpilogue::none;
  void* bias = nullptr;  // [n] (bias, bias_gelu), c's dtype
  void* aux = nullptr;   // [m, n] row-major, c's dtype (bias_gelu writes it, dgelu reads it)
  // FP8 operands: a and b hold E4M3 or E5M2 codes (not both E5M2), each times its dequantizing scale (a
  // float in device memory) its values; `dtype` is then c's (and c_in's, the bias's and aux's), BF16 or
  // FP16. Hopper's FP8 GEMMs take both operands K-major only: ta no, tb yes.
  std::optional<Fp8Format> a_fp8, b_fp8;
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  bool fast_accumulation = false;  // FP8: cuBLASLt's fast accumulation (Fp8FastAccumulation)
};

class LtMatmuls {
 public:
  // `workspace` (device memory, `bytes` of it) is lent by the caller for every call; it must outlive this.
  LtMatmuls(void* workspace, size_t bytes);
  ~LtMatmuls();
  LtMatmuls(const LtMatmuls&) = delete;
  LtMatmuls& operator=(const LtMatmuls&) = delete;

  // Enqueues `g` on `stream`; false (nothing enqueued) where cuBLASLt has no algorithm for it. FP32 runs
  // on TF32 tensor cores where `allow_tf32`; FP64 is never taken.
  bool run(const LtGemm& g, bool allow_tf32, cudaStream_t stream);

 private:
  struct Plan;
  // ta, tb, m, n, k, dtype, epilogue, tf32, c_in apart from c, the smallest operand alignment in bytes,
  // a's and b's FP8 formats (-1: none), FP8's fast accumulation
  using Key = std::tuple<int, int, int64_t, int64_t, int64_t, int, int, bool, bool, int, int, int, bool>;
  Plan& plan(const Key& key, const LtGemm& g, bool allow_tf32);
  std::unique_ptr<Plan> make_plan(const LtGemm& g, bool allow_tf32, uint32_t align);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_;
  size_t workspace_bytes_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace dlbench::cuda
