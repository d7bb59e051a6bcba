// The CUDA backend: construction (stream, cuDNN and cuBLAS handles), memory, the factory, and the ops that
// run on dlbench's own kernels (elementwise, loss, casts, the optimizer update).
//
// No op here synchronises with the host or allocates: they only enqueue work on the backend's stream, so a
// whole training step can be captured in a CUDA graph. The exceptions are host copies (copy_to_device and
// copy_to_host wait for the stream) and the first sgd_update with a new segment table (uploaded once).
#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_stream.h"
#include "backend/cuda/cudnn_graph.h"
#include "backend/cuda/gpu_support.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/lt_matmul.h"

namespace dlbench {
namespace cuda {

// ---- helpers shared by the backend's files ----

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) CUDA_CHECK(cudaMalloc(&ptr_, bytes));
}

DeviceBuffer DeviceBuffer::try_allocate(size_t bytes) {
  DeviceBuffer b;
  if (bytes > 0 && cudaMalloc(&b.ptr_, bytes) == cudaSuccess) {
    b.bytes_ = bytes;
  } else {
    (void)cudaGetLastError();
    b.ptr_ = nullptr;
  }
  return b;
}

void DeviceBuffer::reset() {
  if (ptr_) cudaFree(ptr_);  // never throws: runs in destructors
  ptr_ = nullptr;
  bytes_ = 0;
}

cudnnDataType_t cudnn_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    case DType::f64:
      return CUDNN_DATA_DOUBLE;
    case DType::f16:
      return CUDNN_DATA_HALF;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    case DType::i32:
      break;
  }
  DLB_CHECK(false, "cuda backend: {} is not a float dtype", dtype_name(dtype));
  return CUDNN_DATA_FLOAT;
}

cudaDataType_t cuda_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::f64:
      return CUDA_R_64F;
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::i32:
      return CUDA_R_32I;
  }
  return CUDA_R_32F;
}

cudnnTensorFormat_t cudnn_format(Layout layout) {
  return layout == Layout::nchw ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC;
}

bool is_float_dtype(DType dtype) { return dtype != DType::i32; }

int checked_int(int64_t value, const char* what) {
  DLB_CHECK(value >= 0 && value <= INT32_MAX, "cuda backend: {} = {} does not fit cuDNN's int", what, value);
  return static_cast<int>(value);
}

void set_tensor_4d(cudnnTensorDescriptor_t desc, DType dtype, Layout layout, int64_t n, int64_t c, int64_t h,
                   int64_t w) {
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc, cudnn_format(layout), cudnn_dtype(dtype), checked_int(n, "N"),
                                         checked_int(c, "C"), checked_int(h, "H"), checked_int(w, "W")));
}

void check_device_tensor(const char* op, const char* name, const Tensor& t) {
  DLB_CHECK(t.device().kind == DeviceKind::cuda, "{}: {} is {}, the cuda backend needs device memory", op,
            name, t.describe());
  DLB_CHECK(t.data() != nullptr || t.numel() == 0, "{}: {} ({}) has no data", op, name, t.describe());
}

void check_activation(const char* op, const char* name, const Tensor& t, std::vector<int64_t> dims,
                      DType dtype, Layout layout) {
  check_device_tensor(op, name, t);
  DLB_CHECK(t.dims() == dims && t.dtype() == dtype && t.layout() == layout,
            "{}: {} is {}, expected {}[{}] {}", op, name, t.describe(), dtype_name(dtype),
            fmt::join(dims, ", "), layout_name(layout));
}

void check_same_shape(const char* op, const char* name_a, const Tensor& a, const char* name_b,
                      const Tensor& b) {
  check_device_tensor(op, name_a, a);
  check_device_tensor(op, name_b, b);
  const bool same_order = a.rank() != 4 || a.layout() == b.layout();
  DLB_CHECK(a.dims() == b.dims() && a.dtype() == b.dtype() && same_order, "{}: {} is {} but {} is {}", op,
            name_a, a.describe(), name_b, b.describe());
}

void check_float(const char* op, const char* name, const Tensor& t) {
  check_device_tensor(op, name, t);
  DLB_CHECK(is_float_dtype(t.dtype()), "{}: {} is {}, expected a float dtype", op, name, t.describe());
}

