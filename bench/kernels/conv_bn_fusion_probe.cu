// What fusing batch norm into ResNet-50's convolutions would buy on this GPU, measured before building it.
//
// dlbench runs every convolution on cuDNN's legacy API (the fastest of cudnnFind's algorithms) followed by
// cuDNN's fused batch norm + ReLU, a separate pass that reads the convolution's output twice (statistics,
// then normalisation) and writes it once. Batch norm is a third of the per-layer time in FP16 and TF32
// (bench/results/where-the-time-goes). cuDNN's graph API has runtime-fusion engines that
// can fold that work into the convolutions: the statistics (sum and sum of squares per channel) in the
// convolution's epilogue, and the normalisation + ReLU of the input in its prologue:
//
//   x --(* scale, + bias, relu)--> conv(w) --> y --> genstats --> sum(y), sum(y^2)
//
// For each convolution shape of ResNet-50 at one batch size, this program times:
//   legacy      cudnnConvolutionForward with cudnnFind's fastest algorithm (what dlbench runs now)
//   graph       the same convolution as a one-operation graph, the fastest engine the heuristics offer
//   conv+st     the convolution with genstats on y (no prologue), the fastest engine: a batch norm after
//               it would skip its statistics pass
//   fused       the pattern above as one graph (its fastest engine), or "unsupported"
//   bn          cuDNN's batch norm + ReLU training forward on y (NHWC: one persistent kernel; fp32 in NCHW:
//               batch norm, then ReLU), what fusion removes
// and prints, per shape and weighted by how often ResNet-50 has it, legacy + bn against fused: the
// forward time fusion would save. The backward has patterns of its own (dgrad with the ReLU and batch-norm
// gradients): backward_fusion times the dgrad with the ReLU mask and the batch norm's two sums in its
// epilogue. Last, the stem convolution with its 3 input channels
// padded to 4 and 8 (forward and filter gradient), for the NHWC precisions.
//
//   conv_bn_fusion_probe [--dtype fp16|bf16|tf32|fp32] [--batch N] [--reps R] [--max-engines E]
//                        [--backward 0|1]
//
// tf32 and fp32 both keep FP32 tensors; tf32 lets the convolutions use TF32 tensor cores (the legacy API's
// CUDNN_DEFAULT_MATH, any graph engine), fp32 does not (CUDNN_FMA_MATH; graph engines with the tensor-core
// numerical note are skipped), as dlbench's precisions of those names. Engines whose plan does not build
// are skipped; the counts tried and built are printed.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "conv_bn_fusion_probe: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
// Throws: a graph cuDNN refuses is an answer (that fusion is unsupported), not the end of the run.
void check_cudnn(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": " + cudnnGetErrorString(s));
}

// ---- a backend descriptor, destroyed with its owner ----
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) {
    check_cudnn(cudnnBackendCreateDescriptor(type, &d_), "create");
  }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  Desc(Desc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  cudnnBackendDescriptor_t get() const { return d_; }

  template <typename T>
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T* values,
            int64_t count) {
    check_cudnn(cudnnBackendSetAttribute(d_, name, type, count, values), "set attribute");
    return *this;
  }
  template <typename T>
  Desc& set1(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, T value) {
    return set(name, type, &value, 1);
  }
  Desc& set_desc(cudnnBackendAttributeName_t name, const Desc& other) {
    cudnnBackendDescriptor_t d = other.get();
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &d, 1);
  }
  // Finalize, reporting failure instead of exiting (an engine that cannot run this graph).
  cudnnStatus_t try_finalize() { return cudnnBackendFinalize(d_); }
  Desc& finalize(const char* what) {
    check_cudnn(cudnnBackendFinalize(d_), what);
    return *this;
  }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// The layout of every activation and filter: NHWC / KRSC (channels innermost), or NCHW / KCRS for fp32,
// whose FMA kernels dlbench runs in NCHW (cuDNN's NHWC FP32 kernels are slow for some shapes).
bool g_nchw = false;

// A tensor [n, c, h, w] in g_nchw's layout, or a virtual one (an intermediate of a graph).
Desc tensor(int64_t uid, cudnnDataType_t dtype, int64_t n, int64_t c, int64_t h, int64_t w,
            bool is_virtual = false) {
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t dims[4] = {n, c, h, w};
  int64_t strides[4] = {h * w * c, 1, w * c, c};
  if (g_nchw) {
    strides[1] = h * w;
    strides[2] = w;
    strides[3] = 1;
  }
  const int64_t alignment = 16;
  const bool virt = is_virtual;
  t.set1(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, dtype)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims, 4)
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides, 4)
      .set1(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid)
      .set1(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, alignment)
      .set1(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, virt)
      .finalize("tensor");
  return t;
}

Desc pointwise(cudnnPointwiseMode_t mode) {
  Desc p(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  p.set1(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, mode)
      .set1(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT)
      .finalize("pointwise");
  return p;
}

// y = op(x[, b]) as a graph node.
Desc pointwise_op(const Desc& mode, const Desc& x, const Desc* b, const Desc& y) {
  Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, mode)
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
  if (b) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y).finalize("pointwise op");
  return op;
}

struct Shape {
  const char* name;
  int count;  // how many ResNet-50 (v1.5) has
  int64_t c, h, w, k, r, stride, pad;
  int64_t out_h() const { return (h + 2 * pad - r) / stride + 1; }
  int64_t out_w() const { return (w + 2 * pad - r) / stride + 1; }
};

