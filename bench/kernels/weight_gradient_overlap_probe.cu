// How much of a GPT-2 block's backward GEMM time could a second stream give back? dlbench's
// --weight-gradient-stream runs each dense layer's weight GEMM (dW = dy^T x) on a second stream beside its
// data GEMM (dx = dy W): a weight GEMM's output [O, I] has few tiles, so its last wave leaves SMs idle,
// which the data GEMM's many tiles could fill. With next-layer it also runs beside the next layer's
// backward, a layer norm's (a pass over memory). This probe times, for each of a block's dense layers at
// --tokens, with dlbench's layouts, epilogue (mlp.c_proj's data GEMM applies GELU's gradient) and
// cuBLASLt's first choice on random BF16 operands:
//
//   data, weight        each GEMM alone
//   serial              weight then data on one stream (dlbench without the option)
//   weight first        weight queued on the side stream, then data on the first, joined (the option)
//   data first          the other way round
//
// and, for the next-layer case, the weight GEMM beside a pass that reads three [tokens, C] BF16 matrices
// and writes one (a layer norm's backward: x, dy and the stream's gradient read, the gradient written):
// alone, serial, and side by side. Last, the block's sums: what each order saves against serial.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -Ibench/kernels bench/kernels/weight_gradient_overlap_probe.cu \
//     -o weight_gradient_overlap_probe -lcublasLt
//   weight_gradient_overlap_probe [--model gpt2|gpt2-medium|gpt2-large|gpt2-xl] [--tokens N] [--reps R]
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "gpt_gemm_probe.h"

namespace {

using gpt_gemm_probe::check;
using gpt_gemm_probe::fill_random;
using gpt_gemm_probe::heuristic_choices;
using gpt_gemm_probe::median_ms;
using gpt_gemm_probe::set;

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // dlbench's cuBLAS workspace, one per stream

// d += a * b over n elements, 8 at a time: three matrices read and one written, as a layer norm's backward
// moves them.
__global__ void memory_pass(const uint4* a, const uint4* b, uint4* d, int64_t vectors) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < vectors;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint4 va = a[i], vb = b[i], vd = d[i];
    auto* pa = reinterpret_cast<__nv_bfloat162*>(&va);
    auto* pb = reinterpret_cast<__nv_bfloat162*>(&vb);
    auto* pd = reinterpret_cast<__nv_bfloat162*>(&vd);
    for (int j = 0; j < 4; ++j) pd[j] = __hfma2(pa[j], pb[j], pd[j]);
    d[i] = vd;
  }
}