const CudaBackend& as_cuda(const Backend& backend) {
  auto* b = dynamic_cast<const CudaBackend*>(&backend);
  DLB_CHECK(b != nullptr, "backend '{}' is not the cuda backend", backend.name());
  return *b;
}

// ---- construction ----

namespace {

// cuBLAS's workspace, set once so that GEMMs never allocate (and can be captured in a graph); 32 MiB is
// NVIDIA's recommendation for Hopper.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

}  // namespace

CudaBackend::CudaBackend(int device, const CudaOptions& options,
                         std::shared_ptr<tuning::AlgorithmCache> algorithms)
    : device_(device),
      options_(options),
      algorithms_(algorithms ? std::move(algorithms) : std::make_shared<tuning::AlgorithmCache>()) {
  const int count = cuda_device_count();
  DLB_REQUIRE(device >= 0 && device < count, "--device cuda:{}: this machine has {} CUDA GPU(s)", device,
              count);
  CUDA_CHECK(cudaSetDevice(device_));
  require_gpu_support(device_, options_.fp8_gemms);
  stream_ = new_stream(options_.training_stream == TrainingStreamPriority::greatest);
  CUDNN_CHECK(cudnnCreate(&cudnn_));
  CUDNN_CHECK(cudnnSetStream(cudnn_, stream_));
  CUBLAS_CHECK(cublasCreate(&cublas_));
  CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  cublas_workspace_ = DeviceBuffer(kCublasWorkspaceBytes);
  CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_.get(), cublas_workspace_.bytes()));
  lt_ = std::make_unique<LtMatmuls>(cublas_workspace_.get(), cublas_workspace_.bytes());
  // FP32 GEMMs: TF32 tensor cores only when allowed. The compute type of each call says the same (gemm).
  CUBLAS_CHECK(
      cublasSetMathMode(cublas_, options_.allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  algorithms_->bind(machine_key());
}

tuning::MachineKey CudaBackend::machine_key() const {
  cudaDeviceProp properties{};
  CUDA_CHECK(cudaGetDeviceProperties(&properties, device_));
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) (void)cudaGetLastError();
  int major = 0, minor = 0, patch = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  return {properties.name, std::to_string(driver),
          fmt::format("cudnn {} cublas {}.{}.{}", cudnnGetVersion(), major, minor, patch), DLBENCH_VERSION};
}

CudaBackend::~CudaBackend() {
  // Destructors never throw: errors while tearing down are ignored.
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  segment_tables_.clear();
  graph_plans_.clear();  // before the cuDNN handle they were built on
  attention_choices_.clear();
  for (cudaEvent_t event : markers_) cudaEventDestroy(event);
  lt_.reset();
  if (cublas_) cublasDestroy(cublas_);
  cublas_workspace_.reset();
  if (cudnn_) cudnnDestroy(cudnn_);
  if (stream_) cudaStreamDestroy(stream_);
}

std::shared_ptr<const GraphPlan> CudaBackend::graph_plan(
    const std::vector<int64_t>& key, const std::function<std::unique_ptr<GraphPlan>()>& build) const {
  std::lock_guard<std::mutex> lock(graph_plans_mutex_);
  if (auto it = graph_plans_.find(key); it != graph_plans_.end()) return it->second;
  std::shared_ptr<const GraphPlan> plan = build();
  graph_plans_.emplace(key, plan);
  return plan;
}

void CudaBackend::activate() const {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device_) CUDA_CHECK(cudaSetDevice(device_));
}

// ---- memory ----

std::optional<DeviceMemory> CudaBackend::device_memory() {
  activate();
  DeviceMemory memory;
  CUDA_CHECK(cudaMemGetInfo(&memory.free_bytes, &memory.total_bytes));
  cudaDeviceProp properties{};
  CUDA_CHECK(cudaGetDeviceProperties(&properties, device_));
  memory.description = fmt::format("cuda:{} ({})", device_, properties.name);
  memory.name = properties.name;
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device_) == cudaSuccess) memory.pci_bus_id = bus_id;
  return memory;
}

void* CudaBackend::allocate(size_t bytes) {
  activate();
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, std::max<size_t>(bytes, 1));
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    DLB_CHECK(false, "cuda backend: cudaMalloc of {} bytes failed ({}); {} of {} MiB free on cuda:{}", bytes,
              cudaGetErrorString(status), free_bytes >> 20, total_bytes >> 20, device_);
  }
  return p;
}