// Every convolution of ResNet-50 but the 7x7 stem (its input is the image: no batch norm before it).
const Shape kShapes[] = {
    {"l1 1x1 64->64", 1, 64, 56, 56, 64, 1, 1, 0},
    {"l1 3x3 64", 3, 64, 56, 56, 64, 3, 1, 1},
    {"l1 1x1 64->256", 4, 64, 56, 56, 256, 1, 1, 0},
    {"l1 1x1 256->64", 2, 256, 56, 56, 64, 1, 1, 0},
    {"l2 1x1 256->128", 1, 256, 56, 56, 128, 1, 1, 0},
    {"l2 3x3 128 s2", 1, 128, 56, 56, 128, 3, 2, 1},
    {"l2 1x1 256->512 s2", 1, 256, 56, 56, 512, 1, 2, 0},
    {"l2 1x1 128->512", 4, 128, 28, 28, 512, 1, 1, 0},
    {"l2 1x1 512->128", 3, 512, 28, 28, 128, 1, 1, 0},
    {"l2 3x3 128", 3, 128, 28, 28, 128, 3, 1, 1},
    {"l3 1x1 512->256", 1, 512, 28, 28, 256, 1, 1, 0},
    {"l3 3x3 256 s2", 1, 256, 28, 28, 256, 3, 2, 1},
    {"l3 1x1 512->1024 s2", 1, 512, 28, 28, 1024, 1, 2, 0},
    {"l3 1x1 256->1024", 6, 256, 14, 14, 1024, 1, 1, 0},
    {"l3 1x1 1024->256", 5, 1024, 14, 14, 256, 1, 1, 0},
    {"l3 3x3 256", 5, 256, 14, 14, 256, 3, 1, 1},
    {"l4 1x1 1024->512", 1, 1024, 14, 14, 512, 1, 1, 0},
    {"l4 3x3 512 s2", 1, 512, 14, 14, 512, 3, 2, 1},
    {"l4 1x1 1024->2048 s2", 1, 1024, 14, 14, 2048, 1, 2, 0},
    {"l4 1x1 512->2048", 3, 512, 7, 7, 2048, 1, 1, 0},
    {"l4 1x1 2048->512", 2, 2048, 7, 7, 512, 1, 1, 0},
    {"l4 3x3 512", 2, 512, 7, 7, 512, 3, 1, 1},
};

struct Options {
  std::string dtype = "fp16";
  int64_t batch = 256;
  int reps = 20;
  int max_engines = 8;
  bool backward = true;  // --backward 0 skips backward_fusion
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "conv_bn_fusion_probe: %s needs a value\n", flag.c_str());
      std::exit(2);
    }
    const std::string value = argv[++i];
    if (flag == "--dtype") {
      o.dtype = value;
      if (o.dtype != "fp16" && o.dtype != "bf16" && o.dtype != "tf32" && o.dtype != "fp32") {
        std::fprintf(stderr, "conv_bn_fusion_probe: --dtype %s: choose fp16, bf16, tf32 or fp32\n",
                     value.c_str());
        std::exit(2);
      }
      continue;
    }
    char* end = nullptr;
    const long v = std::strtol(value.c_str(), &end, 10);
    if (end == value.c_str() || *end != '\0' || v < (flag == "--backward" ? 0 : 1)) {
      std::fprintf(stderr,
                   "conv_bn_fusion_probe: %s wants a positive integer (--backward: 0 or 1), got '%s'\n",
                   flag.c_str(), value.c_str());
      std::exit(2);
    }
    if (flag == "--backward") {
      o.backward = v != 0;
      continue;
    }
    if (flag == "--batch")
      o.batch = v;
    else if (flag == "--reps")
      o.reps = static_cast<int>(v);
    else if (flag == "--max-engines")
      o.max_engines = static_cast<int>(v);
    else {
      std::fprintf(stderr, "conv_bn_fusion_probe: unknown flag %s\n", flag.c_str());
      std::exit(2);
    }
  }
  return o;
}

__global__ void fill_kernel(uint16_t* p, size_t n16, uint32_t seed) {
  // Small values of either 16-bit format (exponent bits well inside range), or the halves of FP32 words.
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n16;
       i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t h = (uint32_t(i) * 2654435761u) ^ seed;
    p[i] = uint16_t(0x3000 | (h & 0x0fff));
  }
}

void fill(void* p, size_t bytes, uint32_t seed) {
  fill_kernel<<<1024, 256>>>(static_cast<uint16_t*>(p), bytes / 2, seed);
  check_cuda(cudaGetLastError(), "fill");
}

