// What the GPT-2 GEMM probes share (fp8_gemm_probe, gemm_choice_probe, gemm_space_probe): one GEMM of a
// block and its epilogue's name, an algorithm's configuration attributes,
// errors that end the program with one line naming it, cuBLASLt descriptor attributes, random BF16 operands,
// the command line (--model, --tokens, --reps, --sustain-ms) with the model's width and cuBLASLt's heuristic
// choices for a GEMM; errors and timing from event_timing.h.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "event_timing.h"

namespace gpt_gemm_probe {

using kernel_bench::check;
using kernel_bench::median_ms;
using kernel_bench::program;

template <typename T>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  check(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)), "set attribute");
}

// Uniform values in [-1, 1) from a hash of the index: random operands, as a power-capped GPU's speed
// depends on the bits.
static __global__ void fill_random(__nv_bfloat16* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    x[i] = __float2bfloat16(static_cast<float>(h) / 2147483648.f - 1.f);
  }
}

struct Options {
  std::string model = "gpt2-large";
  int64_t tokens = 16384;
  int reps = 10;
  double sustain_ms = 0;  // > 0: time each GEMM sustained for this long (kernel_bench::sustained_ms)
  int offers = 8;         // how many of the heuristic's algorithms to ask for (--offers)
  int64_t width = 0;      // the model's C
};

// --model, --tokens (a positive multiple of `token_multiple`), --reps; a bad one ends the program with
// status 2 and one line.
inline Options parse_options(int argc, char** argv, int64_t token_multiple) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    auto value = [&](const char* flag) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s: %s needs a value\n", program, flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--model")) {
      o.model = value("--model");
    } else if (!std::strcmp(argv[i], "--tokens")) {
      o.tokens = std::atoll(value("--tokens"));
    } else if (!std::strcmp(argv[i], "--reps")) {
      o.reps = std::atoi(value("--reps"));
    } else if (!std::strcmp(argv[i], "--sustain-ms")) {
      o.sustain_ms = std::atof(value("--sustain-ms"));
    } else if (!std::strcmp(argv[i], "--offers")) {
      o.offers = std::atoi(value("--offers"));
    } else {
      std::fprintf(stderr,
                   "%s: unknown argument %s (--model M --tokens N --reps R --sustain-ms T --offers K)\n",
                   program, argv[i]);
      std::exit(2);
    }
  }
  o.width = o.model == "gpt2"          ? 768
            : o.model == "gpt2-medium" ? 1024
            : o.model == "gpt2-large"  ? 1280
            : o.model == "gpt2-xl"     ? 1600
                                       : 0;
  if (o.width == 0 || o.tokens < token_multiple || o.tokens % token_multiple || o.reps < 1 ||
      o.sustain_ms < 0 || o.offers < 1 || o.offers > 64) {
    const std::string tokens =
        token_multiple > 1 ? "a multiple of " + std::to_string(token_multiple) : std::string(">= 1");
    std::fprintf(
        stderr,
        "%s: --model gpt2|gpt2-medium|gpt2-large|gpt2-xl, --tokens %s, --reps >= 1, --sustain-ms >= 0, "
        "--offers 1..64\n",
        program, tokens.c_str());
    std::exit(2);
  }
  return o;
}

// Up to `count` algorithms of cuBLASLt's heuristic for D = op(A) op(B) with `workspace_bytes` of
// workspace, best first; none where it offers none.
inline std::vector<cublasLtMatmulHeuristicResult_t> heuristic_choices(
    cublasLtHandle_t lt, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
    cublasLtMatrixLayout_t d, size_t workspace_bytes, int count) {
  cublasLtMatmulPreference_t pref;
  check(cublasLtMatmulPreferenceCreate(&pref), "preference");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                             sizeof workspace_bytes),
        "preference");
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(count));
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, d, d, pref, count, results.data(), &found) !=
      CUBLAS_STATUS_SUCCESS)
    found = 0;
  cublasLtMatmulPreferenceDestroy(pref);
  results.resize(static_cast<size_t>(found));
  return results;
}

// One GEMM in cuBLASLt's column-major terms, D[m, n] = op(A)[m, k] op(B)[k, n] (+ C), as dlbench's
// row-major call maps onto it (cuBLASLt's A is the row-major b, its B the row-major a).
struct Gemm {
  std::string name;
  cublasOperation_t ta, tb;
  int64_t m, n, k;
  cublasLtEpilogue_t epilogue;
  bool residual;           // beta 1, C another matrix (the forward's residual add)
  bool candidate = false;  // an alternative to the GEMM before it, not counted in a block's sums
};

inline const char* epilogue_name(cublasLtEpilogue_t e, bool residual) {
  return e == CUBLASLT_EPILOGUE_BIAS            ? (residual ? "bias+residual" : "bias")
         : e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ? "gelu_aux_bias"
         : e == CUBLASLT_EPILOGUE_DGELU         ? "dgelu"
         : e == CUBLASLT_EPILOGUE_BGRADB        ? "bgradb"
         : e == CUBLASLT_EPILOGUE_DGELU_BGRAD   ? "dgelu_bgrad"
                                                : "none";
}

// One of an algorithm's configuration attributes (zero where cuBLASLt gives none).
template <typename T>
T config_value(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute) {
  T value{};
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof value, &written);
  return value;
}

}  // namespace gpt_gemm_probe
