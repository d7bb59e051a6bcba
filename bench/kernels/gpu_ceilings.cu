// The two ceilings a training step is held against, measured on the GPU it runs on:
//   * dense matrix-multiply rate per precision: cuBLAS GEMMs of M = N = K = --size (8192 by default), FP16
//     and BF16 inputs with FP32 accumulation on tensor cores, TF32 tensor cores, and plain FP32 (pedantic:
//     no tensor cores) — the most a convolution lowered to a GEMM can reach; and on GPUs with FP8 tensor
//     cores (compute capability 8.9 and up) cuBLASLt's FP8 GEMMs with BF16 output as a transformer's FP8
//     training runs them: E4M3 x E4M3 (forward) and E4M3 x E5M2 (a gradient GEMM), both operands K-major
//     (the only layout Hopper's FP8 GEMMs take);
//   * memory bandwidth: a device-to-device copy (cudaMemcpyAsync) and dlbench's own grid-stride copy and
//     read-only sum kernels over --gib GiB buffers, far larger than the L2 (bytes read + written / time).
// Each figure is the median of --reps timed repetitions between two CUDA events, after one warm-up.
// Prints a table and, with --json FILE, one JSON object per ceiling (JSON Lines) for
// bench/results/gpu-ceilings/.
//
//   gpu_ceilings [--size N] [--gib G] [--reps R] [--json FILE]
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "event_timing.h"

namespace {

using kernel_bench::check;

// Each timed figure follows one warm-up.
double median_ms(cudaStream_t stream, int reps, const std::function<void()>& body) {
  return kernel_bench::median_ms(stream, reps, body, 1);
}

__global__ void copy_kernel(const float4* __restrict__ in, float4* __restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    out[i] = in[i];
}

// Each block sums its share; one atomic per block, so the kernel is bound by reading `in`.
__global__ void sum_kernel(const float4* __restrict__ in, size_t n, float* total) {
  float s = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    float4 v = in[i];
    s += v.x + v.y + v.z + v.w;
  }
  for (int offset = 16; offset > 0; offset /= 2) s += __shfl_down_sync(0xffffffffu, s, offset);
  if ((threadIdx.x & 31) == 0) atomicAdd(total, s);
}

struct Ceiling {
  std::string name, unit;
  double value;
  std::string detail;
};

}  // namespace