// Holds the stream for `ns` nanoseconds (one thread polling the GPU's global timer).
__global__ void hold_kernel(unsigned long long ns) {
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

// Mean milliseconds per call of `body` over `reps` calls back to back, best of three trials. The calls
// are queued behind a hold of 0.5 ms per call, so that they run back to back on the GPU whatever the
// host's time per call: without it (the first runs, bench/results/convolution-algorithms)
// a 0.04 ms 1x1 convolution timed 0.12-0.19 ms through the legacy API, its host work.
template <typename Body>
double time_ms(int reps, Body&& body) {
  cudaEvent_t start, stop;
  check_cuda(cudaEventCreate(&start), "event");
  check_cuda(cudaEventCreate(&stop), "event");
  body();  // warm-up (and a runtime-compiled kernel's first load)
  check_cuda(cudaDeviceSynchronize(), "warm-up");
  double best = 1e30;
  for (int trial = 0; trial < 3; ++trial) {
    hold_kernel<<<1, 1>>>(500000ull * static_cast<unsigned long long>(reps));
    check_cuda(cudaEventRecord(start), "record");
    for (int i = 0; i < reps; ++i) body();
    check_cuda(cudaEventRecord(stop), "record");
    check_cuda(cudaEventSynchronize(stop), "synchronize");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    best = std::min(best, double(ms) / reps);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}

struct Timed {
  double ms = -1;  // < 0: nothing ran
  int tried = 0, built = 0;
  bool runtime_compiled = false;  // the winner compiles its kernel at plan time
};

// What an engine configuration's engine says of itself: whether it compiles its kernel at plan time, and
// whether it runs on tensor cores (TF32 for FP32 tensors).
struct EngineNotes {
  bool runtime_compiled = false, tensor_core = false;
};
EngineNotes engine_notes(cudnnBackendDescriptor_t cfg) {
  EngineNotes notes;
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t got = 0;
  if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got,
                               &e) != CUDNN_STATUS_SUCCESS)
    return notes;
  cudnnBackendBehaviorNote_t behaviour[16];
  int64_t count = 0;
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, 16, &count,
                               behaviour) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < count; ++i)
      if (behaviour[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) notes.runtime_compiled = true;
  }
  cudnnBackendNumericalNote_t numerical[16];
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 16, &count,
                               numerical) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < count; ++i)
      if (numerical[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE) notes.tensor_core = true;
  }
  return notes;
}

// The fastest engine the heuristics (mode A, then the fallback list) offer for `graph`, timed with `pack`.
Timed fastest_engine(cudnnHandle_t handle, const Desc& graph, const std::vector<int64_t>& uids,
                     const std::vector<void*>& pointers, void* workspace, size_t workspace_bytes,
                     const Options& o) {
  Timed result;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
        .set1(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, mode);
    if (heur.try_finalize() != CUDNN_STATUS_SUCCESS) continue;
    int64_t count = 0;
    if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                 &count, nullptr) != CUDNN_STATUS_SUCCESS ||
        count == 0)
      continue;
    std::vector<Desc> configs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      raw.push_back(configs.back().get());
    }
    int64_t returned = 0;
    check_cudnn(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned, raw.data()),
                "heuristic results");
    for (int64_t i = 0; i < returned && result.tried < o.max_engines; ++i) {
      cudnnBackendDescriptor_t cfg = raw[size_t(i)];
      const EngineNotes notes = engine_notes(cfg);
      if (o.dtype == "fp32" && notes.tensor_core) continue;  // TF32: not FP32's arithmetic
      ++result.tried;
      Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.set1(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, handle);
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, &cfg, 1);
      if (plan.try_finalize() != CUDNN_STATUS_SUCCESS) continue;
      int64_t needed = 0;
      cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                               nullptr, &needed);
      if (size_t(needed) > workspace_bytes) continue;
      Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
      pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(), int64_t(uids.size()))
          .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, pointers.data(),
               int64_t(pointers.size()))
          .set1(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, workspace)
          .finalize("variant pack");
      if (cudnnBackendExecute(handle, plan.get(), pack.get()) != CUDNN_STATUS_SUCCESS) continue;
      check_cuda(cudaDeviceSynchronize(), "engine run");
      ++result.built;
      const double ms = time_ms(o.reps, [&] { cudnnBackendExecute(handle, plan.get(), pack.get()); });
      if (result.ms < 0 || ms < result.ms) {
        result.ms = ms;
        result.runtime_compiled = notes.runtime_compiled;
      }
    }
    if (result.ms >= 0) break;  // mode A found one; the fallback list is for graphs it cannot place
  }
  return result;
}

Desc operation_graph(cudnnHandle_t handle, const std::vector<const Desc*>& ops) {
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const Desc* op : ops) raw.push_back(op->get());
  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, raw.data(), int64_t(raw.size()))
      .set1(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, handle)
      .finalize("operation graph");
  return graph;
}

}  // namespace