// One GEMM D[m, n] = op(A)[m, k] op(B)[k, n] in cuBLASLt's column-major terms (dlbench's row-major call
// swaps its operands), with the heuristic's first algorithm.
class Gemm {
 public:
  Gemm(cublasLtHandle_t lt, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
       bool dgelu, void* aux)
      : lt_(lt), flops_(2.0 * double(m) * double(n) * double(k)) {
    check(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
    set(desc_, CUBLASLT_MATMUL_DESC_TRANSA, ta);
    set(desc_, CUBLASLT_MATMUL_DESC_TRANSB, tb);
    const cublasLtEpilogue_t epilogue = dgelu ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT;
    set(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    if (dgelu) {
      set(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
      set(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, m);
    }
    auto layout = [](int64_t rows, int64_t cols) {
      cublasLtMatrixLayout_t l;
      check(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, rows, cols, rows), "layout");
      return l;
    };
    a_ = ta == CUBLAS_OP_N ? layout(m, k) : layout(k, m);
    b_ = tb == CUBLAS_OP_N ? layout(k, n) : layout(n, k);
    d_ = layout(m, n);
    const auto choices = heuristic_choices(lt, desc_, a_, b_, d_, kWorkspaceBytes, 1);
    if (choices.empty()) {
      std::fprintf(stderr, "%s: cuBLASLt offers no algorithm for m %lld n %lld k %lld\n",
                   gpt_gemm_probe::program, static_cast<long long>(m), static_cast<long long>(n),
                   static_cast<long long>(k));
      std::exit(1);
    }
    algo_ = choices[0].algo;
  }
  ~Gemm() {
    for (auto l : {a_, b_, d_}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(desc_);
  }
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  void run(const void* a, const void* b, void* d, void* workspace, cudaStream_t stream) const {
    const float one = 1.f, zero = 0.f;
    check(cublasLtMatmul(lt_, desc_, &one, a, a_, b, b_, &zero, d, d_, d, d_, &algo_, workspace,
                         kWorkspaceBytes, stream),
          "matmul");
  }
  double tflops(double ms) const { return flops_ / (ms * 1e-3) / 1e12; }

 private:
  cublasLtHandle_t lt_;
  double flops_;
  cublasLtMatmulDesc_t desc_;
  cublasLtMatrixLayout_t a_, b_, d_;
  cublasLtMatmulAlgo_t algo_;
};

}  // namespace

int main(int argc, char** argv) {
  gpt_gemm_probe::program = "weight_gradient_overlap_probe";
  const gpt_gemm_probe::Options options = gpt_gemm_probe::parse_options(argc, argv, 1);
  const int64_t tokens = options.tokens, c = options.width;
  const int reps = options.reps;

  struct Layer {
    const char* name;
    int64_t in, out;
    bool dgelu;  // the data GEMM applies GELU's gradient (mlp.c_proj's, into c_fc's output gradient)
  };
  const Layer layers[] = {{"c_attn", c, 3 * c, false},
                          {"attn.c_proj", c, c, false},
                          {"mlp.c_fc", c, 4 * c, false},
                          {"mlp.c_proj", 4 * c, c, true}};

  cudaStream_t first, side;
  check(cudaStreamCreateWithFlags(&first, cudaStreamNonBlocking), "stream");
  check(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "stream");
  cudaEvent_t fork, join;
  check(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), "event");
  check(cudaEventCreateWithFlags(&join, cudaEventDisableTiming), "event");
  cublasLtHandle_t lt;
  check(cublasLtCreate(&lt), "cublasLtCreate");
  const int64_t largest = tokens * 4 * c;  // dy, x, dx and GELU's input are at most [tokens, 4C]
  __nv_bfloat16 *dy, *x, *w, *dx, *dw, *aux;
  void *workspace_first, *workspace_side;
  for (__nv_bfloat16** p : {&dy, &x, &dx, &aux})
    check(cudaMalloc(p, static_cast<size_t>(largest) * sizeof(__nv_bfloat16)), "malloc");
  for (__nv_bfloat16** p : {&w, &dw})
    check(cudaMalloc(p, static_cast<size_t>(16 * c * c) * sizeof(__nv_bfloat16)), "malloc");
  check(cudaMalloc(&workspace_first, kWorkspaceBytes), "malloc");
  check(cudaMalloc(&workspace_side, kWorkspaceBytes), "malloc");
  uint32_t seed = 1;
  for (__nv_bfloat16* p : {dy, x, dx, aux}) fill_random<<<1024, 256, 0, first>>>(p, largest, seed++);
  for (__nv_bfloat16* p : {w, dw}) fill_random<<<1024, 256, 0, first>>>(p, 16 * c * c, seed++);
  check(cudaStreamSynchronize(first), "fill");

  // `on_side` on the side stream forked from `first`, `on_first` on `first`, joined; `side_first`: queued
  // in that order.
  auto side_by_side = [&](const std::function<void(cudaStream_t)>& on_side,
                          const std::function<void(cudaStream_t)>& on_first, bool side_first) {
    check(cudaEventRecord(fork, first), "record");
    check(cudaStreamWaitEvent(side, fork), "wait");
    if (side_first) on_side(side);
    on_first(first);
    if (!side_first) on_side(side);
    check(cudaEventRecord(join, side), "record");
    check(cudaStreamWaitEvent(first, join), "wait");
  };
  auto time = [&](const std::function<void()>& body) { return median_ms(first, reps, body, 2); };

  std::printf(
      "%s, %lld tokens, BF16, cuBLASLt's first choices; ms (median of %d): data GEMM, weight GEMM, both on "
      "one stream, side by side with the weight GEMM queued first, with the data GEMM queued first\n",
      options.model.c_str(), static_cast<long long>(tokens), reps);
  double serial_total = 0, weight_first_total = 0, data_first_total = 0, weight_total = 0;
  for (const Layer& l : layers) {
    // dx [tokens, in] = dy [tokens, out] W [out, in]; dW [out, in] = dy^T x [tokens, in].
    const Gemm data(lt, CUBLAS_OP_N, CUBLAS_OP_N, l.in, tokens, l.out, l.dgelu, aux);
    const Gemm weight(lt, CUBLAS_OP_N, CUBLAS_OP_T, l.in, l.out, tokens, false, nullptr);
    auto run_data = [&](cudaStream_t s) {
      data.run(w, dy, dx, s == side ? workspace_side : workspace_first, s);
    };
    auto run_weight = [&](cudaStream_t s) {
      weight.run(x, dy, dw, s == side ? workspace_side : workspace_first, s);
    };
    const double data_ms = time([&] { run_data(first); }), weight_ms = time([&] { run_weight(first); });
    const double serial_ms = time([&] {
      run_weight(first);
      run_data(first);
    });
    const double weight_first_ms = time([&] { side_by_side(run_weight, run_data, true); });
    const double data_first_ms = time([&] { side_by_side(run_weight, run_data, false); });
    std::printf(
        "%-12s data %.3f (%.0f TFLOP/s)  weight %.3f (%.0f)  serial %.3f  weight first %.3f (%+.1f%%)  "
        "data first %.3f (%+.1f%%)\n",
        l.name, data_ms, data.tflops(data_ms), weight_ms, weight.tflops(weight_ms), serial_ms,
        weight_first_ms, 100.0 * (weight_first_ms - serial_ms) / serial_ms, data_first_ms,
        100.0 * (data_first_ms - serial_ms) / serial_ms);
    serial_total += serial_ms, weight_first_total += weight_first_ms, data_first_total += data_first_ms;
    weight_total += weight_ms;
  }
  std::printf("block: serial %.3f ms, weight first %.3f (%+.1f%%), data first %.3f (%+.1f%%)\n", serial_total,
              weight_first_total, 100.0 * (weight_first_total - serial_total) / serial_total,
              data_first_total, 100.0 * (data_first_total - serial_total) / serial_total);

  // next-layer: mlp.c_fc's weight GEMM beside a layer norm backward's memory traffic over [tokens, C].
  {
    const Gemm weight(lt, CUBLAS_OP_N, CUBLAS_OP_T, c, 4 * c, tokens, false, nullptr);
    const int64_t vectors = tokens * c / 8;
    auto run_weight = [&](cudaStream_t s) { weight.run(x, dy, dw, workspace_side, s); };
    auto run_pass = [&](cudaStream_t s) {
      memory_pass<<<1024, 256, 0, s>>>(reinterpret_cast<const uint4*>(x), reinterpret_cast<const uint4*>(dy),
                                       reinterpret_cast<uint4*>(dx), vectors);
      check(cudaGetLastError(), "memory pass");
    };
    const double pass_ms = time([&] { run_pass(first); }), weight_ms = time([&] { run_weight(first); });
    const double serial_ms = time([&] {
      run_weight(first);
      run_pass(first);
    });
    const double beside_ms = time([&] { side_by_side(run_weight, run_pass, true); });
    const double gb = 4.0 * double(tokens * c) * 2 / 1e9;
    std::printf(
        "mlp.c_fc weight GEMM beside a layer norm backward's traffic (%.2f GB): pass %.3f ms (%.0f GB/s), "
        "weight %.3f, serial %.3f, side by side %.3f (%+.1f%%)\n",
        gb, pass_ms, gb / (pass_ms * 1e-3), weight_ms, serial_ms, beside_ms,
        100.0 * (beside_ms - serial_ms) / serial_ms);
  }

  cublasLtDestroy(lt);
  for (void* p :
       {static_cast<void*>(dy), static_cast<void*>(x), static_cast<void*>(w), static_cast<void*>(dx),
        static_cast<void*>(dw), static_cast<void*>(aux), workspace_first, workspace_side})
    cudaFree(p);
  return 0;
}
