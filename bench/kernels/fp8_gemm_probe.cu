// How fast cuBLASLt's FP8 GEMMs run at GPT-2's shapes with the epilogues dlbench's dense layers give them,
// beside BF16 GEMMs with the same epilogues: the question behind --precision fp8's speed
// (bench/results/gpt2-fp8). For each GEMM of a model's dense layers (forward, data gradient, weight
// gradient), set up as dense_fp8.cc does (E4M3/E5M2 codes, BF16 out, the inverse scales as 16-byte aligned
// A/B scale pointers), it prints the plain GEMM's rate in BF16 and FP8 and, where dlbench applies one, the
// rate with its epilogue: the bias on the forwards, GELU with its saved input (GELU_AUX_BIAS) on
// mlp.c_fc's forward, GELU's gradient (DGELU) on mlp.c_proj's data gradient. Each FP8 case tries every
// algorithm the heuristic offers (up to 8) and reports how many it offered, the first that ran (-1: none)
// and the best rate, in TFLOP/s (median of --reps), with cuBLASLt's default FP8 accumulation (partial sums
// promoted to FP32 at intervals) and with its fast accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM, which
// Transformer Engine's recipe takes for the forward GEMMs). An epilogue that costs FP8 much more than BF16
// says the op would run faster as the plain FP8 GEMM and its epilogue fused into the pass that follows.
//
// The probe as of 6664ab5 answered the question before: which way of giving the scales runs. With the
// pointers 4 bytes apart (as dlbench held them then) every algorithm refused every GEMM; 16-byte aligned,
// no scales, or the scales as a device-side alpha, all ran (bench/results/gpt2-fp8, 2026-12-05).
//
//   fp8_gemm_probe [--model gpt2|gpt2-medium|gpt2-large|gpt2-xl] [--tokens N] [--reps R]
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "gpt_gemm_probe.h"

namespace {

using gpt_gemm_probe::check;
using gpt_gemm_probe::heuristic_choices;
using gpt_gemm_probe::median_ms;
using gpt_gemm_probe::set;

// One GEMM in cuBLASLt's column-major terms: D[m, n] = op(A)[m, k] op(B)[k, n] with A stored [k, m]
// (transposed, K-major) and B [k, n] (K-major): the only FP8 layout. `epilogue` is the one dlbench gives
// it (DEFAULT: none).
struct Gemm {
  std::string name;
  int64_t m, n, k;
  cudaDataType_t a, b;
  cublasLtEpilogue_t epilogue;
};

const char* epilogue_name(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS            ? "bias"
         : e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ? "gelu_aux_bias"
         : e == CUBLASLT_EPILOGUE_DGELU         ? "dgelu"
                                                : "none";
}

struct Outcome {
  int offered = 0, first_running = -1;
  double best_tflops = 0;
};

}  // namespace