// The 7x7 stem convolution reads the 3-channel image. NHWC tensor-core kernels want channel counts that
// fill their vector loads; some pipelines pad the image to 4 channels (a zero channel, with zero weights:
// the same result). The legacy forward and filter-gradient times with 3, 4 and 8 input channels say
// whether that would pay here.
void stem_channel_padding(cudnnHandle_t handle, const Options& o, cudnnDataType_t io, void* x, void* y,
                          void* w, void* workspace, size_t workspace_bytes) {
  std::printf("\nstem 7x7 stride 2, 64 filters, 224x224 input, legacy API (ms per call):\n");
  std::printf("%-10s %9s %9s  %s\n", "channels", "forward", "dW", "algorithms");
  void* dw = nullptr;
  check_cuda(cudaMalloc(&dw, size_t(64) * 8 * 7 * 7 * 4), "malloc");
  const cudnnMathType_t math = o.dtype == "tf32" ? CUDNN_DEFAULT_MATH : CUDNN_TENSOR_OP_MATH;
  for (int channels : {3, 4, 8}) {
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    check_cudnn(cudnnCreateTensorDescriptor(&xd), "tensor");
    check_cudnn(cudnnCreateTensorDescriptor(&yd), "tensor");
    check_cudnn(cudnnCreateFilterDescriptor(&wd), "filter");
    check_cudnn(cudnnCreateConvolutionDescriptor(&cd), "conv");
    const int n = int(o.batch);
    check_cudnn(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, io, n, channels, 224, 224), "x");
    check_cudnn(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NHWC, io, n, 64, 112, 112), "y");
    check_cudnn(cudnnSetFilter4dDescriptor(wd, io, CUDNN_TENSOR_NHWC, 64, channels, 7, 7), "w");
    check_cudnn(
        cudnnSetConvolution2dDescriptor(cd, 3, 3, 2, 2, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
        "conv");
    check_cudnn(cudnnSetConvolutionMathType(cd, math), "math");
    const float one = 1.f, zero = 0.f;
    cudnnConvolutionFwdAlgoPerf_t fwd[16];
    cudnnConvolutionBwdFilterAlgoPerf_t bwd[16];
    int found = 0;
    double fwd_ms = -1, bwd_ms = -1;
    int fwd_algo = -1, bwd_algo = -1;
    check_cudnn(cudnnFindConvolutionForwardAlgorithmEx(handle, xd, x, wd, w, cd, yd, y, 16, &found, fwd,
                                                       workspace, workspace_bytes),
                "find forward");
    for (int i = 0; i < found && fwd_algo < 0; ++i)
      if (fwd[i].status == CUDNN_STATUS_SUCCESS) fwd_algo = fwd[i].algo;
    if (fwd_algo >= 0) {
      fwd_ms = time_ms(o.reps, [&] {
        cudnnConvolutionForward(handle, &one, xd, x, wd, w, cd, cudnnConvolutionFwdAlgo_t(fwd_algo),
                                workspace, workspace_bytes, &zero, yd, y);
      });
    }
    check_cudnn(cudnnFindConvolutionBackwardFilterAlgorithmEx(handle, xd, x, yd, y, cd, wd, dw, 16, &found,
                                                              bwd, workspace, workspace_bytes),
                "find filter gradient");
    for (int i = 0; i < found && bwd_algo < 0; ++i)
      if (bwd[i].status == CUDNN_STATUS_SUCCESS) bwd_algo = bwd[i].algo;
    if (bwd_algo >= 0) {
      bwd_ms = time_ms(o.reps, [&] {
        cudnnConvolutionBackwardFilter(handle, &one, xd, x, yd, y, cd,
                                       cudnnConvolutionBwdFilterAlgo_t(bwd_algo), workspace, workspace_bytes,
                                       &zero, wd, dw);
      });
    }
    std::printf("%-10d %9.3f %9.3f  forward %d, filter gradient %d\n", channels, fwd_ms, bwd_ms, fwd_algo,
                bwd_algo);
    cudnnDestroyTensorDescriptor(xd);
    cudnnDestroyTensorDescriptor(yd);
    cudnnDestroyFilterDescriptor(wd);
    cudnnDestroyConvolutionDescriptor(cd);
  }
  cudaFree(dw);
}

// The convolution of `s` (FP32 compute, cross-correlation) as a graph descriptor.
Desc convolution(const Shape& s) {
  Desc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const int64_t spatial = 2, dil[2] = {1, 1}, str[2] = {s.stride, s.stride}, pad[2] = {s.pad, s.pad};
  conv.set1(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT)
      .set1(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, CUDNN_CROSS_CORRELATION)
      .set1(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, spatial)
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dil, 2)
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, str, 2)
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, pad, 2)
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, pad, 2)
      .finalize("convolution");
  return conv;
}

// The filter of `s` [K, C, R, S]: KRSC (the input channels innermost, as NHWC activations want), or KCRS
// for NCHW (g_nchw).
Desc filter_tensor(int64_t uid, cudnnDataType_t io, const Shape& s) {
  const int64_t dims[4] = {s.k, s.c, s.r, s.r};
  const int64_t krsc[4] = {s.c * s.r * s.r, 1, s.r * s.c, s.c},
                kcrs[4] = {s.c * s.r * s.r, s.r * s.r, s.r, 1};
  Desc tw(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  tw.set1(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, io)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims, 4)
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, g_nchw ? kcrs : krsc, 4)
      .set1(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid)
      .set1(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, int64_t(16))
      .finalize("filter tensor");
  return tw;
}

