// Internals shared by the CUDA backend's files: the backend class, RAII wrappers of device memory and
// cuDNN descriptors, dtype mappings and tensor checks.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/stream_gate.h"
#include "backend/cuda_options.h"
#include "backend/tuning/algorithm_cache.h"
#include "core/align.h"
#include "core/status.h"

namespace dlbench::cuda {

class GraphPlan;
class AttentionPlan;
struct AttentionShape;
class LtMatmuls;

// Owning device memory (cudaMalloc / cudaFree); move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);  // throws when cudaMalloc fails
  // An empty buffer instead of an error when the memory is not there.
  static DeviceBuffer try_allocate(size_t bytes);
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(other.bytes_) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      ptr_ = std::exchange(other.ptr_, nullptr);
      bytes_ = other.bytes_;
    }
    return *this;
  }
  void* get() const { return ptr_; }
  size_t bytes() const { return ptr_ ? bytes_ : 0; }
  void reset();

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A cuDNN descriptor owned for its lifetime: created in the constructor, destroyed in the destructor.
template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class CudnnDescriptor {
 public:
  CudnnDescriptor() { CUDNN_CHECK(Create(&desc_)); }
  ~CudnnDescriptor() {
    if (desc_) Destroy(desc_);
  }
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  operator T() const { return desc_; }  // NOLINT: used as the raw handle in cuDNN calls
  T get() const { return desc_; }

 private:
  T desc_ = nullptr;
};

using TensorDescriptor =
    CudnnDescriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDescriptor =
    CudnnDescriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor = CudnnDescriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                                              cudnnDestroyConvolutionDescriptor>;
using PoolingDescriptor =
    CudnnDescriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;
using ActivationDescriptor = CudnnDescriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor,
                                             cudnnDestroyActivationDescriptor>;

// cuDNN's data type for one of ours (f32, f64, f16, bf16); throws for i32.
cudnnDataType_t cudnn_dtype(DType dtype);
cudaDataType_t cuda_dtype(DType dtype);
cudnnTensorFormat_t cudnn_format(Layout layout);
bool is_float_dtype(DType dtype);
int checked_int(int64_t value, const char* what);  // cuDNN's 4-D descriptors take int sizes

// Sets a fully packed 4-D descriptor of logical dims [n, c, h, w] in `layout`.
void set_tensor_4d(cudnnTensorDescriptor_t desc, DType dtype, Layout layout, int64_t n, int64_t c, int64_t h,
                   int64_t w);

// alpha/beta scaling factors as cuDNN wants them: double for FP64 data, float for everything else.
struct Scaling {
  explicit Scaling(DType dtype, double alpha_value, double beta_value)
      : is_double(dtype == DType::f64),
        alpha_f(static_cast<float>(alpha_value)),
        beta_f(static_cast<float>(beta_value)),
        alpha_d(alpha_value),
        beta_d(beta_value) {}
  const void* alpha() const { return is_double ? static_cast<const void*>(&alpha_d) : &alpha_f; }
  const void* beta() const { return is_double ? static_cast<const void*>(&beta_d) : &beta_f; }
  bool is_double;
  float alpha_f, beta_f;
  double alpha_d, beta_d;
};

// ---- tensor checks (throw dlbench::Error naming the op and the argument) ----
void check_device_tensor(const char* op, const char* name, const Tensor& t);
void check_activation(const char* op, const char* name, const Tensor& t, std::vector<int64_t> dims,
                      DType dtype, Layout layout);
void check_float(const char* op, const char* name, const Tensor& t);  // a device tensor of a float dtype
void check_same_shape(const char* op, const char* name_a, const Tensor& a, const char* name_b,
                      const Tensor& b);
// An optimizer update's ComputeCopies, checked (check_compute_copies, on the device), as the kernels take
// them.
UpdateCopies update_copies(const char* op, const Tensor& params, const Tensor& grads,
                           const ComputeCopies& copies);

inline void* at_offset(void* base, size_t offset) { return static_cast<std::byte*>(base) + offset; }
// Byte offsets in a workspace are kept 256-aligned, as cuDNN's allocations are.
inline constexpr size_t kWorkspaceAlignment = 256;

// Hands out 256-byte aligned slices of a workspace whose total is known at plan time.
class WorkspaceLayout {
 public:
  size_t reserve(size_t bytes) {
    const size_t offset = total_;
    total_ += align_up(bytes, kWorkspaceAlignment);
    return offset;
  }
  size_t total() const { return total_; }