int main(int argc, char** argv) {
  gpt_gemm_probe::program = "fp8_gemm_probe";
  const gpt_gemm_probe::Options options = gpt_gemm_probe::parse_options(argc, argv, 16);
  const std::string& model = options.model;
  const int64_t tokens = options.tokens, c = options.width;
  const int reps = options.reps;

  // The dense layers (in, out) and their three GEMMs, as dense_fp8.cc runs them (our row-major
  // c[M, N] = a[M, K] b[N, K]^T is cuBLASLt's D[N, M] with A = b, B = a).
  const int64_t layers[][2] = {{c, 3 * c}, {c, c}, {c, 4 * c}, {4 * c, c}};
  const char* layer_names[] = {"c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
  std::vector<Gemm> gemms;
  for (int l = 0; l < 4; ++l) {
    const int64_t in = layers[l][0], out = layers[l][1];
    const std::string layer = layer_names[l];
    gemms.push_back({layer + " forward", out, tokens, in, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3,  // A = w, B = x
                     layer == "mlp.c_fc" ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_BIAS});
    gemms.push_back({layer + " data grad", in, tokens, out, CUDA_R_8F_E4M3,
                     CUDA_R_8F_E5M2,  // A = w^T, B = dy
                     layer == "mlp.c_proj" ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT});
    gemms.push_back({layer + " weight grad", in, out, tokens, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2,  // x^T, dy^T
                     CUBLASLT_EPILOGUE_DEFAULT});
  }

  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "stream");
  cublasLtHandle_t lt;
  check(cublasLtCreate(&lt), "cublasLtCreate");
  int64_t largest = 0;
  for (const Gemm& g : gemms) largest = std::max({largest, g.m * g.k, g.n * g.k, g.m * g.n});
  void *a, *b, *d, *aux, *bias, *workspace;
  float* scales;  // [0] and [4]: the two inverse scales, 16 bytes apart
  const size_t workspace_bytes = size_t{32} << 20;
  check(cudaMalloc(&a, largest * 2), "malloc");
  check(cudaMalloc(&b, largest * 2), "malloc");
  check(cudaMalloc(&d, largest * 2), "malloc");
  check(cudaMalloc(&aux, largest * 2), "malloc");
  check(cudaMalloc(&bias, 4 * c * 2), "malloc");
  check(cudaMalloc(&workspace, workspace_bytes), "malloc");
  check(cudaMalloc(&scales, 8 * sizeof(float)), "malloc");
  // Small values: 0x2c is 0.375 in E4M3 and 2^-4 in E5M2; 0x2c2c a small BF16 number.
  check(cudaMemset(a, 0x2c, largest * 2), "memset");
  check(cudaMemset(b, 0x2c, largest * 2), "memset");
  check(cudaMemset(aux, 0x2c, largest * 2), "memset");
  check(cudaMemset(bias, 0, 4 * c * 2), "memset");
  const float host_scales[8] = {0.5f, 0, 0, 0, 0.25f, 0, 0, 0};
  check(cudaMemcpy(scales, host_scales, sizeof host_scales, cudaMemcpyHostToDevice), "upload");
  const float zero = 0.f, one = 1.f;

  auto layout = [](cudaDataType_t t, int64_t rows, int64_t cols) {
    cublasLtMatrixLayout_t l;
    check(cublasLtMatrixLayoutCreate(&l, t, rows, cols, rows), "layout");
    return l;
  };
  // The GEMM g in BF16 or FP8 with `epilogue`: every algorithm the heuristic offers (the first only in
  // BF16, as dlbench's BF16 path takes it), the best rate among those that run.
  auto probe = [&](const Gemm& g, bool fp8, cublasLtEpilogue_t epilogue, bool fast_accumulation = false) {
    cublasLtMatmulDesc_t desc;
    check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
    set(desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    if (fp8) {
      set(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const float*>(scales));
      set(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const float*>(scales + 4));
      set(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<int8_t>(fast_accumulation));
    }
    set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    if (epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
      set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias));
      if (fp8) set(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_16BF);
    }
    if (epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || epilogue == CUBLASLT_EPILOGUE_DGELU) {
      set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<const void*>(aux));
      set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.m);
      if (fp8) set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, CUDA_R_16BF);
    }
    cublasLtMatrixLayout_t la = layout(fp8 ? g.a : CUDA_R_16BF, g.k, g.m),
                           lb = layout(fp8 ? g.b : CUDA_R_16BF, g.k, g.n), ld = layout(CUDA_R_16BF, g.m, g.n);
    const auto results = heuristic_choices(lt, desc, la, lb, ld, workspace_bytes, fp8 ? 8 : 1);
    Outcome o;
    o.offered = static_cast<int>(results.size());
    const double flops = 2.0 * g.m * g.n * g.k;
    for (int j = 0; j < o.offered; ++j) {
      auto run = [&] {
        return cublasLtMatmul(lt, desc, &one, a, la, b, lb, &zero, d, ld, d, ld, &results[j].algo, workspace,
                              workspace_bytes, stream) == CUBLAS_STATUS_SUCCESS;
      };
      if (!run()) continue;
      check(cudaStreamSynchronize(stream), "run");
      if (o.first_running < 0) o.first_running = j;
      o.best_tflops = std::max(o.best_tflops, flops / (median_ms(stream, reps, run) * 1e-3) / 1e12);
    }
    for (auto l : {la, lb, ld}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(desc);
    return o;
  };

  std::printf(
      "%s, %lld tokens; TFLOP/s, BF16 (its first algorithm) and FP8 (offered/first that ran/best; fast: with "
      "fast accumulation), plain and with dlbench's epilogue\n",
      model.c_str(), static_cast<long long>(tokens));
  for (const Gemm& g : gemms) {
    std::printf("%-24s m %5lld n %5lld k %5lld", g.name.c_str(), static_cast<long long>(g.m),
                static_cast<long long>(g.n), static_cast<long long>(g.k));
    for (cublasLtEpilogue_t epilogue : {CUBLASLT_EPILOGUE_DEFAULT, g.epilogue}) {
      const Outcome bf16 = probe(g, false, epilogue), fp8 = probe(g, true, epilogue),
                    fast = probe(g, true, epilogue, true);
      std::printf(" | %s bf16 %5.0f fp8 %d/%d/%5.0f fast %d/%d/%5.0f", epilogue_name(epilogue),
                  bf16.best_tflops, fp8.offered, fp8.first_running, fp8.best_tflops, fast.offered,
                  fast.first_running, fast.best_tflops);
      if (g.epilogue == CUBLASLT_EPILOGUE_DEFAULT) break;  // no epilogue of its own: the plain GEMM only
    }
    std::printf("\n");
  }
  cublasLtDestroy(lt);
  for (void* p : {a, b, d, aux, bias, workspace, static_cast<void*>(scales)}) cudaFree(p);
  return 0;
}