void CudaBackend::deallocate(void* ptr) {
  if (!ptr) return;
  activate();
  CUDA_CHECK(cudaFree(ptr));
}

void* CudaBackend::allocate_host(size_t bytes) {
  activate();
  void* ptr = nullptr;
  const cudaError_t status = cudaHostAlloc(&ptr, std::max<size_t>(bytes, 1), cudaHostAllocPortable);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw_user_error("cannot allocate {} bytes of page-locked host memory: {}", bytes,
                     cudaGetErrorString(status));
  }
  return ptr;
}

void CudaBackend::deallocate_host(void* ptr) {
  if (ptr) (void)cudaFreeHost(ptr);
}

void CudaBackend::copy_to_device(void* dst, const void* host_src, size_t bytes) {
  if (!bytes) return;
  activate();
  CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
  // The caller may reuse host_src as soon as this returns (pinned memory would otherwise still be read).
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  if (!bytes) return;
  activate();
  CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  if (!bytes || dst == src) return;
  activate();
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::synchronize() {
  activate();
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// ---- loss ----

void CudaBackend::softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels,
                                                float label_smoothing, Tensor& probs, Tensor& loss) {
  const char* op = "softmax_cross_entropy_forward";
  check_float(op, "logits", logits);
  check_device_tensor(op, "labels", labels);
  check_device_tensor(op, "probs", probs);
  check_device_tensor(op, "loss", loss);
  DLB_CHECK(logits.rank() == 2, "{}: logits is {}, expected [N, K]", op, logits.describe());
  const int64_t n = logits.dim(0), k = logits.dim(1);
  DLB_CHECK(labels.dtype() == DType::i32 && labels.numel() == n, "{}: labels is {}, expected i32[{}]", op,
            labels.describe(), n);
  DLB_CHECK(probs.dtype() == DType::f32 && probs.numel() == n * k, "{}: probs is {}, expected f32[{}, {}]",
            op, probs.describe(), n, k);
  DLB_CHECK(loss.dtype() == DType::f32 && loss.numel() >= 1, "{}: loss is {}, expected f32[1]", op,
            loss.describe());
  activate();
  cuda::softmax_cross_entropy_forward(logits.data(), logits.dtype(), labels.ptr<int32_t>(), n, k,
                                      label_smoothing, probs.ptr<float>(), loss.ptr<float>(), stream_);
}

void CudaBackend::softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels,
                                                 float label_smoothing, float scale, Tensor& dlogits,
                                                 const float* loss_scale) {
  const char* op = "softmax_cross_entropy_backward";
  check_device_tensor(op, "probs", probs);
  check_device_tensor(op, "labels", labels);
  check_float(op, "dlogits", dlogits);
  DLB_CHECK(probs.rank() == 2 && probs.dtype() == DType::f32, "{}: probs is {}, expected f32[N, K]", op,
            probs.describe());
  const int64_t n = probs.dim(0), k = probs.dim(1);
  DLB_CHECK(labels.dtype() == DType::i32 && labels.numel() == n, "{}: labels is {}, expected i32[{}]", op,
            labels.describe(), n);
  DLB_CHECK(dlogits.numel() == n * k, "{}: dlogits is {}, expected [{}, {}]", op, dlogits.describe(), n, k);
  activate();
  cuda::softmax_cross_entropy_backward(probs.ptr<float>(), labels.ptr<int32_t>(), n, k, label_smoothing,
                                       scale, loss_scale, dlogits.data(), dlogits.dtype(), stream_);
}

// ---- elementwise and utilities ----

void CudaBackend::fill(Tensor& x, double value) {
  check_device_tensor("fill", "x", x);
  if (x.numel() == 0) return;
  activate();
  cuda::fill(x.data(), x.dtype(), x.numel(), value, stream_);  // any dtype, i32 flags included
}

void CudaBackend::add(const Tensor& a, const Tensor& b, Tensor& y) {
  check_float("add", "a", a);
  check_same_shape("add", "a", a, "b", b);
  check_same_shape("add", "a", a, "y", y);
  activate();
  cuda::add(a.data(), b.data(), y.data(), y.dtype(), y.numel(), stream_);
}

void CudaBackend::scale(Tensor& x, double alpha) {
  check_float("scale", "x", x);
  activate();
  cuda::scale(x.data(), x.dtype(), x.numel(), alpha, stream_);
}

