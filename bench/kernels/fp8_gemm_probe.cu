// Which of cuBLASLt's FP8 GEMMs run at GPT-2's shapes, set up as dlbench's FP8 dense ops set them up, and
// how fast: the question behind --precision fp8's speed (bench/results/gpt2-fp8). On the H200 the heuristic
// offered algorithms that cublasLtMatmul then refused (CUBLAS_STATUS_NOT_SUPPORTED) for 22 of gpt2's and
// gpt2-large's 24 FP8 GEMM shapes, all set up with scale pointers, while gpu_ceilings' FP8 GEMMs without
// scales ran. For each GEMM of a
// model's dense layers (forward, data gradient, weight gradient) and each way of giving the scales:
//   none      no scales (the gpu_ceilings set-up, which ran E4M3 x E4M3 at 8192^3);
//   pointers  A and B scale pointers, 4 bytes apart as dlbench's per-layer arrays hold them;
//   aligned   the same pointers 16-byte aligned;
//   alpha     no scale pointers, alpha (their product) read from device memory
//   (CUBLASLT_POINTER_MODE_DEVICE);
// and with and without the bias epilogue, it asks the heuristic for up to 8 algorithms, tries each in turn,
// and prints how many it offered, the index of the first that ran (-1: none), and the fastest that ran in
// TFLOP/s (median of --reps), beside the BF16 GEMM of the same shape.
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
// (transposed, K-major) and B [k, n] (K-major): the only FP8 layout.
struct Gemm {
  int64_t m, n, k;
  cudaDataType_t a, b;
};

