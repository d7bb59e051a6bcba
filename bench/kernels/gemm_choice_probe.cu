// Would a timed search among cuBLASLt's heuristic choices pay for GPT-2's BF16 GEMMs? dlbench runs the
// heuristic's first algorithm for each shape (lt_matmul.cc). For each GEMM of a model's dense layers, laid
// out and with the epilogue dlbench's BF16 dense ops give it (dense_epilogues.cc), this asks the heuristic
// for up to 8 algorithms (--offers), times each that runs (median of --reps, on random operands: a
// power-capped GPU's speed depends on the bits), and prints the first choice's TFLOP/s, the best one's and
// its place in the list. The last line sums the twelve GEMMs' times: what a search could save of them, an
// upper bound on its worth in a step (the layers' twelve GEMMs are ~60% of a gpt2-large bf16 step). Each GEMM
// with an epilogue (or a residual) is also timed plain, its first choice on the same operands: what the
// epilogue costs the GEMM, against what a pass of its own over the result would cost (FP8's DGELU ran at a
// fifth of the plain GEMM's rate: bench/results/gpt2-fp8). mlp.c_proj's data GEMM is also timed with
// DGELU_BGRAD, the bias gradient of mlp.c_fc in its epilogue (a row of its own, outside the block's sums):
// whether that costs less than the bias kernel's pass over c_fc's output gradient.
//
// With --sustain-ms T each algorithm is instead run back to back for T ms after T ms untimed
// (kernel_bench::sustained_ms): its rate at the power cap, where a bf16 step of gpt2-large spends its
// time (bench/results/power-and-clocks), so that an algorithm doing the same work on less energy shows.
//
//   gemm_choice_probe [--model gpt2|gpt2-medium|gpt2-large|gpt2-xl] [--tokens N] [--reps R] [--sustain-ms T]
//                     [--offers K]
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "gpt_gemm_probe.h"

namespace {

using gpt_gemm_probe::check;
using gpt_gemm_probe::config_value;
using gpt_gemm_probe::epilogue_name;
using gpt_gemm_probe::fill_random;
using gpt_gemm_probe::Gemm;
using gpt_gemm_probe::heuristic_choices;
using gpt_gemm_probe::median_ms;
using gpt_gemm_probe::set;

}  // namespace