// ---- the backward: the batch norm's reductions in the epilogue of the backward data that feeds it ----
// A batch norm + ReLU whose output y feeds a convolution gets its output gradient from that convolution's
// backward data (dgrad). Its backward then passes over x and dy twice: the sums g and g * (x - mean), g the
// ReLU-masked dy, then dx. This times, per shape, the dgrad alone (its fastest graph engine) and the dgrad
// with the mask and both sums in its epilogue (g written, for the batch norm's second pass), and prints
// what the first pass costs at the memory's peak bandwidth (x and dy read once), which the fusion would
// save. Forward shapes as above: the dgrad's output is the convolution's input [n, c, h, w].
void backward_fusion(cudnnHandle_t handle, const Options& o, cudnnDataType_t io, size_t element, void* x,
                     void* y, void* y2, void* w, void* workspace, size_t workspace_bytes, float* params,
                     float* sums, double peak_bytes_per_ms) {
  enum : int64_t { kDx = 1, kW, kDy, kY, kX, kMean, kG, kSumG, kSumGx, kDxVirtual, kXc, kGx };
  std::printf("\nbackward: dgrad, then dgrad + ReLU mask + batch-norm sums in its epilogue (ms per call)\n");
  std::printf("%-22s %5s %9s %9s %9s  %s\n", "shape", "count", "dgrad", "fused", "pass", "fused engine");
  double total_dgrad = 0, total_fused = 0, total_pass = 0;
  bool all = true;
  for (const Shape& s : kShapes) {
    const int64_t n = o.batch, p = s.out_h(), q = s.out_w();
    Desc conv = convolution(s);
    Desc tw = filter_tensor(kW, io, s);
    auto dgrad_op = [&](const Desc& dx, const Desc& dy) {
      Desc op(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
      const float alpha = 1.f, beta = 0.f;
      op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, dx)
          .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, tw)
          .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, dy)
          .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, conv)
          .set1(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, alpha)
          .set1(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, beta)
          .finalize("dgrad op");
      return op;
    };
    Desc tdy = tensor(kDy, io, n, s.k, p, q);
    Timed dgrad;
    try {
      Desc tdx = tensor(kDx, io, n, s.c, s.h, s.w);
      Desc op = dgrad_op(tdx, tdy);
      Desc g = operation_graph(handle, {&op});
      dgrad = fastest_engine(handle, g, {kDx, kW, kDy}, {x, w, y}, workspace, workspace_bytes, o);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: dgrad: %s\n", s.name, e.what());
    }
    Timed fused;
    std::string fused_error;
    try {
      Desc dx_virtual = tensor(kDxVirtual, CUDNN_DATA_FLOAT, n, s.c, s.h, s.w, true);
      Desc ty = tensor(kY, io, n, s.c, s.h, s.w), tx = tensor(kX, io, n, s.c, s.h, s.w);
      Desc tg = tensor(kG, io, n, s.c, s.h, s.w);
      Desc tmean = tensor(kMean, CUDNN_DATA_FLOAT, 1, s.c, 1, 1);
      Desc txc = tensor(kXc, CUDNN_DATA_FLOAT, n, s.c, s.h, s.w, true);
      Desc tgx = tensor(kGx, CUDNN_DATA_FLOAT, n, s.c, s.h, s.w, true);
      Desc tsum_g = tensor(kSumG, CUDNN_DATA_FLOAT, 1, s.c, 1, 1),
           tsum_gx = tensor(kSumGx, CUDNN_DATA_FLOAT, 1, s.c, 1, 1);
      Desc op_dgrad = dgrad_op(dx_virtual, tdy);
      // g = dy where y > 0: the ReLU's backward, given its output.
      Desc relu_bwd = pointwise(CUDNN_POINTWISE_RELU_BWD);
      Desc op_mask(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
      op_mask.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, relu_bwd)
          .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, dx_virtual)
          .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, ty)
          .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, tg)
          .finalize("relu backward op");
      Desc sub = pointwise(CUDNN_POINTWISE_SUB), mul = pointwise(CUDNN_POINTWISE_MUL);
      Desc op_center = pointwise_op(sub, tx, &tmean, txc);
      Desc op_product = pointwise_op(mul, tg, &txc, tgx);
      auto reduction_op = [&](const Desc& in, const Desc& out) {
        Desc r(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
        r.set1(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, CUDNN_REDUCE_TENSOR_ADD)
            .set1(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT)
            .finalize("reduction");
        Desc op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
        op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, in)
            .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, out)
            .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r)
            .finalize("reduction op");
        return op;
      };
      Desc op_sum_g = reduction_op(tg, tsum_g), op_sum_gx = reduction_op(tgx, tsum_gx);
      Desc g = operation_graph(handle, {&op_dgrad, &op_mask, &op_center, &op_product, &op_sum_g, &op_sum_gx});
      fused = fastest_engine(handle, g, {kW, kDy, kY, kX, kMean, kG, kSumG, kSumGx},
                             {w, y, x, x, params, y2, sums, sums + 2048}, workspace, workspace_bytes, o);
    } catch (const std::exception& e) {
      fused_error = e.what();
    }
    // The batch norm's first backward pass: x and dy (the dgrad's output) read once each.
    const double pass = 2.0 * double(n * s.c * s.h * s.w) * double(element) / peak_bytes_per_ms;
    total_pass += s.count * pass;
    if (dgrad.ms >= 0) total_dgrad += s.count * dgrad.ms;
    if (fused.ms >= 0) {
      total_fused += s.count * fused.ms;
    } else {
      all = false;
    }
    auto cell = [](double ms) { return ms >= 0 ? std::to_string(ms).substr(0, 6) : std::string("n/a"); };
    std::printf("%-22s %5d %9s %9s %9.4f  %s\n", s.name, s.count, cell(dgrad.ms).c_str(),
                fused.ms >= 0 ? cell(fused.ms).c_str() : "unsupp.", pass,
                fused.ms >= 0 ? (std::to_string(fused.built) + " of " + std::to_string(fused.tried) +
                                 " built" + (fused.runtime_compiled ? ", runtime-compiled" : ""))
                                    .c_str()
                              : (std::to_string(fused.tried) + " tried; " + fused_error).c_str());
  }
  std::printf("  dgrad %.3f ms; the batch norms' first backward pass at peak bandwidth %.3f ms\n",
              total_dgrad, total_pass);
  if (all) {
    std::printf("  dgrad with the mask and the sums %.3f ms: %.3f saved\n", total_fused,
                total_dgrad + total_pass - total_fused);
  } else {
    std::printf("  dgrad with the mask and the sums: not every shape had an engine (see the table)\n");
  }
}

int run(const Options& o);
int run(const Options& o);

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "conv_bn_fusion_probe: %s\n", e.what());
    return 1;
  }
}