int main(int argc, char** argv) {
  kernel_bench::program = "gpu_ceilings";
  int size = 8192, reps = 20;
  double gib = 2.0;
  const char* json_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    auto value = [&](const char* flag) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gpu_ceilings: %s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--size"))
      size = std::atoi(value("--size"));
    else if (!std::strcmp(argv[i], "--gib"))
      gib = std::atof(value("--gib"));
    else if (!std::strcmp(argv[i], "--reps"))
      reps = std::atoi(value("--reps"));
    else if (!std::strcmp(argv[i], "--json"))
      json_path = value("--json");
    else {
      std::fprintf(stderr, "gpu_ceilings: unknown argument %s (--size N --gib G --reps R --json FILE)\n",
                   argv[i]);
      return 2;
    }
  }
  if (size < 256 || reps < 1 || gib <= 0) {
    std::fprintf(stderr, "gpu_ceilings: --size must be >= 256, --reps >= 1, --gib > 0\n");
    return 2;
  }

  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "device properties");
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "stream");
  std::vector<Ceiling> ceilings;

  // ---- GEMM rates ----
  cublasHandle_t handle;
  check(cublasCreate(&handle), "cublasCreate");
  check(cublasSetStream(handle, stream), "cublasSetStream");
  const size_t n = static_cast<size_t>(size);
  void *a, *b, *c;
  check(cudaMalloc(&a, n * n * 4), "malloc A");
  check(cudaMalloc(&b, n * n * 4), "malloc B");
  check(cudaMalloc(&c, n * n * 4), "malloc C");
  // Small values, so that no product overflows in FP16: 0x2c00 is 2^-4 in FP16; in BF16 and FP32 the same
  // bytes are small normal numbers too, and one 0x2c byte is 0.375 in E4M3 and 2^-4 in E5M2.
  check(cudaMemset(a, 0x2c, n * n * 4), "memset");
  check(cudaMemset(b, 0x2c, n * n * 4), "memset");
  struct GemmCase {
    const char* name;
    cudaDataType_t type;
    cublasComputeType_t compute;
  };
  const GemmCase cases[] = {
      {"gemm_fp16_tensor_core", CUDA_R_16F, CUBLAS_COMPUTE_32F},
      {"gemm_bf16_tensor_core", CUDA_R_16BF, CUBLAS_COMPUTE_32F},
      {"gemm_tf32_tensor_core", CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32},
      {"gemm_fp32_no_tensor_core", CUDA_R_32F, CUBLAS_COMPUTE_32F_PEDANTIC},
  };
  const float alpha = 1.f, beta = 0.f;
  for (const GemmCase& g : cases) {
    const double ms = median_ms(stream, reps, [&] {
      check(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, size, size, size, &alpha, a, g.type, size, b,
                         g.type, size, &beta, c, g.type, size, g.compute, CUBLAS_GEMM_DEFAULT),
            g.name);
    });
    const double tflops = 2.0 * n * n * n / (ms * 1e-3) / 1e12;
    char detail[96];
    std::snprintf(detail, sizeof detail, "M=N=K=%d, %.3f ms", size, ms);
    ceilings.push_back({g.name, "TFLOP/s", tflops, detail});
  }
  cublasDestroy(handle);

  // FP8: D (BF16, M x N) = A^T B with A (K x M) and B (K x N) column-major, so that both are K-major.
  if (prop.major * 10 + prop.minor >= 89) {
    cublasLtHandle_t lt;
    check(cublasLtCreate(&lt), "cublasLtCreate");
    const size_t workspace_bytes = size_t{64} << 20;
    void* workspace;
    check(cudaMalloc(&workspace, workspace_bytes), "malloc workspace");
    const struct {
      const char* name;
      cudaDataType_t a, b;
    } fp8_cases[] = {{"gemm_fp8_e4m3_tensor_core", CUDA_R_8F_E4M3, CUDA_R_8F_E4M3},
                     {"gemm_fp8_e4m3_e5m2_tensor_core", CUDA_R_8F_E4M3, CUDA_R_8F_E5M2}};
    for (const auto& g : fp8_cases) {
      cublasLtMatmulDesc_t desc;
      check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
      const cublasOperation_t transpose = CUBLAS_OP_T;
      check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose),
            "transa");
      cublasLtMatrixLayout_t la, lb, ld;
      check(cublasLtMatrixLayoutCreate(&la, g.a, size, size, size), "layout A");
      check(cublasLtMatrixLayoutCreate(&lb, g.b, size, size, size), "layout B");
      check(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, size, size, size), "layout D");
      cublasLtMatmulPreference_t preference;
      check(cublasLtMatmulPreferenceCreate(&preference), "preference");
      check(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &workspace_bytes, sizeof workspace_bytes),
            "workspace preference");
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      check(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, preference, 1, &result, &found),
            "FP8 heuristic");
      if (found == 0) {
        std::fprintf(stderr, "gpu_ceilings: %s: cuBLASLt has no algorithm\n", g.name);
      } else {
        const double ms = median_ms(stream, reps, [&] {
          check(cublasLtMatmul(lt, desc, &alpha, a, la, b, lb, &beta, c, ld, c, ld, &result.algo, workspace,
                               workspace_bytes, stream),
                g.name);
        });
        char detail[96];
        std::snprintf(detail, sizeof detail, "M=N=K=%d, BF16 out, %.3f ms", size, ms);
        ceilings.push_back({g.name, "TFLOP/s", 2.0 * n * n * n / (ms * 1e-3) / 1e12, detail});
      }
      cublasLtMatmulPreferenceDestroy(preference);
      cublasLtMatrixLayoutDestroy(la);
      cublasLtMatrixLayoutDestroy(lb);
      cublasLtMatrixLayoutDestroy(ld);
      cublasLtMatmulDescDestroy(desc);
    }
    cudaFree(workspace);
    cublasLtDestroy(lt);
  }
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);

  // ---- memory bandwidth ----
  const size_t bytes = static_cast<size_t>(gib * (1 << 30)) / 16 * 16;
  void *src, *dst;
  float* total;
  check(cudaMalloc(&src, bytes), "malloc src");
  check(cudaMalloc(&dst, bytes), "malloc dst");
  check(cudaMalloc(&total, sizeof(float)), "malloc total");
  check(cudaMemset(src, 0, bytes), "memset");
  const size_t vectors = bytes / 16;
  const int threads = 256, blocks = prop.multiProcessorCount * 8;
  auto bandwidth = [&](const char* name, double bytes_moved, const std::function<void()>& body) {
    const double ms = median_ms(stream, reps, body);
    char detail[96];
    std::snprintf(detail, sizeof detail, "%.2f GiB buffers, %.3f ms", gib, ms);
    ceilings.push_back({name, "GB/s", bytes_moved / (ms * 1e-3) / 1e9, detail});
  };
  bandwidth("memcpy_device_to_device", 2.0 * bytes,
            [&] { check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), "memcpy"); });
  bandwidth("copy_kernel_read_write", 2.0 * bytes, [&] {
    copy_kernel<<<blocks, threads, 0, stream>>>(static_cast<const float4*>(src), static_cast<float4*>(dst),
                                                vectors);
  });
  bandwidth("sum_kernel_read_only", 1.0 * bytes, [&] {
    sum_kernel<<<blocks, threads, 0, stream>>>(static_cast<const float4*>(src), vectors, total);
  });
  check(cudaGetLastError(), "kernels");
  check(cudaStreamSynchronize(stream), "kernels");
  cudaFree(src);
  cudaFree(dst);
  cudaFree(total);

  std::printf("ceilings of %s (%d SMs, %.0f GiB)\n", prop.name, prop.multiProcessorCount,
              static_cast<double>(prop.totalGlobalMem) / (1 << 30));
  std::printf("%-26s %12s  %s\n", "ceiling", "value", "how");
  for (const Ceiling& c : ceilings)
    std::printf("%-26s %8.1f %-8s %s\n", c.name.c_str(), c.value, c.unit.c_str(), c.detail.c_str());
  if (json_path) {
    FILE* f = std::fopen(json_path, "w");
    if (!f) {
      std::fprintf(stderr, "gpu_ceilings: cannot write %s\n", json_path);
      return 1;
    }
    for (const Ceiling& c : ceilings)
      std::fprintf(f,
                   "{\"device\": \"cuda:%s\", \"ceiling\": \"%s\", \"value\": %.2f, \"unit\": \"%s\", "
                   "\"how\": \"%s\"}\n",
                   prop.name, c.name.c_str(), c.value, c.unit.c_str(), c.detail.c_str());
    std::fclose(f);
  }
  return 0;
}