 private:
  size_t total_ = 0;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, const CudaOptions& options, std::shared_ptr<tuning::AlgorithmCache> algorithms);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  Device device() const override { return Device{DeviceKind::cuda, device_}; }
  // What this backend runs where it has a choice (backend/cuda_options.h).
  const CudaOptions& options() const { return options_; }
  bool allow_tf32() const { return options_.allow_tf32; }
  // The largest workspace one convolution direction may take (--conv-workspace-mb).
  size_t conv_workspace_limit() const { return options_.conv_workspace_limit; }
  // Where the searches' choices are kept (shared with the launch's other backends).
  tuning::AlgorithmCache& algorithms() const { return *algorithms_; }
  // The GPU model, driver and library versions the choices hold for.
  tuning::MachineKey machine_key() const;
  cudaStream_t stream() const { return stream_; }
  // Holds the searches' timed calls on stream() until they are queued (tuning/cuda_timing.h).
  StreamGate& search_gate() const { return search_gate_; }
  cudnnHandle_t cudnn() const { return cudnn_; }
  cublasHandle_t cublas() const { return cublas_; }
  // Makes this backend's GPU the calling thread's current device (cheap when it already is).
  void activate() const;

  std::optional<DeviceMemory> device_memory() override;
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr) override;
  void* allocate_host(size_t bytes) override;
  void deallocate_host(void* ptr) override;
  void copy_to_device(void* dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void synchronize() override;
  std::unique_ptr<CapturedWork> capture(const std::function<void()>& body) override;
  void* native_stream() const override { return stream_; }

  std::unique_ptr<ConvPlan> plan_conv(const ConvGeometry& geometry) override;
  std::unique_ptr<ConvPlan> estimate_conv(const ConvGeometry& geometry) override;
  void conv_forward(const ConvPlan& plan, const Tensor& x, const Tensor& w, Tensor& y,
                    void* workspace) override;
  // Where the plan found an engine worth it (CudaConvPlan::emits_statistics).
  void conv_forward_with_statistics(const ConvPlan& plan, const Tensor& x, const Tensor& w, Tensor& y,
                                    Tensor& sums, void* workspace) override;
  void conv_backward_data(const ConvPlan& plan, const Tensor& dy, const Tensor& w, Tensor& dx,
                          Accumulate accumulate, void* workspace) override;
  void conv_backward_filter(const ConvPlan& plan, const Tensor& x, const Tensor& dy, Tensor& dw,
                            Accumulate accumulate, void* workspace) override;

  std::unique_ptr<BatchNormPlan> plan_batchnorm(const BatchNormGeometry& geometry) override;
  std::unique_ptr<BatchNormPlan> estimate_batchnorm(const BatchNormGeometry& geometry) override;
  // Statistics from the convolution before where given (own kernels); an FP64 plan, on cuDNN's kernels,
  // ignores the sums.
  void batchnorm_forward_training(const BatchNormPlan& plan, const BatchNormTensors& bn,
                                  const Tensor* residual, Tensor& y, void* workspace) override;
  void batchnorm_forward_inference(const BatchNormPlan& plan, const BatchNormTensors& bn,
                                   const Tensor* residual, Tensor& y) override;
  void batchnorm_backward(const BatchNormPlan& plan, const BatchNormTensors& bn, const Tensor& y,
                          const Tensor& dy, Tensor* dresidual, Accumulate accumulate,
                          void* workspace) override;
  // Each fusion where its own kernels run it and CudaOptions leaves it on: the convolutions' statistics
  // (--conv-statistics off declines; each plan still takes them only where its search finds them worth
  // it), the folded shortcut (the own kernels train and the channels come in whole vectors;
  // --bn-fold-shortcut off declines), the stem's batch norm + max pool (the own kernels train, the
  // channels come in whole vectors and the pool is the 3x3/2 stem pool; --stem-pool-fusion off declines).
  // None in FP64, which trains on cuDNN's batch norm.
  bool fuses(const FusionCandidate& candidate) const override;
  // The stem's batch norm + ReLU and max pool as one op: on the own NHWC kernels where fuses says so, else
  // Backend's composition.
  size_t batchnorm_max_pool_saved_bytes(const BatchNormPlan& plan, const PoolPlan& pool_plan) const override;
  void batchnorm_max_pool_forward_training(const BatchNormPlan& plan, const PoolPlan& pool_plan,
                                           const BatchNormTensors& bn, Tensor& y, void* saved,
                                           void* workspace) override;
  void batchnorm_max_pool_forward_inference(const BatchNormPlan& plan, const PoolPlan& pool_plan,
                                            const BatchNormTensors& bn, Tensor& y, void* saved) override;
  void batchnorm_max_pool_backward(const BatchNormPlan& plan, const PoolPlan& pool_plan,
                                   const BatchNormTensors& bn, const Tensor& y, const Tensor& dy,
                                   const void* saved, Accumulate accumulate, void* workspace) override;
  // The projection shortcut folded in: training on own NHWC kernels, inference on cuDNN's.
  void batchnorm_shortcut_forward_training(const BatchNormPlan& plan, const BatchNormPlan& shortcut_plan,
                                           const BatchNormTensors& main, const BatchNormTensors& shortcut,
                                           Tensor& y, void* workspace) override;
  void batchnorm_shortcut_forward_inference(const BatchNormPlan& plan, const BatchNormPlan& shortcut_plan,
                                            const BatchNormTensors& main, const BatchNormTensors& shortcut,
                                            Tensor& y) override;
  void batchnorm_shortcut_backward(const BatchNormPlan& plan, const BatchNormPlan& shortcut_plan,
                                   const BatchNormTensors& main, const BatchNormTensors& shortcut,
                                   const Tensor& y, const Tensor& dy, Accumulate accumulate,
                                   void* workspace) override;

  std::unique_ptr<PoolPlan> plan_pool(const PoolGeometry& geometry) override;
  void pool_forward(const PoolPlan& plan, const Tensor& x, Tensor& y, void* saved) override;
  void pool_backward(const PoolPlan& plan, const Tensor& x, const Tensor& y, const Tensor& dy,
                     const void* saved, Tensor& dx) override;

  void relu_forward(const Tensor& x, Tensor& y) override;
  void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) override;

  void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const Tensor& a,
            const Tensor& b, float beta, Tensor& c) override;
  void add_bias(Tensor& y, const Tensor& bias) override;
  void bias_backward(const Tensor& dy, Tensor& dbias, Accumulate accumulate) override;
  void bias_backward_columns(const Tensor& dy, int64_t first_column, Tensor& dbias,
                             Accumulate accumulate) override;
  // The dense ops on cuBLASLt with epilogues (dense_epilogues.cc) where --dense-epilogues is on; with
  // `fp8`, on cuBLASLt's FP8 GEMMs (dense_fp8.cc) whatever the option.
  void dense_forward(const Tensor& x, const Tensor& w, const Tensor& b, DenseActivation act,
                     const Tensor* residual, Tensor& y, Tensor* pre, const Fp8DenseScaling* fp8 = nullptr,
                     DenseActivation input_act = DenseActivation::none) override;
  void dense_backward_data(const Tensor& dy, const Tensor& w, DenseActivation act, const Tensor* pre,
                           Accumulate accumulate, Tensor& dx, const Fp8DenseScaling* fp8 = nullptr) override;
  void dense_backward_weights(const Tensor& dy, const Tensor& x, Accumulate accumulate, Tensor& dw,
                              Tensor* db, const Fp8DenseScaling* fp8 = nullptr) override;
  void dense_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const DenseGradients& g,
                      const Fp8DenseScaling* fp8 = nullptr) override;
  bool runs_fp8_gemms() const override { return true; }
  void fp8_round_trip(const Tensor& x, Fp8Format format, const float* scale, float* amax, Tensor& y) override;
  void update_fp8_scales(const Fp8ScalingState& state) override;

  void softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, float label_smoothing,
                                     Tensor& probs, Tensor& loss) override;
  void softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, float label_smoothing,
                                      float scale, Tensor& dlogits,
                                      const float* loss_scale = nullptr) override;

  void fill(Tensor& x, double value) override;
  void add(const Tensor& a, const Tensor& b, Tensor& y) override;
  void scale(Tensor& x, double alpha) override;
  void cast(const Tensor& src, Tensor& dst) override;
  void check_finite(const Tensor& x, Tensor& flag) override;

  void sgd_update(Tensor& params, const Tensor& grads, Tensor& momentum_buffer,
                  std::span<const ParamSegment> segments, const SgdStep& step,
                  const StepScalars* scalars = nullptr, const ComputeCopies& copies = {}) override;
  void update_loss_scale(StepScalars* scalars) override;

  // The transformer ops (GPT-2) on dlbench's own kernels (cuda_transformer.cc) and, for attention in
  // f16/bf16, cuDNN's fused flash attention (attention.cc). f32, f16 and bf16 activations and parameters;
  // statistics and the optimizer's buffers in f32.
  void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& out) override;
  void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dwte, Tensor& dwpe,
                          Accumulate accumulate) override;
  void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y,
                         Tensor& mean, Tensor& rstd) override;
  void layernorm_forward_fp8(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                             const float* scale, uint8_t* codes, uint8_t* codes_transposed, float* amax,
                             Tensor& mean, Tensor& rstd) override;
  void layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                          const Tensor& dy, Tensor& dx, Tensor& dweight, Tensor& dbias, Accumulate accumulate,
                          Accumulate dx_accumulate) override;
  void layernorm_backward_summing_dx(const Tensor& x, const Tensor& weight, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dweight,
                                     Tensor& dbias, Tensor& dx_sums, Accumulate accumulate,
                                     Accumulate dx_accumulate) override;
  void gelu_forward(const Tensor& x, Tensor& y) override;
  void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override;
  void attention_forward(const Tensor& qkv, int64_t heads, Tensor& out, Tensor& stats) override;
  void attention_backward(const Tensor& qkv, const Tensor& out, const Tensor& stats, const Tensor& dout,
                          int64_t heads, Tensor& dqkv) override;
  void softmax_cross_entropy_padded_forward(const Tensor& logits, const Tensor& labels, int64_t valid_classes,
                                            float label_smoothing, Tensor& probs, Tensor& loss) override;
  void softmax_cross_entropy_padded_backward(const Tensor& probs, const Tensor& labels, int64_t valid_classes,
                                             float label_smoothing, float scale, Tensor& dlogits,
                                             const float* loss_scale = nullptr) override;
  void softmax_cross_entropy_fused(Tensor& logits, const Tensor& labels, int64_t valid_classes,
                                   float label_smoothing, Tensor& row_loss, Tensor& loss,
                                   std::optional<float> gradient_scale,
                                   const float* loss_scale = nullptr) override;
  void sum_of_squares(const Tensor& x, Tensor& out, Accumulate accumulate) override;
  void adamw_update(Tensor& params, const Tensor& grads, Tensor& m, Tensor& v,
                    std::span<const ParamSegment> segments, const AdamWStep& step,
                    const StepScalars* scalars = nullptr, const ComputeCopies& copies = {}) override;

  void hold_queue(double microseconds) override;
  int64_t mark(void* stream) override;
  double marker_ms(int64_t marker) override;
  std::string describe(const ConvPlan& plan) const override { return describe_cuda_conv_plan(plan); }
  std::string describe(const BatchNormPlan& plan) const override {
    return describe_cuda_batchnorm_plan(plan);
  }

  // A graph-API execution plan (cudnn_graph.h) by `key` (shape, direction, engine), built by `build` the
  // first time: a plan belongs to this backend's cuDNN handle, and the layers of one shape share it (an
  // engine that compiles its kernel compiles it once). Null when `build` gave null.
  std::shared_ptr<const GraphPlan> graph_plan(const std::vector<int64_t>& key,
                                              const std::function<std::unique_ptr<GraphPlan>()>& build) const;

  // cuDNN's fused attention plan of one pass and shape (attention.cc), built and kept at the shape's first
  // call; null, with the reason kept beside it, where cuDNN builds none (the own kernels then run).
  struct AttentionChoice {
    std::shared_ptr<const AttentionPlan> plan;
    std::string why_not;
  };
  const AttentionChoice& attention_choice(const std::vector<int64_t>& key,
                                          const std::function<AttentionChoice()>& build) const;

  // Scratch device memory on the stream of the ops (the transformer ops' partial sums and sort buffers),
  // used by one op at a time in stream order. It grows only at a call that needs more than any before: an
  // allocation, so that call must not be inside a capture (the first, ordinary step of a training run
  // sizes it); inside one it throws, saying so.
  void* scratch(size_t bytes, const char* op);
  // gelu(x) in device memory of its own, grown as the scratch is (not the scratch: the op's other passes
  // use that): a dense layer's input given as GELU's input (input_act) where the op takes a path that
  // reads its input as a tensor instead of taking GELU on its way.
  Tensor gelu_of(const Tensor& x, const char* op);
  void* grown(DeviceBuffer& buffer, size_t bytes, const char* op);

  // The dense ops on FP8 GEMMs (dense_fp8.cc), on tensors the public ops checked.
  void dense_forward_fp8(const Tensor& x, const Tensor& w, const Tensor& b, DenseActivation act,
                         const Tensor* residual, Tensor& y, Tensor* pre, const Fp8DenseScaling& fp8,
                         DenseActivation input_act);
  void dense_backward_data_fp8(const Tensor& dy, const Tensor& w, DenseActivation act, const Tensor* pre,
                               Accumulate accumulate, Tensor& dx, const Fp8DenseScaling& fp8);
  void dense_backward_weights_fp8(const Tensor& dy, const Tensor& x, Accumulate accumulate, Tensor& dw,
                                  Tensor* db, const Fp8DenseScaling& fp8);
  // layernorm_backward, and the sums of dx where dx_sums is not null (layernorm_backward_summing_dx).
  void run_layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                              const Tensor& dy, Tensor& dx, Tensor& dweight, Tensor& dbias, Tensor* dx_sums,
                              Accumulate accumulate, Accumulate dx_accumulate);
  // The backward GEMMs on FP8 codes already made: false where cuBLASLt runs no FP8 GEMM for them
  // (nothing written then).
  bool data_gemm_fp8(const uint8_t* dy_codes, const uint8_t* wt_codes, int64_t rows, int64_t in, int64_t out,
                     DenseActivation act, const Tensor* pre, Accumulate accumulate, Tensor& dx,
                     const Fp8DenseScaling& fp8);
  bool weight_gemm_fp8(const uint8_t* dyt_codes, const uint8_t* xt_codes, int64_t rows, int64_t in,
                       int64_t out, Accumulate accumulate, Tensor& dw, const Fp8DenseScaling& fp8);
  // Counts an FP8 op whose GEMM runs in BF16 on FP8-rounded operands, cuBLASLt having run no FP8 GEMM for
  // it, and says so once per op and shape: the numbers are FP8 training's, the speed is not.
  void note_fp8_in_bf16(const char* op, int64_t rows, int64_t in, int64_t out);
  // How many FP8 ops ran their GEMM in BF16 since the backend was made: 0 where every FP8 GEMM ran (tests).
  int64_t fp8_gemms_in_bf16() const { return fp8_gemms_in_bf16_; }
  // a's and b's round trips through FP8 (fp8_round_trip) in the scratch: the operands of an FP8 op where
  // cuBLASLt has no FP8 GEMM for its shape.
  std::pair<Tensor, Tensor> fp8_round_trips(const Tensor& a, Fp8Format a_format, const float* a_scale,
                                            const Tensor& b, Fp8Format b_format, const float* b_scale,
                                            const char* op);

  // f32 attention from GEMMs (attention.cc), on checked tensors of shape `s`.
  void gemm_attention_forward(const AttentionShape& s, const float* qkv, float* out, float* stats);
  void gemm_attention_backward(const AttentionShape& s, const float* qkv, const float* out,
                               const float* stats, const float* dout, float* dqkv);

  // The device table of `segments` (checked against `params`: inside it, no overlap), uploaded at its
  // first use and kept: the optimizer updates read it.
  const ParamSegment* segment_table(const char* op, const Tensor& params,
                                    std::span<const ParamSegment> segments);

 private:
  int device_;
  CudaOptions options_;
  std::shared_ptr<tuning::AlgorithmCache> algorithms_;
  cudaStream_t stream_ = nullptr;
  mutable StreamGate search_gate_;
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  DeviceBuffer cublas_workspace_;
  std::unique_ptr<LtMatmuls> lt_;  // cuBLASLt's GEMMs with epilogues, on cublas_workspace_
  // sgd_update's segment tables, uploaded once per distinct content.
  std::vector<cudaEvent_t> markers_;  // timeline events (--trace), destroyed with the backend
  std::mutex segments_mutex_;
  std::map<std::vector<std::tuple<int64_t, int64_t, bool>>, DeviceBuffer> segment_tables_;
  mutable std::mutex graph_plans_mutex_;
  mutable std::map<std::vector<int64_t>, std::shared_ptr<const GraphPlan>> graph_plans_;
  mutable std::mutex attention_mutex_;
  mutable std::map<std::vector<int64_t>, AttentionChoice> attention_choices_;
  DeviceBuffer scratch_, gelu_input_;
  int64_t fp8_gemms_in_bf16_ = 0;
};

const CudaBackend& as_cuda(const Backend& backend);

}  // namespace dlbench::cuda