int run(const Options& o) {
  const cudnnDataType_t io = o.dtype == "fp16"   ? CUDNN_DATA_HALF
                             : o.dtype == "bf16" ? CUDNN_DATA_BFLOAT16
                                                 : CUDNN_DATA_FLOAT;
  const bool wide = o.dtype == "tf32" || o.dtype == "fp32";  // FP32 tensors
  g_nchw = o.dtype == "fp32";
  const size_t element = wide ? 4 : 2;
  cudnnHandle_t handle;
  check_cudnn(cudnnCreate(&handle), "cudnnCreate");
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, 0), "device properties");
  std::printf(
      "conv_bn_fusion_probe on %s, cuDNN %zu: %s, batch %lld, forward only, ms per call (best of 3 x %d)\n",
      prop.name, cudnnGetVersion(), o.dtype.c_str(), static_cast<long long>(o.batch), o.reps);

  // Buffers for the largest shape, reused by all.
  size_t max_x = 0, max_y = 0, max_w = 0;
  for (const Shape& s : kShapes) {
    max_x = std::max(max_x, size_t(o.batch * s.c * s.h * s.w) * element);
    max_y = std::max(max_y, size_t(o.batch * s.k * s.out_h() * s.out_w()) * element);
    max_w = std::max(max_w, size_t(s.k * s.c * s.r * s.r) * element);
  }
  const size_t workspace_bytes = size_t(1) << 30;
  void *x, *y, *y2, *w, *workspace, *channel_params, *sums;
  check_cuda(cudaMalloc(&x, max_x), "malloc");
  check_cuda(cudaMalloc(&y, max_y), "malloc");
  check_cuda(cudaMalloc(&y2, max_y), "malloc");
  check_cuda(cudaMalloc(&w, max_w), "malloc");
  check_cuda(cudaMalloc(&workspace, workspace_bytes), "malloc");
  check_cuda(cudaMalloc(&channel_params, 8 * 2048 * sizeof(float)), "malloc");  // scale, bias, means, ...
  check_cuda(cudaMalloc(&sums, 2 * 2048 * sizeof(float)), "malloc");
  fill(x, max_x, 1);
  fill(w, max_w, 2);
  fill(channel_params, 8 * 2048 * sizeof(float), 3);
  float* params = static_cast<float*>(channel_params);

  std::printf("%-22s %5s %9s %9s %9s %9s %9s %9s  %s\n", "shape", "count", "legacy", "graph", "conv+st",
              "fused", "bn+relu", "saved", "fused engine");
  double total_now = 0, total_fused = 0, total_legacy = 0, total_graph = 0, total_conv_stats = 0;
  bool all_fused = true, all_conv_stats = true;
  for (const Shape& s : kShapes) {
    const int64_t n = o.batch, p = s.out_h(), q = s.out_w();
    // ---- legacy: cudnnFind's fastest forward algorithm ----
    cudnnTensorDescriptor_t xd, yd, bnd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    check_cudnn(cudnnCreateTensorDescriptor(&xd), "tensor");
    check_cudnn(cudnnCreateTensorDescriptor(&yd), "tensor");
    check_cudnn(cudnnCreateTensorDescriptor(&bnd), "tensor");
    check_cudnn(cudnnCreateFilterDescriptor(&wd), "filter");
    check_cudnn(cudnnCreateConvolutionDescriptor(&cd), "conv");
    const cudnnTensorFormat_t format = g_nchw ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC;
    check_cudnn(cudnnSetTensor4dDescriptor(xd, format, io, int(n), int(s.c), int(s.h), int(s.w)), "x");
    check_cudnn(cudnnSetTensor4dDescriptor(yd, format, io, int(n), int(s.k), int(p), int(q)), "y");
    check_cudnn(cudnnSetFilter4dDescriptor(wd, io, format, int(s.k), int(s.c), int(s.r), int(s.r)), "w");
    check_cudnn(cudnnSetConvolution2dDescriptor(cd, int(s.pad), int(s.pad), int(s.stride), int(s.stride), 1,
                                                1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                "conv");
    check_cudnn(cudnnSetConvolutionMathType(cd, o.dtype == "fp32"   ? CUDNN_FMA_MATH
                                                : o.dtype == "tf32" ? CUDNN_DEFAULT_MATH
                                                                    : CUDNN_TENSOR_OP_MATH),
                "math");
    cudnnConvolutionFwdAlgoPerf_t perf[16];
    int found = 0;
    check_cudnn(cudnnFindConvolutionForwardAlgorithmEx(handle, xd, x, wd, w, cd, yd, y, 16, &found, perf,
                                                       workspace, workspace_bytes),
                "find");
    int ok = -1;
    for (int i = 0; i < found && ok < 0; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS) ok = i;
    if (ok < 0) throw std::runtime_error(std::string(s.name) + ": no legacy algorithm runs this convolution");
    const cudnnConvolutionFwdAlgo_t algo = perf[ok].algo;
    const float one = 1.f, zero = 0.f;
    check_cudnn(cudnnConvolutionForward(handle, &one, xd, x, wd, w, cd, algo, workspace, workspace_bytes,
                                        &zero, yd, y),
                "legacy convolution");
    const double legacy_ms = time_ms(o.reps, [&] {
      cudnnConvolutionForward(handle, &one, xd, x, wd, w, cd, algo, workspace, workspace_bytes, &zero, yd, y);
    });

    // ---- bn: cuDNN's batch norm + ReLU training forward on y, as dlbench runs it after each convolution:
    // one fused persistent kernel in NHWC, batch norm then ReLU in NCHW ----
    const cudnnBatchNormMode_t bn_mode =
        g_nchw ? CUDNN_BATCHNORM_SPATIAL : CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
    check_cudnn(cudnnDeriveBNTensorDescriptor(bnd, yd, bn_mode), "bn descriptor");
    cudnnActivationDescriptor_t relu;
    check_cudnn(cudnnCreateActivationDescriptor(&relu), "activation");
    check_cudnn(cudnnSetActivationDescriptor(relu, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0), "relu");
    size_t bn_workspace = 0, bn_reserve = 0;
    if (!g_nchw) {
      check_cudnn(
          cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
              handle, bn_mode, CUDNN_BATCHNORM_OPS_BN_ACTIVATION, yd, nullptr, yd, bnd, relu, &bn_workspace),
          "bn workspace");
      check_cudnn(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
                      handle, bn_mode, CUDNN_BATCHNORM_OPS_BN_ACTIVATION, relu, yd, &bn_reserve),
                  "bn reserve");
    }
    void* reserve = nullptr;
    if (bn_reserve) check_cuda(cudaMalloc(&reserve, bn_reserve), "malloc");
    float* save_mean = static_cast<float*>(sums);
    const double bn_ms = time_ms(o.reps, [&] {
      if (g_nchw) {
        cudnnBatchNormalizationForwardTraining(handle, bn_mode, &one, &zero, yd, y, yd, y2, bnd, params,
                                               params + 2048, 0.1, params + 4096, params + 6144, 1e-5,
                                               save_mean, save_mean + 2048);
        cudnnActivationForward(handle, relu, &one, yd, y2, &zero, yd, y2);
      } else {
        cudnnBatchNormalizationForwardTrainingEx(
            handle, bn_mode, CUDNN_BATCHNORM_OPS_BN_ACTIVATION, &one, &zero, yd, y, nullptr, nullptr, yd, y2,
            bnd, params, params + 2048, 0.1, params + 4096, params + 6144, 1e-5, save_mean, save_mean + 2048,
            relu, workspace, std::min(bn_workspace, workspace_bytes), reserve, bn_reserve);
      }
    });
    if (reserve) cudaFree(reserve);

    // ---- graph: the convolution alone through the graph API ----
    enum : int64_t { kX = 1, kW, kY, kScale, kBias, kSum, kSqSum, kScaled, kBiased, kRelu };
    Desc conv = convolution(s);
    auto conv_op = [&](const Desc& in, const Desc& filter, const Desc& out) {
      Desc op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
      const float alpha = 1.f, beta = 0.f;
      op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, in)
          .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, filter)
          .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, out)
          .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv)
          .set1(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, alpha)
          .set1(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, beta)
          .finalize("convolution op");
      return op;
    };
    Desc tx = tensor(kX, io, n, s.c, s.h, s.w), ty = tensor(kY, io, n, s.k, p, q);
    Desc tw = filter_tensor(kW, io, s);
    Timed graph_conv;
    try {
      Desc op = conv_op(tx, tw, ty);
      Desc g = operation_graph(handle, {&op});
      graph_conv = fastest_engine(handle, g, {kX, kW, kY}, {x, w, y}, workspace, workspace_bytes, o);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: the convolution alone as a graph: %s\n", s.name, e.what());
    }

    // ---- fused: scale, bias, ReLU on x, the convolution, statistics of y ----
    // Which dtypes an engine wants for the prologue's output (the convolution's input) and for the
    // per-channel scale and bias is not stated per engine: each combination is tried, the first that
    // builds is timed.
    Timed fused;
    std::string fused_how, fused_error;
    for (cudnnDataType_t conv_in : {io, CUDNN_DATA_FLOAT}) {
      for (cudnnDataType_t param : {CUDNN_DATA_FLOAT, io}) {
        if (fused.ms >= 0 || (wide && (conv_in != io || param != io))) continue;
        try {
          Desc tscale = tensor(kScale, param, 1, s.c, 1, 1), tbias = tensor(kBias, param, 1, s.c, 1, 1);
          Desc tsum = tensor(kSum, CUDNN_DATA_FLOAT, 1, s.k, 1, 1),
               tsq = tensor(kSqSum, CUDNN_DATA_FLOAT, 1, s.k, 1, 1);
          Desc scaled = tensor(kScaled, CUDNN_DATA_FLOAT, n, s.c, s.h, s.w, true);
          Desc biased = tensor(kBiased, CUDNN_DATA_FLOAT, n, s.c, s.h, s.w, true);
          Desc relued = tensor(kRelu, conv_in, n, s.c, s.h, s.w, true);
          Desc mul = pointwise(CUDNN_POINTWISE_MUL), add = pointwise(CUDNN_POINTWISE_ADD),
               act = pointwise(CUDNN_POINTWISE_RELU_FWD);
          Desc op_scale = pointwise_op(mul, tx, &tscale, scaled);
          Desc op_bias = pointwise_op(add, scaled, &tbias, biased);
          Desc op_relu = pointwise_op(act, biased, nullptr, relued);
          Desc op_conv = conv_op(relued, tw, ty);
          Desc op_stats(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
          op_stats
              .set1(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, CUDNN_GENSTATS_SUM_SQSUM)
              .set1(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT)
              .set_desc(CUDNN_ATTR_OPERATION_GENSTATS_XDESC, ty)
              .set_desc(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, tsum)
              .set_desc(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, tsq)
              .finalize("genstats op");
          Desc g = operation_graph(handle, {&op_scale, &op_bias, &op_relu, &op_conv, &op_stats});
          fused = fastest_engine(handle, g, {kX, kW, kY, kScale, kBias, kSum, kSqSum},
                                 {x, w, y, params, params + 2048, sums, static_cast<float*>(sums) + 2048},
                                 workspace, workspace_bytes, o);
          fused_how = std::string("conv input ") + (conv_in == CUDNN_DATA_FLOAT ? "f32" : o.dtype) +
                      ", scale " + (param == CUDNN_DATA_FLOAT ? "f32" : o.dtype);
        } catch (const std::exception& e) {
          fused_error = e.what();
        }
      }
    }

    // ---- conv+stats: the convolution with the statistics of y in its epilogue, no prologue: what a batch
    // norm after it would no longer read y for (its statistics pass, a third of its forward's bytes) ----
    Timed conv_stats;
    std::string conv_stats_error;
    try {
      Desc tsum = tensor(kSum, CUDNN_DATA_FLOAT, 1, s.k, 1, 1),
           tsq = tensor(kSqSum, CUDNN_DATA_FLOAT, 1, s.k, 1, 1);
      Desc op_conv = conv_op(tx, tw, ty);
      Desc op_stats(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
      op_stats.set1(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, CUDNN_GENSTATS_SUM_SQSUM)
          .set1(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT)
          .set_desc(CUDNN_ATTR_OPERATION_GENSTATS_XDESC, ty)
          .set_desc(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, tsum)
          .set_desc(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, tsq)
          .finalize("genstats op");
      Desc g = operation_graph(handle, {&op_conv, &op_stats});
      conv_stats =
          fastest_engine(handle, g, {kX, kW, kY, kSum, kSqSum},
                         {x, w, y, sums, static_cast<float*>(sums) + 2048}, workspace, workspace_bytes, o);
    } catch (const std::exception& e) {
      conv_stats_error = e.what();
    }
    if (conv_stats.ms >= 0) {
      total_conv_stats += s.count * conv_stats.ms;
    } else {
      all_conv_stats = false;
      std::fprintf(stderr, "%s: convolution + statistics: %s\n", s.name, conv_stats_error.c_str());
    }

    const double now = legacy_ms + bn_ms;
    total_now += s.count * now;
    total_legacy += s.count * legacy_ms;
    if (graph_conv.ms >= 0) total_graph += s.count * graph_conv.ms;
    if (fused.ms >= 0) {
      total_fused += s.count * fused.ms;
    } else {
      all_fused = false;
    }
    auto cell = [](double ms) { return ms >= 0 ? std::to_string(ms).substr(0, 6) : std::string("n/a"); };
    std::printf("%-22s %5d %9s %9s %9s %9s %9.3f %9s  %s\n", s.name, s.count, cell(legacy_ms).c_str(),
                cell(graph_conv.ms).c_str(), conv_stats.ms >= 0 ? cell(conv_stats.ms).c_str() : "unsupp.",
                fused.ms >= 0 ? cell(fused.ms).c_str() : "unsupp.", bn_ms,
                fused.ms >= 0 ? cell(now - fused.ms).c_str() : "-",
                fused.ms >= 0
                    ? (std::to_string(fused.built) + " of " + std::to_string(fused.tried) + " built, " +
                       fused_how + (fused.runtime_compiled ? ", runtime-compiled" : ""))
                          .c_str()
                    : (std::to_string(fused.tried) + " tried; " + fused_error).c_str());
    cudnnDestroyActivationDescriptor(relu);
    cudnnDestroyTensorDescriptor(xd);
    cudnnDestroyTensorDescriptor(yd);
    cudnnDestroyTensorDescriptor(bnd);
    cudnnDestroyFilterDescriptor(wd);
    cudnnDestroyConvolutionDescriptor(cd);
  }
  std::printf("\nResNet-50 forward, these %zu shapes weighted by their counts (ms per step):\n",
              sizeof kShapes / sizeof kShapes[0]);
  std::printf("  legacy convolutions %.3f, graph-API convolutions %.3f\n", total_legacy, total_graph);
  if (all_conv_stats) {
    std::printf("  graph-API convolutions with the statistics of their output in the epilogue %.3f\n",
                total_conv_stats);
  } else {
    std::printf("  convolution + statistics: not every shape had an engine (see the table)\n");
  }
  std::printf("  now (legacy convolution + batch norm + ReLU) %.3f\n", total_now);
  if (all_fused) {
    std::printf(
        "  fused (normalise+ReLU of the input, convolution, statistics of the output) %.3f: %.3f saved\n",
        total_fused, total_now - total_fused);
  } else {
    std::printf("  fused: not every shape had an engine (see the table)\n");
  }
  if (!g_nchw) {
    int clock_khz = 0, bus_bits = 0;
    check_cuda(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0), "memory clock");
    check_cuda(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0), "bus width");
    // The buffers are sized for the largest x and y of any shape, which the dgrad's tensors fit.
    if (o.backward)
      backward_fusion(handle, o, io, element, x, y, y2, w, workspace, workspace_bytes, params,
                      static_cast<float*>(sums), 2.0 * clock_khz * (bus_bits / 8.0));
    stem_channel_padding(handle, o, io, x, y, w, workspace, workspace_bytes);
  }
  cudaFree(x);
  cudaFree(y);
  cudaFree(y2);
  cudaFree(w);
  cudaFree(workspace);
  cudaFree(channel_params);
  cudaFree(sums);
  cudnnDestroy(handle);
  return 0;
}
