#include "backend/cuda/lt_matmul.h"

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/kernels.h"
#include "core/log.h"
#include "core/status.h"

namespace dlbench::cuda {

// The descriptors of one configuration and the algorithms cuBLASLt's heuristic gave for it, best first:
// `algo` is the one calls use, and moves down the list where a call refuses it (none left: ok false).
struct LtMatmuls::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::vector<cublasLtMatmulAlgo_t> others;  // the heuristic's later choices, best first
  bool ok = false;
  ~Plan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    for (auto* layout : {a, b, c})
      if (layout) cublasLtMatrixLayoutDestroy(layout);
  }
};

namespace {

cublasLtEpilogue_t lt_epilogue(LtEpilogue e) {
  switch (e) {
    case LtEpilogue::none:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case LtEpilogue::bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case LtEpilogue::bias_gelu:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case LtEpilogue::dgelu:
      return CUBLASLT_EPILOGUE_DGELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// The largest power of two up to 256 that divides the address: what cuBLASLt may assume of an operand.
int alignment_of(const void* p) {
  if (!p) return 256;
  const auto address = reinterpret_cast<uintptr_t>(p);
  return static_cast<int>(std::min<uintptr_t>(256, address & (~address + 1)));
}

template <typename T>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

cudaDataType_t fp8_type(Fp8Format format) {
  return format == Fp8Format::e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

int fp8_key(const std::optional<Fp8Format>& format) { return format ? static_cast<int>(*format) : -1; }

// The column-major layout of a row-major [rows, cols] matrix: [cols, rows], leading dimension cols.
cublasLtMatrixLayout_t row_major_layout(cudaDataType_t type, int64_t rows, int64_t cols) {
  cublasLtMatrixLayout_t layout = nullptr;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(cols),
                                          static_cast<uint64_t>(rows), cols));
  return layout;
}

}  // namespace

LtMatmuls::LtMatmuls(void* workspace, size_t bytes) : workspace_(workspace), workspace_bytes_(bytes) {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
}

LtMatmuls::~LtMatmuls() {
  plans_.clear();
  if (handle_) cublasLtDestroy(handle_);
}

LtMatmuls::Plan& LtMatmuls::plan(const Key& key, const LtGemm& g, bool allow_tf32) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  auto p = make_plan(g, allow_tf32, static_cast<uint32_t>(std::get<9>(key)));
  return *plans_.emplace(key, std::move(p)).first->second;
}

std::unique_ptr<LtMatmuls::Plan> LtMatmuls::make_plan(const LtGemm& g, bool allow_tf32, uint32_t align) {
  auto p = std::make_unique<Plan>();
  const cudaDataType_t type = cuda_dtype(g.dtype);
  const cublasComputeType_t compute =
      g.dtype == DType::f32 && allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, compute, CUDA_R_32F));
  // Column-major: c^T [n, m] = op(b)^T [n, k] op(a)^T [k, m]; cuBLASLt's A is our b, its B our a.
  const cublasOperation_t op_b = g.tb == Transpose::no ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t op_a = g.ta == Transpose::no ? CUBLAS_OP_N : CUBLAS_OP_T;
  set(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, op_b);
  set(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, op_a);
  set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(g.epilogue));
  // The pointers the heuristic sees for their alignment; run() sets each call's own.
  if (g.bias) set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  if (g.aux) {
    set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
    set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.n);
  }
  const bool fp8 = g.a_fp8 || g.b_fp8;
  if (fp8) {
    DLB_CHECK(g.a_fp8 && g.b_fp8 && g.a_scale && g.b_scale && g.ta == Transpose::no && g.tb == Transpose::yes,
              "cuBLASLt FP8 gemm: both operands FP8 with their scales, a [m, k] and b [n, k]");
    set(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, g.b_scale);  // cuBLASLt's A is our b
    set(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, g.a_scale);
    set(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<int8_t>(g.fast_accumulation));
    if (g.bias) set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, type);
    if (g.aux) set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, type);
  }
  const cudaDataType_t a_type = g.a_fp8 ? fp8_type(*g.a_fp8) : type,
                       b_type = g.b_fp8 ? fp8_type(*g.b_fp8) : type;
  p->b = g.tb == Transpose::no ? row_major_layout(b_type, g.k, g.n) : row_major_layout(b_type, g.n, g.k);
  p->a = g.ta == Transpose::no ? row_major_layout(a_type, g.m, g.k) : row_major_layout(a_type, g.k, g.m);
  p->c = row_major_layout(type, g.m, g.n);

  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace = workspace_bytes_;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &workspace, sizeof(workspace)));
  for (auto attribute :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &align, sizeof(align)));
  constexpr int kChoices = 8;
  cublasLtMatmulHeuristicResult_t results[kChoices] = {};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, p->desc, p->b, p->a, p->c, p->c,
                                                               preference, kChoices, results, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  p->ok = status == CUBLAS_STATUS_SUCCESS && found > 0;
  if (p->ok) {
    p->algo = results[0].algo;
    for (int i = found - 1; i >= 1; --i) p->others.push_back(results[i].algo);  // popped from the back
  }
  return p;
}