enum class Scales { none, pointers, aligned, alpha };
const char* scales_name(Scales s) {
  switch (s) {
    case Scales::none:
      return "none";
    case Scales::pointers:
      return "pointers";
    case Scales::aligned:
      return "aligned";
    case Scales::alpha:
      return "alpha";
  }
  return "?";
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
  std::vector<std::string> names;
  names.reserve(12);
  for (int l = 0; l < 4; ++l) {
    const int64_t in = layers[l][0], out = layers[l][1];
    names.push_back(std::string(layer_names[l]) + " forward");
    gemms.push_back({out, tokens, in, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3});  // A = w, B = x
    names.push_back(std::string(layer_names[l]) + " data grad");
    gemms.push_back({in, tokens, out, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2});  // A = w^T, B = dy
    names.push_back(std::string(layer_names[l]) + " weight grad");
    gemms.push_back({in, out, tokens, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2});  // A = x^T, B = dy^T
  }

  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "stream");
  cublasLtHandle_t lt;
  check(cublasLtCreate(&lt), "cublasLtCreate");
  int64_t largest = 0;
  for (const Gemm& g : gemms) largest = std::max({largest, g.m * g.k, g.n * g.k, g.m * g.n});
  void *a, *b, *d, *bias, *workspace;
  float* scales;  // [0..3): 4 bytes apart, as dlbench's arrays; [4], [8]: 16-byte aligned; [12]: alpha
  const size_t workspace_bytes = size_t{32} << 20;
  check(cudaMalloc(&a, largest * 2), "malloc");
  check(cudaMalloc(&b, largest * 2), "malloc");
  check(cudaMalloc(&d, largest * 2), "malloc");
  check(cudaMalloc(&bias, 4 * c * 2), "malloc");
  check(cudaMalloc(&workspace, workspace_bytes), "malloc");
  check(cudaMalloc(&scales, 16 * sizeof(float)), "malloc");
  // Small values: 0x2c is 0.375 in E4M3 and 2^-4 in E5M2; 0x2c2c a small BF16 number.
  check(cudaMemset(a, 0x2c, largest * 2), "memset");
  check(cudaMemset(b, 0x2c, largest * 2), "memset");
  check(cudaMemset(bias, 0, 4 * c * 2), "memset");
  const float host_scales[16] = {0.5f, 0.25f, 0.125f, 0, 0.5f, 0, 0, 0, 0.25f, 0, 0, 0, 0.125f, 0, 0, 0};
  check(cudaMemcpy(scales, host_scales, sizeof host_scales, cudaMemcpyHostToDevice), "upload");
  const float zero = 0.f, one = 1.f;
  float* device_zero = scales + 3;  // beta in device memory for the alpha mode

  std::printf("%s, %lld tokens; FP8 with BF16 out: offered / first that ran / best TFLOP/s\n", model.c_str(),
              static_cast<long long>(tokens));
  for (size_t i = 0; i < gemms.size(); ++i) {
    const Gemm& g = gemms[i];
    const double flops = 2.0 * g.m * g.n * g.k;
    auto layout = [](cudaDataType_t t, int64_t rows, int64_t cols) {
      cublasLtMatrixLayout_t l;
      check(cublasLtMatrixLayoutCreate(&l, t, rows, cols, rows), "layout");
      return l;
    };
    // The BF16 GEMM of the same shape, its heuristic's first algorithm.
    double bf16_tflops = 0;
    {
      cublasLtMatmulDesc_t desc;
      check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
      set(desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
      cublasLtMatrixLayout_t la = layout(CUDA_R_16BF, g.k, g.m), lb = layout(CUDA_R_16BF, g.k, g.n),
                             ld = layout(CUDA_R_16BF, g.m, g.n);
      const auto choices = heuristic_choices(lt, desc, la, lb, ld, workspace_bytes, 1);
      if (!choices.empty()) {
        const double ms = median_ms(stream, reps, [&] {
          return cublasLtMatmul(lt, desc, &one, a, la, b, lb, &zero, d, ld, d, ld, &choices[0].algo,
                                workspace, workspace_bytes, stream) == CUBLAS_STATUS_SUCCESS;
        });
        bf16_tflops = flops / (ms * 1e-3) / 1e12;
      }
      for (auto l : {la, lb, ld}) cublasLtMatrixLayoutDestroy(l);
      cublasLtMatmulDescDestroy(desc);
    }
    std::printf("%-24s m %5lld n %5lld k %5lld  bf16 %6.0f |", names[i].c_str(), static_cast<long long>(g.m),
                static_cast<long long>(g.n), static_cast<long long>(g.k), bf16_tflops);
    for (const bool with_bias : {false, true}) {
      if (with_bias && names[i].find("forward") == std::string::npos) continue;
      for (Scales mode : {Scales::none, Scales::pointers, Scales::aligned, Scales::alpha}) {
        cublasLtMatmulDesc_t desc;
        check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
        set(desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
        if (mode == Scales::pointers) {
          set(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const float*>(scales + 1));
          set(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const float*>(scales + 0));
        } else if (mode == Scales::aligned) {
          set(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const float*>(scales + 4));
          set(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const float*>(scales + 8));
        } else if (mode == Scales::alpha) {
          set(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, CUBLASLT_POINTER_MODE_DEVICE);
        }
        if (with_bias) {
          set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
          set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias));
          set(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_16BF);
        }
        cublasLtMatrixLayout_t la = layout(g.a, g.k, g.m), lb = layout(g.b, g.k, g.n),
                               ld = layout(CUDA_R_16BF, g.m, g.n);
        const auto results = heuristic_choices(lt, desc, la, lb, ld, workspace_bytes, 8);
        Outcome o;
        o.offered = static_cast<int>(results.size());
        const void* alpha = mode == Scales::alpha ? static_cast<const void*>(scales + 12) : &one;
        const void* beta = mode == Scales::alpha ? static_cast<const void*>(device_zero) : &zero;
        for (int j = 0; j < o.offered; ++j) {
          auto run = [&] {
            return cublasLtMatmul(lt, desc, alpha, a, la, b, lb, beta, d, ld, d, ld, &results[j].algo,
                                  workspace, workspace_bytes, stream) == CUBLAS_STATUS_SUCCESS;
          };
          if (!run()) continue;
          check(cudaStreamSynchronize(stream), "run");
          if (o.first_running < 0) o.first_running = j;
          o.best_tflops = std::max(o.best_tflops, flops / (median_ms(stream, reps, run) * 1e-3) / 1e12);
        }
        std::printf(" %s%s %d/%d/%.0f", with_bias ? "bias+" : "", scales_name(mode), o.offered,
                    o.first_running, o.best_tflops);
        for (auto l : {la, lb, ld}) cublasLtMatrixLayoutDestroy(l);
        cublasLtMatmulDescDestroy(desc);
      }
    }
    std::printf("\n");
  }
  cublasLtDestroy(lt);
  for (void* p : {a, b, d, bias, workspace, static_cast<void*>(scales)}) cudaFree(p);
  return 0;
}