void CudaBackend::cast(const Tensor& src, Tensor& dst) {
  check_float("cast", "src", src);
  check_float("cast", "dst", dst);
  const bool same_order = src.rank() != 4 || src.layout() == dst.layout();
  DLB_CHECK(src.dims() == dst.dims() && same_order, "cast: src is {} but dst is {}", src.describe(),
            dst.describe());
  activate();
  if (src.dtype() == dst.dtype()) {
    copy(dst.data(), src.data(), src.bytes());
    return;
  }
  cuda::cast(src.data(), src.dtype(), dst.data(), dst.dtype(), src.numel(), stream_);
}

void CudaBackend::check_finite(const Tensor& x, Tensor& flag) {
  check_float("check_finite", "x", x);
  check_device_tensor("check_finite", "flag", flag);
  DLB_CHECK(flag.dtype() == DType::i32 && flag.numel() == 1, "check_finite: flag is {}, expected i32[1]",
            flag.describe());
  activate();
  cuda::check_finite(x.data(), x.dtype(), x.numel(), flag.ptr<int32_t>(), stream_);
}

// ---- optimizer ----

void CudaBackend::sgd_update(Tensor& params, const Tensor& grads, Tensor& momentum_buffer,
                             std::span<const ParamSegment> segments, const SgdStep& step,
                             const StepScalars* scalars, const ComputeCopies& copies) {
  const char* op = "sgd_update";
  check_device_tensor(op, "params", params);
  DLB_CHECK(params.rank() == 1 && params.dtype() == DType::f32,
            "{}: params is {}, expected a flat f32 buffer", op, params.describe());
  const UpdateCopies raw_copies = update_copies(op, params, grads, copies);
  check_same_shape(op, "params", params, "momentum_buffer", momentum_buffer);
  if (segments.empty()) return;
  activate();
  const ParamSegment* table = segment_table(op, params, segments);
  cuda::sgd_update(params.ptr<float>(), grads.ptr<float>(), momentum_buffer.ptr<float>(), table,
                   static_cast<int>(segments.size()), step, scalars, raw_copies, stream_);
}

UpdateCopies update_copies(const char* op, const Tensor& params, const Tensor& grads,
                           const ComputeCopies& copies) {
  UpdateCopies raw;
  raw.count = check_compute_copies(op, params, grads, copies);
  if (grads.numel() > 0) check_device_tensor(op, "grads", grads);
  if (copies.parameters) {
    check_device_tensor(op, "compute parameters", *copies.parameters);
    raw.parameters = copies.parameters->data();
    raw.dtype = copies.parameters->dtype();
  }
  if (copies.gradients) {
    check_device_tensor(op, "compute gradients", *copies.gradients);
    raw.gradients = copies.gradients->data();
    raw.dtype = copies.gradients->dtype();
  }
  return raw;
}

const ParamSegment* CudaBackend::segment_table(const char* op, const Tensor& params,
                                               std::span<const ParamSegment> segments) {
  std::vector<std::tuple<int64_t, int64_t, bool>> key;
  key.reserve(segments.size());
  for (const ParamSegment& s : segments) key.emplace_back(s.offset, s.count, s.weight_decay);
  const ParamSegment* table = nullptr;
  {
    std::lock_guard<std::mutex> lock(segments_mutex_);
    auto it = segment_tables_.find(key);
    if (it == segment_tables_.end()) {
      // First use of this table: check it (inside the buffer, no overlap) and upload it, once.
      auto sorted = key;
      std::sort(sorted.begin(), sorted.end());
      int64_t covered_until = 0;
      for (const auto& [offset, count, decay] : sorted) {
        DLB_CHECK(offset >= 0 && count >= 0 && offset + count <= params.numel(),
                  "{}: segment [{}, {}) is outside params {}", op, offset, offset + count, params.describe());
        DLB_CHECK(offset >= covered_until, "{}: segment at {} overlaps the previous one (ending at {})", op,
                  offset, covered_until);
        covered_until = offset + count;
      }
      DeviceBuffer buffer(segments.size_bytes());
      copy_to_device(buffer.get(), segments.data(), segments.size_bytes());
      it = segment_tables_.emplace(std::move(key), std::move(buffer)).first;
    }
    table = static_cast<const ParamSegment*>(it->second.get());
  }
  return table;
}