bool LtMatmuls::run(const LtGemm& g, bool allow_tf32, cudaStream_t stream) {
  if (g.dtype != DType::f32 && g.dtype != DType::f16 && g.dtype != DType::bf16) return false;
  DLB_CHECK(g.m > 0 && g.n > 0 && g.k > 0, "cuBLASLt gemm: m {}, n {}, k {} must be positive", g.m, g.n, g.k);
  const bool separate_c = g.beta != 0.f && g.c_in != g.c;
  int align = 256;
  for (const void* p : {g.a, g.b, separate_c ? g.c_in : nullptr, static_cast<const void*>(g.c),
                        static_cast<const void*>(g.bias), static_cast<const void*>(g.aux)})
    align = std::min(align, alignment_of(p));
  const Key key{static_cast<int>(g.ta),
                static_cast<int>(g.tb),
                g.m,
                g.n,
                g.k,
                static_cast<int>(g.dtype),
                static_cast<int>(g.epilogue),
                allow_tf32,
                separate_c,
                align,
                fp8_key(g.a_fp8),
                fp8_key(g.b_fp8),
                g.fast_accumulation};
  Plan* p = &plan(key, g, allow_tf32);
  if (!p->ok) return false;
  const bool fp8 = g.a_fp8 || g.b_fp8;
  DLB_CHECK(!fp8 || (alignment_of(g.a_scale) >= 16 && alignment_of(g.b_scale) >= 16),
            "cuBLASLt FP8 gemm: scale pointers {} and {} must be 16-byte aligned (its kernels refuse others)",
            static_cast<const void*>(g.a_scale), static_cast<const void*>(g.b_scale));
  const float alpha = 1.f;
  for (;;) {
    if (g.bias) set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
    if (g.aux) set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
    if (fp8) {
      set(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, g.a_scale);
      set(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, g.b_scale);
    }
    const cublasStatus_t status =
        cublasLtMatmul(handle_, p->desc, &alpha, g.b, p->b, g.a, p->a, &g.beta, g.beta != 0.f ? g.c_in : g.c,
                       p->c, g.c, p->c, &p->algo, workspace_, workspace_bytes_, stream);
    if (status != CUBLAS_STATUS_NOT_SUPPORTED) {
      CUBLAS_CHECK(status);
      return true;
    }
    // An algorithm the heuristic offered that the call then refuses (seen with FP8 operands whose scale
    // pointers were 4-byte aligned): the next one; with none left the configuration is remembered as
    // having none, and the caller composes the op another way.
    log_debug("cuBLASLt refused an algorithm of its heuristic for a {}x{}x{} gemm (epilogue {}, fp8 {}/{})",
              g.m, g.n, g.k, static_cast<int>(g.epilogue), fp8_key(g.a_fp8), fp8_key(g.b_fp8));
    if (!p->others.empty()) {
      p->algo = p->others.back();
      p->others.pop_back();
      continue;
    }
    p->ok = false;
    return false;
  }
}

}  // namespace dlbench::cuda