int main(int argc, char** argv) {
  gpt_gemm_probe::program = "gemm_choice_probe";
  const gpt_gemm_probe::Options options = gpt_gemm_probe::parse_options(argc, argv, 1);
  const std::string& model = options.model;
  const int64_t tokens = options.tokens, c = options.width;
  const int reps = options.reps;

  // The dense layers (in, out) and their three GEMMs with the BF16 epilogues dlbench gives them
  // (dense_epilogues.cc; until 2026-12-06 the weight GEMMs here carried BGRADB, which dlbench had since
  // left for the bias kernel's pass):
  //   forward  y = x W^T + b (+ residual, or GELU with its input saved): A = W, B = x;
  //   data     dx = dy W (through GELU's gradient after mlp.c_fc): A = W, B = dy;
  //   weight   dW = dy^T x, plain: A = x, B = dy.
  struct Layer {
    const char* name;
    int64_t in, out;
    cublasLtEpilogue_t forward;
    bool residual, dgelu;
  };
  const Layer layers[] = {{"c_attn", c, 3 * c, CUBLASLT_EPILOGUE_BIAS, false, false},
                          {"attn.c_proj", c, c, CUBLASLT_EPILOGUE_BIAS, true, false},
                          {"mlp.c_fc", c, 4 * c, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, false, false},
                          {"mlp.c_proj", 4 * c, c, CUBLASLT_EPILOGUE_BIAS, true, true}};
  std::vector<Gemm> gemms;
  for (const Layer& l : layers) {
    const std::string name = l.name;
    gemms.push_back(
        {name + " forward", CUBLAS_OP_T, CUBLAS_OP_N, l.out, tokens, l.in, l.forward, l.residual});
    gemms.push_back({name + " data grad", CUBLAS_OP_N, CUBLAS_OP_N, l.in, tokens, l.out,
                     l.dgelu ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT, false});
    // The candidate: GELU's gradient with the bias gradient of the layer before (mlp.c_fc's, the sum of
    // its output gradient over the tokens) in the same epilogue, instead of the bias kernel's pass.
    if (l.dgelu)
      gemms.push_back({name + " data grad + c_fc db", CUBLAS_OP_N, CUBLAS_OP_N, l.in, tokens, l.out,
                       CUBLASLT_EPILOGUE_DGELU_BGRAD, false, true});
    gemms.push_back({name + " weight grad", CUBLAS_OP_N, CUBLAS_OP_T, l.in, l.out, tokens,
                     CUBLASLT_EPILOGUE_DEFAULT, false});
  }

  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "stream");
  cublasLtHandle_t lt;
  check(cublasLtCreate(&lt), "cublasLtCreate");
  int64_t largest = 0;
  for (const Gemm& g : gemms) largest = std::max({largest, g.m * g.k, g.n * g.k, g.m * g.n});
  __nv_bfloat16 *a, *b, *d, *residual_values, *aux, *bias;
  void* workspace;
  const size_t workspace_bytes = size_t{32} << 20;  // dlbench's cuBLAS workspace
  for (__nv_bfloat16** p : {&a, &b, &d, &residual_values, &aux})
    check(cudaMalloc(p, static_cast<size_t>(largest) * sizeof(__nv_bfloat16)), "malloc");
  check(cudaMalloc(&bias, static_cast<size_t>(4 * c) * sizeof(__nv_bfloat16)), "malloc");
  check(cudaMalloc(&workspace, workspace_bytes), "malloc");
  uint32_t seed = 1;
  for (__nv_bfloat16* p : {a, b, residual_values, aux})
    fill_random<<<1024, 256, 0, stream>>>(p, largest, seed++);
  fill_random<<<16, 256, 0, stream>>>(bias, 4 * c, seed++);
  check(cudaStreamSynchronize(stream), "fill");
  const float one = 1.f, zero = 0.f;

  // The heuristic's choices for g with `epilogue` (and its residual where `residual`), each timed: -1 where
  // the call refused it.
  auto time_choices = [&](const Gemm& g, cublasLtEpilogue_t epilogue, bool residual) {
    cublasLtMatmulDesc_t desc;
    check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
    set(desc, CUBLASLT_MATMUL_DESC_TRANSA, g.ta);
    set(desc, CUBLASLT_MATMUL_DESC_TRANSB, g.tb);
    set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    if (epilogue != CUBLASLT_EPILOGUE_DEFAULT && epilogue != CUBLASLT_EPILOGUE_DGELU)
      set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(bias));
    if (epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || epilogue == CUBLASLT_EPILOGUE_DGELU ||
        epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
      set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(aux));
      set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.m);
    }
    // Column-major layouts: op(A) is [m, k], so A is stored [k, m] where transposed; likewise B.
    auto layout = [](int64_t rows, int64_t cols) {
      cublasLtMatrixLayout_t l;
      check(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, rows, cols, rows), "layout");
      return l;
    };
    cublasLtMatrixLayout_t la = g.ta == CUBLAS_OP_N ? layout(g.m, g.k) : layout(g.k, g.m),
                           lb = g.tb == CUBLAS_OP_N ? layout(g.k, g.n) : layout(g.n, g.k),
                           ld = layout(g.m, g.n);
    const auto results = heuristic_choices(lt, desc, la, lb, ld, workspace_bytes, options.offers);
    const float* beta = residual ? &one : &zero;
    const void* c_in = residual ? static_cast<const void*>(residual_values) : static_cast<const void*>(d);
    std::vector<double> ms(results.size(), -1.0);
    for (size_t j = 0; j < results.size(); ++j) {
      auto run = [&] {
        return cublasLtMatmul(lt, desc, &one, a, la, b, lb, beta, c_in, ld, d, ld, &results[j].algo,
                              workspace, workspace_bytes, stream) == CUBLAS_STATUS_SUCCESS;
      };
      if (!run()) continue;
      check(cudaStreamSynchronize(stream), "warm-up");
      ms[j] = options.sustain_ms > 0 ? kernel_bench::sustained_ms(stream, options.sustain_ms, run)
                                     : median_ms(stream, reps, run);
    }
    if (options.sustain_ms > 0)  // each offer's configuration beside its time, to find a rule in them
      for (size_t j = 0; j < results.size(); ++j) {
        auto config = [&](cublasLtMatmulAlgoConfigAttributes_t attribute) {
          return config_value<uint32_t>(results[j].algo, attribute);
        };
        std::printf(
            "  %-22s %-14s offer %zu: algo %u tile %u stages %u cluster %u split-k %u swizzle %u  %.3f ms\n",
            g.name.c_str(), epilogue_name(epilogue, residual), j, config(CUBLASLT_ALGO_CONFIG_ID),
            config(CUBLASLT_ALGO_CONFIG_TILE_ID), config(CUBLASLT_ALGO_CONFIG_STAGES_ID),
            config(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID), config(CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
            config(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING), ms[j]);
      }
    for (auto l : {la, lb, ld}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(desc);
    return ms;
  };
  auto first_that_ran = [](const std::vector<double>& ms) {
    for (size_t j = 0; j < ms.size(); ++j)
      if (ms[j] >= 0) return static_cast<int>(j);
    return -1;
  };

  std::printf(
      "%s, %lld tokens, BF16: heuristic offered / first choice TFLOP/s / best TFLOP/s (its place); the "
      "first choice's ms with dlbench's epilogue and as the plain GEMM (no epilogue, no residual)\n",
      model.c_str(), static_cast<long long>(tokens));
  double first_total_ms = 0, best_total_ms = 0, plain_total_ms = 0;
  for (const Gemm& g : gemms) {
    const std::vector<double> ms = time_choices(g, g.epilogue, g.residual);
    const int offered = static_cast<int>(ms.size()), first = first_that_ran(ms);
    const double flops = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
    int best = first;
    for (int j = 0; j < offered; ++j)
      if (ms[static_cast<size_t>(j)] >= 0 && ms[static_cast<size_t>(j)] < ms[static_cast<size_t>(best)])
        best = j;
    if (first < 0) {
      std::printf("%-24s m %5lld n %5lld k %5lld  offered %d, none ran\n", g.name.c_str(),
                  static_cast<long long>(g.m), static_cast<long long>(g.n), static_cast<long long>(g.k),
                  offered);
      continue;
    }
    const double first_ms = ms[static_cast<size_t>(first)], best_ms = ms[static_cast<size_t>(best)];
    double plain_ms = first_ms;  // the GEMM without an epilogue or residual: itself
    if (g.epilogue != CUBLASLT_EPILOGUE_DEFAULT || g.residual) {
      const std::vector<double> plain = time_choices(g, CUBLASLT_EPILOGUE_DEFAULT, false);
      const int plain_first = first_that_ran(plain);
      plain_ms = plain_first < 0 ? -1.0 : plain[static_cast<size_t>(plain_first)];
    }
    if (!g.candidate) {
      first_total_ms += first_ms;
      best_total_ms += best_ms;
      plain_total_ms += plain_ms;
    }
    std::printf(
        "%-24s m %5lld n %5lld k %5lld  %d / %6.1f / %6.1f (%d)  %.3f -> %.3f ms  %-14s %.3f, plain %.3f "
        "ms\n",
        g.name.c_str(), static_cast<long long>(g.m), static_cast<long long>(g.n), static_cast<long long>(g.k),
        offered, flops / (first_ms * 1e-3) / 1e12, flops / (best_ms * 1e-3) / 1e12, best, first_ms, best_ms,
        epilogue_name(g.epilogue, g.residual), first_ms, plain_ms);
  }
  std::printf("a block's twelve GEMMs: first choices %.3f ms, best %.3f ms: a search saves %.1f%%\n",
              first_total_ms, best_total_ms,
              first_total_ms > 0 ? 100.0 * (first_total_ms - best_total_ms) / first_total_ms : 0.0);
  std::printf("the same GEMMs plain (first choices): %.3f ms: the epilogues cost %.3f ms of the block\n",
              plain_total_ms, first_total_ms - plain_total_ms);
  cublasLtDestroy(lt);
  for (void* p :
       {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(d),
        static_cast<void*>(residual_values), static_cast<void*>(aux), static_cast<void*>(bias), workspace})
    cudaFree(p);
  return 0;
}