void* CudaBackend::scratch(size_t bytes, const char* op) { return grown(scratch_, bytes, op); }

Tensor CudaBackend::gelu_of(const Tensor& x, const char* op) {
  Tensor gx(grown(gelu_input_, x.bytes(), op), x.dims(), x.dtype(), x.layout(), x.device());
  gelu_forward(x, gx);
  return gx;
}

void* CudaBackend::grown(DeviceBuffer& buffer, size_t bytes, const char* op) {
  if (bytes <= buffer.bytes()) return buffer.get();
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream_, &capturing));
  DLB_CHECK(capturing == cudaStreamCaptureStatusNone,
            "{}: needs {} bytes of scratch memory, more than any op before, inside a CUDA graph capture; run "
            "the step once before recording it",
            op, bytes);
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // work queued on the smaller buffer still reads it
  buffer = DeviceBuffer(bytes);
  return buffer.get();
}

const CudaBackend::AttentionChoice& CudaBackend::attention_choice(
    const std::vector<int64_t>& key, const std::function<AttentionChoice()>& build) const {
  std::lock_guard<std::mutex> lock(attention_mutex_);
  if (auto it = attention_choices_.find(key); it != attention_choices_.end()) return it->second;
  return attention_choices_.emplace(key, build()).first->second;
}

void CudaBackend::update_loss_scale(StepScalars* scalars) {
  DLB_CHECK(scalars, "update_loss_scale: no scalars");
  activate();
  cuda::update_loss_scale(scalars, stream_);
}

}  // namespace cuda

// ---- factory and utilities of the public header ----

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no GPU: not an error for the caller
    return 0;
  }
  return count;
}

std::unique_ptr<Backend> make_cuda_backend(int device, const CudaOptions& options,
                                           std::shared_ptr<tuning::AlgorithmCache> algorithms) {
  return std::make_unique<cuda::CudaBackend>(device, options, std::move(algorithms));
}

namespace cuda {
namespace {

// An instantiated CUDA graph, replayed on the backend's stream.
class CudaGraph final : public CapturedWork {
 public:
  CudaGraph(cudaStream_t stream, cudaGraph_t graph, cudaGraphExec_t exec)
      : stream_(stream), graph_(graph), exec_(exec) {}
  ~CudaGraph() override {
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
  }
  void replay() override { CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaStream_t stream_;
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
};

}  // namespace

void CudaBackend::hold_queue(double microseconds) {
  activate();
  hold_stream(microseconds, stream_);
}

int64_t CudaBackend::mark(void* stream) {
  activate();
  cudaEvent_t event = nullptr;
  CUDA_CHECK(cudaEventCreate(&event));
  markers_.push_back(event);
  CUDA_CHECK(cudaEventRecord(event, stream ? static_cast<cudaStream_t>(stream) : stream_));
  return static_cast<int64_t>(markers_.size()) - 1;
}

double CudaBackend::marker_ms(int64_t marker) {
  activate();
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, markers_.front(), markers_.at(static_cast<size_t>(marker))));
  return ms;
}

std::unique_ptr<CapturedWork> CudaBackend::capture(const std::function<void()>& body) {
  activate();
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  // Thread-local mode: a host synchronisation or an allocation by this thread during the capture fails it
  // loudly, while other ranks' threads (--gpus N) may still allocate or capture their own steps.
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    body();
  } catch (...) {
    cudaStreamEndCapture(stream_, &graph);
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  if (instantiated != cudaSuccess) {
    cudaGraphDestroy(graph);
    CUDA_CHECK(instantiated);
  }
  return std::make_unique<CudaGraph>(stream_, graph, exec);
}

}  // namespace cuda

void cuda_capture_and_replay(Backend& backend, const std::function<void()>& body, int replays) {
  const cuda::CudaBackend& b = cuda::as_cuda(backend);
  b.activate();
  cudaStream_t stream = b.stream();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  cudaGraph_t graph = nullptr;
  try {
    body();
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);  // leave the stream usable; the graph is invalid
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  if (instantiated != cudaSuccess) {
    cudaGraphDestroy(graph);
    CUDA_CHECK(instantiated);
  }
  cudaError_t status = cudaSuccess;
  for (int i = 0; i < replays && status == cudaSuccess; ++i) status = cudaGraphLaunch(exec, stream);
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  CUDA_CHECK(status);
}

}  // namespace dlbench
