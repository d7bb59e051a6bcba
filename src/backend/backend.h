// The op-level backend interface: every numerical operation the engine performs goes through here.
//
// A Backend is passed explicitly to whoever computes (no global mode, no singleton). Ops on shapes that
// are known at setup are *planned* once (plan_conv, plan_batchnorm, plan_pool): the plan owns whatever the
// implementation precomputes — oneDNN primitives, cuDNN descriptors and chosen algorithms — and states the
// workspace it needs, so nothing is planned or allocated inside the timed loop.
//
// Conventions shared by every implementation:
//   * 4-D tensors have logical dims [N, C, H, W]; their Layout says how they sit in memory.
//   * Convolution weights are [K, C, R, S] logically (K output channels, R x S kernel), in the same layout
//     as the activations (NHWC activations: weights stored K, R, S, C).
//   * Batch-norm parameters and statistics (gamma, beta, running mean/var, saved mean/inv-std) are FP32 [C]
//     for FP32/FP16/BF16 activations; FP64 activations may have FP64 ones (cuDNN's rule), as
//     double-precision networks do.
//   * Parameters seen by conv/gemm have the activations' dtype; the optimizer's flat buffers are FP32
//     (FP64 in a double-precision network).
//   * Gradient rule: gradients of parameters honour `Accumulate` (overwrite, or += for accumulation over
//     micro-batches); gradients of activations overwrite, except conv_backward_data which may add into dx
//     (a tensor read by two consumers, e.g. a residual block's input, sums both gradients there).
//   * All ops are asynchronous with respect to the host on a device backend; synchronize() waits.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/fp8.h"
#include "core/stream_clock.h"
#include "core/tensor.h"

namespace dlbench {

enum class Accumulate : uint8_t { overwrite, add };
enum class Transpose : uint8_t { no, yes };

struct ConvGeometry {
  int64_t batch = 0, in_channels = 0, in_h = 0, in_w = 0;
  int64_t out_channels = 0, kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  DType dtype = DType::f32;
  Layout layout = Layout::nchw;
  // The input's gradient is added into (another layer wrote it first: a residual block's input), not
  // overwritten. A backend may plan its backward-data for that (CUDA: an engine that adds in its epilogue);
  // every backend still takes either Accumulate in the call.
  bool accumulates_input_grad = false;
  // The training forward also sums its output per channel for the batch norm that reads it
  // (Backend::conv_forward_with_statistics), where the backend's plan can (ConvPlan::emits_statistics).
  bool output_statistics = false;

  int64_t out_h() const { return (in_h + 2 * pad_h - kernel_h) / stride_h + 1; }
  int64_t out_w() const { return (in_w + 2 * pad_w - kernel_w) / stride_w + 1; }
  // Multiply-accumulates of one forward pass over the whole batch.
  int64_t forward_macs() const {
    return batch * out_channels * out_h() * out_w() * in_channels * kernel_h * kernel_w;
  }
};

// Stops (an internal error) where `g` is no convolution: sizes, kernel, stride or padding out of range,
// or a kernel larger than the padded input. Every backend checks a geometry so before planning it.
void check_conv_geometry(const ConvGeometry& g);

class ConvPlan {
 public:
  explicit ConvPlan(const ConvGeometry& g) : geometry(g) {}
  virtual ~ConvPlan() = default;
  // Scratch memory each of the three conv ops may use (the largest of them).
  virtual size_t workspace_bytes() const { return 0; }
  // Whether the training forward sums its output per channel (Backend::conv_forward_with_statistics): at
  // most where the geometry asks (output_statistics), and there where the backend's plan found it worth it.
  virtual bool emits_statistics() const { return false; }
  const ConvGeometry geometry;
};

// What a batch norm applies after normalising: y = act(gamma * xhat + beta [+ residual]).
enum class BatchNormFusion : uint8_t { none, relu, add_relu };

struct BatchNormGeometry {
  int64_t batch = 0, channels = 0, h = 1, w = 1;
  DType dtype = DType::f32;
  Layout layout = Layout::nchw;
  BatchNormFusion fusion = BatchNormFusion::none;
  double epsilon = 1e-5;
  // running = (1 - momentum) * running + momentum * batch statistic (PyTorch's convention).
  double momentum = 0.1;
};

class BatchNormPlan {
 public:
  explicit BatchNormPlan(const BatchNormGeometry& g) : geometry(g) {}
  virtual ~BatchNormPlan() = default;
  virtual size_t workspace_bytes() const { return 0; }
  // Device memory the plan holds itself, outside the caller's arenas, for as long as it lives (cuDNN's
  // per-layer reserve space), so that a memory plan can account for every byte a network takes.
  virtual size_t held_bytes() const { return 0; }
  const BatchNormGeometry geometry;
};

// One batch norm's tensors, as every batch-norm op takes them. The training forward reads x, gamma, beta
// (and input_sums where set), updates running_mean and running_var and writes saved_mean and
// saved_inv_std; inference reads x, gamma, beta, running_mean and running_var; the backward reads x, gamma,
// saved_mean and saved_inv_std and fills dx (overwritten), dgamma and dbeta (as `accumulate` says). A
// tensor an op does not read may be null.
struct BatchNormTensors {
  const Tensor* x = nullptr;
  const Tensor* gamma = nullptr;
  const Tensor* beta = nullptr;
  Tensor* running_mean = nullptr;
  Tensor* running_var = nullptr;
  Tensor* saved_mean = nullptr;
  Tensor* saved_inv_std = nullptr;
  Tensor* dx = nullptr;
  Tensor* dgamma = nullptr;
  Tensor* dbeta = nullptr;
  // x's sums from Backend::conv_forward_with_statistics, or null: the training forward reads x for them.
  // mean = sum / M, var = sum of squares / M - mean^2; a backend may ignore them (the same statistics).
  const Tensor* input_sums = nullptr;
};

// The batch-norm ops, for check_batchnorm_tensors: which of BatchNormTensors' tensors each reads or writes.
enum class BatchNormPass : uint8_t { training, inference, backward };

// Stops (an internal error) where `t` lacks a tensor `pass` needs (BatchNormTensors says which).
void check_batchnorm_tensors(const char* op, const BatchNormTensors& t, BatchNormPass pass);

enum class PoolKind : uint8_t { max, average };

struct PoolGeometry {
  int64_t batch = 0, channels = 0, in_h = 0, in_w = 0;
  int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  PoolKind kind = PoolKind::max;  // average excludes padding from the divisor
  DType dtype = DType::f32;
  Layout layout = Layout::nchw;

  int64_t out_h() const { return (in_h + 2 * pad_h - kernel_h) / stride_h + 1; }
  int64_t out_w() const { return (in_w + 2 * pad_w - kernel_w) / stride_w + 1; }
};

class PoolPlan {
 public:
  explicit PoolPlan(const PoolGeometry& g) : geometry(g) {}
  virtual ~PoolPlan() = default;
  // Bytes of state the training forward saves for the backward (e.g. max-pool argmax); may be 0.
  virtual size_t saved_bytes() const { return 0; }
  const PoolGeometry geometry;
};

// The layer patterns a backend may run as one op (the fusion pass, nn/fusion_pass.h, asks Backend::fuses
// before it rewrites a network's layers; every backend runs the fused ops, composing the single ones
// where it has no kernels for them, so the answer is about speed and memory, never about results):
//   * conv_statistics: a convolution that sums its output per channel in its forward, for the batch norm
//     of `batchnorm` reading that output (conv_forward_with_statistics, ConvPlan::emits_statistics);
//   * shortcut_batchnorm: a projection block's shortcut batch norm (`shortcut`, over the shortcut
//     convolution's output, fusion none) folded into the block's closing one (`batchnorm`, add_relu):
//     batchnorm_shortcut_*;
//   * batchnorm_max_pool: a batch norm + ReLU (`batchnorm`) and the max pool after it (`pool`):
//     batchnorm_max_pool_*.
//   * dense_gelu_dense: a transformer's MLP, dense (`dense`) -> GELU -> dense, with the first's bias and
//     GELU in its GEMM's epilogue and GELU's gradient in the second's backward GEMM (dense_* with
//     DenseActivation::gelu);
//   * dense_residual: a dense layer (`dense`) and the residual add of its output (dense_forward with a
//     residual).
//   * layernorm_dx_sums: a dense layer (`dense`, not FP8) whose output a layer norm reads first (a
//     transformer's residual stream after a projection): the layer norm's backward, the last to add to
//     that output's gradient, sums it over the rows as it writes it, which is the dense layer's bias
//     gradient (layernorm_backward_summing_dx), and the dense layer's backward makes none.
//   * layernorm_fp8_codes: a layer norm whose output an FP8 dense layer (`dense`) alone reads, the dense
//     layer keeping x^T's codes for its backward: the layer norm writes the codes of its output in both
//     layouts instead of the output (layernorm_forward_fp8), and the dense layer quantizes no input
//     (Fp8DenseScaling::input_codes). Only a backend that runs FP8 GEMMs says yes.
//   * attention_qkv_bias: the dense layer (`dense`, not FP8) that makes attention's qkv: its bias gradient
//     is made by the attention layer, which sums only the q third of the gradient over the rows
//     (bias_backward_columns): the k third is zero, and the v third is what the projection after the
//     attention makes from its own bias gradient (CausalSelfAttentionLayer).
enum class Fusion : uint8_t {
  conv_statistics,
  shortcut_batchnorm,
  batchnorm_max_pool,
  dense_gelu_dense,
  dense_residual,
  layernorm_dx_sums,
  layernorm_fp8_codes,
  attention_qkv_bias
};

// A dense (fully connected) layer's shape: y[rows, out] = x[rows, in] W[out, in]^T + b[out].
struct DenseGeometry {
  int64_t rows = 0, in_features = 0, out_features = 0;
  DType dtype = DType::f32;
};

// What a dense op applies after its GEMM (dense_forward), or whose gradient it applies (dense_backward_data).
enum class DenseActivation : uint8_t { none, gelu };

struct FusionCandidate {
  Fusion fusion = Fusion::conv_statistics;
  BatchNormGeometry batchnorm;  // every fusion's batch norm (the closing one for shortcut_batchnorm)
  ConvGeometry conv;            // conv_statistics: the convolution whose output the batch norm reads
  BatchNormGeometry shortcut;   // shortcut_batchnorm: the shortcut's batch norm
  PoolGeometry pool;            // batchnorm_max_pool: the max pool
  DenseGeometry dense;          // dense_*: the (first) dense layer

  static FusionCandidate conv_statistics(const ConvGeometry& conv, const BatchNormGeometry& batchnorm) {
    return {Fusion::conv_statistics, batchnorm, conv, {}, {}, {}};
  }
  static FusionCandidate shortcut_batchnorm(const BatchNormGeometry& closing,
                                            const BatchNormGeometry& shortcut) {
    return {Fusion::shortcut_batchnorm, closing, {}, shortcut, {}, {}};
  }
  static FusionCandidate batchnorm_max_pool(const BatchNormGeometry& batchnorm, const PoolGeometry& pool) {
    return {Fusion::batchnorm_max_pool, batchnorm, {}, {}, pool, {}};
  }
  static FusionCandidate dense_fusion(Fusion fusion, const DenseGeometry& dense) {
    return {fusion, {}, {}, {}, {}, dense};
  }
};

// FP8 dense layers (--precision fp8, delayed per-tensor scaling): a dense op's three GEMM operands, x and
// w in E4M3 and the output gradient dy in E5M2, are each multiplied by a power-of-two scale and rounded to
// FP8 before their GEMM; the product is multiplied back by the scales' inverses. Every array holds one float
// per operand (kFp8X, kFp8W, kFp8Dy), in the backend's memory, so that a recorded step follows the scales
// as they change; the op folds each operand's largest |value| into its amax (null: a pass that must not
// count, inference), from which the step's end makes the next scales (update_fp8_scales).
// Since the scales are powers of two, scaling rounds nothing: an operand's FP8 value times its inverse
// scale is exactly representable in BF16, and the FP8 GEMM is the BF16 GEMM of the rounded operands up to
// the order of summation. The backends without FP8 GEMMs compute it that way (fp8_round_trip).
enum Fp8Operand : int { kFp8X = 0, kFp8W = 1, kFp8Dy = 2, kFp8OperandsPerDense = 3 };
// The inverse scales lie 16 bytes apart, operand i's at inverse_scale[i * kFp8InverseScaleStride]: the
// GEMMs take them as cuBLASLt's A/B scale pointers, which its FP8 kernels refuse unless 16-byte aligned
// (CUBLAS_STATUS_NOT_SUPPORTED from every algorithm on the H200, CUDA 13: bench/results/gpt2-fp8).
constexpr int kFp8InverseScaleStride = 4;

struct Fp8DenseScaling {
  const float* scale = nullptr;          // [3]
  const float* inverse_scale = nullptr;  // [3 * kFp8InverseScaleStride]
  float* amax = nullptr;                 // [3], or null
  // x^T's E4M3 codes [I, N], kept from the forward for the backward's weight GEMM, or null. Where given,
  // the forward's pass that quantizes x writes them too, and the backward reads them instead of
  // quantizing x again: the same codes, since the scales change only at the step's end. Only a backend
  // whose GEMMs run in FP8 (runs_fp8_gemms) touches them.
  uint8_t* input_codes_transposed = nullptr;
  // W^T's E4M3 codes [I, O], kept the same way for the backward's data GEMM, or null: the forward's pass
  // over W writes them beside W's, and the backward reads them instead of a pass over W.
  uint8_t* weight_codes_transposed = nullptr;
  // x's E4M3 codes [N, I], made by the layer that writes x (Fusion::layernorm_fp8_codes, which also wrote
  // x^T's into input_codes_transposed and folded x's amax), or null: where given, the forward quantizes no
  // x and x itself holds nothing to read.
  const uint8_t* input_codes = nullptr;
  const float* inverse_scale_of(Fp8Operand operand) const {
    return inverse_scale + operand * kFp8InverseScaleStride;
  }
};

// The state of delayed scaling for `count` operands, in the backend's memory: scale and amax [count] each,
// inverse_scale [count * kFp8InverseScaleStride], history [count * history_length] (newest first), format
// [count].
struct Fp8ScalingState {
  float* scale = nullptr;
  float* inverse_scale = nullptr;
  float* amax = nullptr;
  float* history = nullptr;
  const Fp8Format* format = nullptr;
  int count = 0;
  int history_length = 1;
  int margin = 0;
};

// A stretch of the flat parameter buffer with its own weight-decay rule (BN and bias may be exempt).
struct ParamSegment {
  int64_t offset = 0;
  int64_t count = 0;
  bool weight_decay = true;
};

// Mixed precision folded into an optimizer update (sgd_update, adamw_update): the first `count` elements
// of the flat buffers (the weights layers read in FP16/BF16, MemoryPlan's compute parameters) have copies
// in the compute dtype. With `parameters`, the update writes each updated weight's copy there, rounded
// from its FP32 value to nearest even exactly as Backend::cast would, so no cast pass follows the update.
// With `gradients`, it reads those elements' gradients there (widened exactly) instead of in the FP32
// `grads`, so no cast pass precedes it: a one-rank step whose gradients never leave the compute dtype.
// Both tensors, where given, are flat [count] in one dtype; `grads` may then be empty when the copies
// cover every element. A skipped (overflowed) update writes nothing, copies included.
struct ComputeCopies {
  Tensor* parameters = nullptr;
  const Tensor* gradients = nullptr;
  bool any() const { return parameters || gradients; }
};
// Checks `copies` against an update's `params` and `grads` (the rule above) and returns how many leading
// elements they cover (0: none); throws dlbench::Error naming `op` otherwise.
int64_t check_compute_copies(const char* op, const Tensor& params, const Tensor& grads,
                             const ComputeCopies& copies);

struct SgdStep {
  float lr = 0.1f;
  float momentum = 0.9f;
  float weight_decay = 0.f;
  bool nesterov = false;
  float grad_scale = 1.f;  // gradients are multiplied by this first (1 / loss scale, 1 / ranks)
};

// The scalars of a training step that live in the backend's memory (device memory on a GPU), so that a step
// recorded once (a CUDA graph) still follows a changing learning rate and adapts its loss scale without the
// host: the host writes `lr` before each step (Backend::fill on a view of it, asynchronous); check_finite
// raises `overflow`; sgd_update reads all three and skips the whole update while `overflow` is set;
// update_loss_scale then adapts the scale and clears the flag. Nothing in a step waits for the host.
struct StepScalars {
  float lr = 0.f;
  float loss_scale = 1.f;  // the factor the loss gradient carries (FP16: dynamic)
  int32_t overflow = 0;    // set when a gradient holds Inf or NaN
  int32_t dynamic = 0;     // 1: dynamic loss scaling
  int32_t growth_interval = 2000;
  int32_t good_steps = 0;  // steps since the last overflow or growth
  int32_t skipped_steps = 0;
  int32_t unused = 0;
};

// One AdamW step (Backend::adamw_update; PyTorch's torch.optim.AdamW, GPT-2's settings by default).
// Gradient clipping by the global norm (PyTorch's clip_grad_norm_) is folded into the update: the caller
// first sums the squares of every gradient buffer into one f32 in backend memory (Backend::sum_of_squares
// on `grads` as they are stored, after any all-reduce) and points `grad_norm_squared` at it. Stored
// gradients are not yet multiplied by grad_scale (1 / ranks, 1 / micro-batches) and still carry the loss
// scale, so the update takes the true gradient's norm as
//   norm = sqrt(*grad_norm_squared) * grad_scale / loss_scale   (loss_scale: scalars->loss_scale, or 1)
// and clips by min(1, max_grad_norm / (norm + 1e-6)): the norm PyTorch would clip after GradScaler's
// unscale_. Reading the sum in backend memory lets a recorded step clip without the host.
struct AdamWStep {
  float lr = 0.f;  // ignored with StepScalars (scalars->lr)
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // decoupled; only on segments with weight_decay set (matrices)
  // t, from 1: the bias corrections 1 - beta^t, read from the host at the call (ignored with step_count).
  int64_t step = 1;
  // Backend memory (i32 [1]), or null: how many updates were applied so far, read when the op runs, so
  // that a recorded step (a CUDA graph) replays with a rising t. With it the update takes
  // t = *step_count + 1 and stores t there; a step skipped for an overflow (StepScalars) leaves it. One
  // counter per set of buffers, as PyTorch keeps one per parameter.
  int32_t* step_count = nullptr;
  float grad_scale = 1.f;     // gradients are multiplied by this first (1 / ranks, 1 / micro-batches)
  float max_grad_norm = 0.f;  // 0: no clipping
  // Backend memory: the sum of squares of the stored `grads` (before grad_scale and the loss scale).
  // Needed when max_grad_norm > 0, ignored otherwise.
  const float* grad_norm_squared = nullptr;
};

#if defined(__CUDACC__)
#define DLB_HOST_DEVICE __host__ __device__
#else
#define DLB_HOST_DEVICE
#endif

// Dynamic loss scaling, after the update of a step (one rule for every backend; CUDA runs it in a one-thread
// kernel): an overflow skipped the update, so halve the scale; after growth_interval good steps in a row,
// double it (the largest scale that does not overflow keeps the most FP16 gradient bits).
DLB_HOST_DEVICE inline void advance_loss_scale(StepScalars& s) {
  if (s.dynamic) {
    if (s.overflow) {
      s.loss_scale *= 0.5f;
      s.good_steps = 0;
      ++s.skipped_steps;
    } else if (++s.good_steps >= s.growth_interval) {
      s.loss_scale *= 2.f;
      s.good_steps = 0;
    }
  }
  s.overflow = 0;
}

// Work recorded once and replayed many times (a CUDA graph): the whole training step after warm-up.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  virtual void replay() = 0;  // asynchronous, like any op
};

// The memory of the device a backend runs on, as the device reports it now.
struct DeviceMemory {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  std::string description;  // for messages: "cuda:0 (NVIDIA H200)"
  std::string name;         // the device's model: "NVIDIA H200"
  std::string pci_bus_id;   // "0000:19:00.0": how the driver's NVML names the same device
};

class Backend : public StreamClock {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  // Free and total memory of the device; nullopt where no honest figure exists. The CPU backends return
  // nullopt: the host's memory is shared with every other process and the kernel overcommits, so a
  // figure could only refuse runs that would have worked.
  virtual std::optional<DeviceMemory> device_memory() { return std::nullopt; }

  // ---- memory ----
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr) = 0;
  // Host memory the device copies from fastest (page-locked on a GPU, so a copy is one DMA at the link's
  // rate); plain aligned memory on the CPU.
  virtual void* allocate_host(size_t bytes) { return ::operator new (bytes, std::align_val_t{64}); }
  virtual void deallocate_host(void* ptr) { ::operator delete (ptr, std::align_val_t{64}); }
  virtual void copy_to_device(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  void synchronize() override = 0;
  // Records the ops `body` issues (which must not synchronise with the host) for replay; nullptr where the
  // backend cannot (then the caller simply runs `body` each time). `body` is not executed by the capture.
  virtual std::unique_ptr<CapturedWork> capture(const std::function<void()>& body) { return nullptr; }
  // The stream every op is issued on (a cudaStream_t on a cuda backend), for code that orders its own
  // work against the backend's (the communicators); nullptr where ops run synchronously on the host.
  virtual void* native_stream() const { return nullptr; }

  // Holds the ops issued next on the compute stream back for about `microseconds` (a device backend), so
  // that ops issued meanwhile then run back to back, whatever the host's time per call: how --per-layer
  // times a layer's kernels and not its API calls. CPU backends run ops as they are called: nothing to hold.
  virtual void hold_queue(double microseconds) { (void)microseconds; }

  // ---- timeline (--trace) ----
  // A timestamp taken in stream order on `stream` (a native stream of this backend; null: the compute
  // stream); marker_ms reads it, after synchronize(), in milliseconds since the first marker. The default
  // (CPU backends, which run ops as they are called) is the host clock at the call.
  int64_t mark(void* stream = nullptr) override {
    host_markers_.push_back(std::chrono::steady_clock::now());
    return static_cast<int64_t>(host_markers_.size()) - 1;
  }
  double marker_ms(int64_t marker) override {
    return std::chrono::duration<double, std::milli>(host_markers_.at(static_cast<size_t>(marker)) -
                                                     host_markers_.front())
        .count();
  }

 private:
  std::vector<std::chrono::steady_clock::time_point> host_markers_;

 public:
  // How a plan runs, in words, for the per-layer profile ("fwd: IMPLICIT_PRECOMP_GEMM (tensor op) | ...");
  // empty where there is nothing to tell.
  virtual std::string describe(const ConvPlan&) const { return {}; }
  virtual std::string describe(const BatchNormPlan&) const { return {}; }

  // ---- convolution (no bias) ----
  virtual std::unique_ptr<ConvPlan> plan_conv(const ConvGeometry& geometry) = 0;
  // Estimate plans (conv and batch norm) only size memory: they are never run. Making one does no timed
  // search, no trial run and allocates nothing on the device, and the sizes it states (workspace_bytes,
  // held_bytes) are at least those of a run plan of the same geometry. Where planning is cheap and
  // allocates nothing, the run plan is its own estimate.
  virtual std::unique_ptr<ConvPlan> estimate_conv(const ConvGeometry& geometry) {
    return plan_conv(geometry);
  }
  // y[N,K,P,Q] = conv(x[N,C,H,W], w[K,C,R,S])
  virtual void conv_forward(const ConvPlan& plan, const Tensor& x, const Tensor& w, Tensor& y,
                            void* workspace) = 0;
  // dx (=|+=) conv_transpose(dy, w)
  virtual void conv_backward_data(const ConvPlan& plan, const Tensor& dy, const Tensor& w, Tensor& dx,
                                  Accumulate accumulate, void* workspace) = 0;
  // dw (=|+=) correlation of x with dy
  virtual void conv_backward_filter(const ConvPlan& plan, const Tensor& x, const Tensor& dy, Tensor& dw,
                                    Accumulate accumulate, void* workspace) = 0;

  // ---- batch normalisation, optionally fused with residual add and ReLU ----
  virtual std::unique_ptr<BatchNormPlan> plan_batchnorm(const BatchNormGeometry& geometry) = 0;
  virtual std::unique_ptr<BatchNormPlan> estimate_batchnorm(const BatchNormGeometry& geometry) {
    return plan_batchnorm(geometry);
  }
  // Training: normalise with batch statistics (from bn.input_sums where set); update running stats; save
  // mean and 1/sqrt(var+eps). `residual` is read only for BatchNormFusion::add_relu (pass nullptr otherwise).
  virtual void batchnorm_forward_training(const BatchNormPlan& plan, const BatchNormTensors& bn,
                                          const Tensor* residual, Tensor& y, void* workspace) = 0;
  virtual void batchnorm_forward_inference(const BatchNormPlan& plan, const BatchNormTensors& bn,
                                           const Tensor* residual, Tensor& y) = 0;
  // `y` is the forward output (it masks the ReLU; with BatchNormFusion::none it must not be read: the
  // memory plan may have reused its memory by then). bn.dx is overwritten; `dresidual` (add_relu only) is
  // overwritten with the gradient reaching the residual input; bn.dgamma/dbeta honour `accumulate`.
  virtual void batchnorm_backward(const BatchNormPlan& plan, const BatchNormTensors& bn, const Tensor& y,
                                  const Tensor& dy, Tensor* dresidual, Accumulate accumulate,
                                  void* workspace) = 0;

  // ---- which layer patterns run as one op (Fusion); false by default ----
  virtual bool fuses(const FusionCandidate& candidate) const {
    (void)candidate;
    return false;
  }

  // ---- a convolution's output statistics, made in its forward for the batch norm after it ----
  // A convolution planned with ConvGeometry::output_statistics may sum its output per channel in the same
  // pass: `sums` ([2, K] in the master dtype) receives sum(y) then sum(y^2) over N, H, W for each output
  // channel, and the batch norm that reads y takes its statistics from them (BatchNormTensors::input_sums)
  // instead of a pass over y. Called only where the plan says it does (ConvPlan::emits_statistics); the
  // default throws.
  virtual void conv_forward_with_statistics(const ConvPlan& plan, const Tensor& x, const Tensor& w, Tensor& y,
                                            Tensor& sums, void* workspace);

  // ---- a projection block's shortcut batch norm folded into the block's closing one ----
  // The closing batch norm (`plan`, fusion add_relu) computes y = relu(bn(x) + bn_s(s)), with s the
  // shortcut convolution's output and bn_s the shortcut's own batch norm (`shortcut_plan`, fusion none, s's
  // shape): bn_s(s), and the gradient that flows between the two, need never be stored. The backward
  // writes both inputs' gradients. These defaults compose the ops above through temporary buffers (the
  // same results, no saving); a backend with kernels for it says so in fuses (Fusion::shortcut_batchnorm).
  virtual void batchnorm_shortcut_forward_training(const BatchNormPlan& plan,
                                                   const BatchNormPlan& shortcut_plan,
                                                   const BatchNormTensors& main,
                                                   const BatchNormTensors& shortcut, Tensor& y,
                                                   void* workspace);
  virtual void batchnorm_shortcut_forward_inference(const BatchNormPlan& plan,
                                                    const BatchNormPlan& shortcut_plan,
                                                    const BatchNormTensors& main,
                                                    const BatchNormTensors& shortcut, Tensor& y);
  // `y` is the forward's output (it masks the ReLU).
  virtual void batchnorm_shortcut_backward(const BatchNormPlan& plan, const BatchNormPlan& shortcut_plan,
                                           const BatchNormTensors& main, const BatchNormTensors& shortcut,
                                           const Tensor& y, const Tensor& dy, Accumulate accumulate,
                                           void* workspace);

  // ---- a batch norm + ReLU and the max pool after it, as one op (the ImageNet stem) ----
  // y = maxpool(relu(bn(x))), with `plan` the batch norm's (fusion relu, x's shape) and `pool_plan` the max
  // pool's (over x's shape); `bn` names the batch norm's tensors (dx, dgamma, dbeta for the backward).
  // relu(bn(x)) is read by the pool alone, so a backend with kernels for the pair need store neither it nor
  // its gradient: the forward pools as it normalises, the backward gathers each element's gradient from dy
  // and the pool's saved positions. `saved` holds batchnorm_max_pool_saved_bytes() from the training forward
  // to the backward (and is at hand at inference). These defaults compose the single ops, keeping
  // relu(bn(x)) in `saved` — what the two layers would have kept — and its gradient in a temporary buffer:
  // the same results bit for bit, no saving. A backend with kernels says so in fuses
  // (Fusion::batchnorm_max_pool).
  virtual size_t batchnorm_max_pool_saved_bytes(const BatchNormPlan& plan, const PoolPlan& pool_plan) const;
  virtual void batchnorm_max_pool_forward_training(const BatchNormPlan& plan, const PoolPlan& pool_plan,
                                                   const BatchNormTensors& bn, Tensor& y, void* saved,
                                                   void* workspace);
  virtual void batchnorm_max_pool_forward_inference(const BatchNormPlan& plan, const PoolPlan& pool_plan,
                                                    const BatchNormTensors& bn, Tensor& y, void* saved);
  // `y` is the forward's output (the composed pool's backward may read it).
  virtual void batchnorm_max_pool_backward(const BatchNormPlan& plan, const PoolPlan& pool_plan,
                                           const BatchNormTensors& bn, const Tensor& y, const Tensor& dy,
                                           const void* saved, Accumulate accumulate, void* workspace);

  // ---- pooling ----
  virtual std::unique_ptr<PoolPlan> plan_pool(const PoolGeometry& geometry) = 0;
  // `saved` points to plan.saved_bytes() bytes kept until the backward (may be null at inference).
  virtual void pool_forward(const PoolPlan& plan, const Tensor& x, Tensor& y, void* saved) = 0;
  virtual void pool_backward(const PoolPlan& plan, const Tensor& x, const Tensor& y, const Tensor& dy,
                             const void* saved, Tensor& dx) = 0;

  // ---- ReLU ----
  virtual void relu_forward(const Tensor& x, Tensor& y) = 0;
  virtual void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) = 0;  // dx = dy * (y > 0)

  // ---- dense algebra (row-major) ----
  // c[m,n] = alpha * op(a) * op(b) + beta * c, op(a) is [m,k], op(b) is [k,n].
  virtual void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const Tensor& a,
                    const Tensor& b, float beta, Tensor& c) = 0;
  virtual void add_bias(Tensor& y, const Tensor& bias) = 0;  // y[N,F] += bias[F]
  virtual void bias_backward(const Tensor& dy, Tensor& dbias, Accumulate accumulate) = 0;  // sum over N
  // dbias[f] (+)= the sum over N of dy[n, first_column + f], f in [0, F), dy [N, K], dbias [F]: the bias
  // gradient of a column range (the q and v thirds of attention's qkv, Fusion::attention_qkv_bias).
  virtual void bias_backward_columns(const Tensor& dy, int64_t first_column, Tensor& dbias,
                                     Accumulate accumulate) = 0;

  // ---- dense layers (row-major: x [N, I], W [O, I], b [O], y [N, O]; one dtype) ----
  // y = act(x W^T + b) + residual, where `residual` ([N, O], may be null) is added after the activation;
  // with act gelu, `pre` ([N, O]) receives x W^T + b, what the backward needs (else it may be null).
  // The defaults compose gemm, add_bias, gelu_forward and add: a backend with GEMM epilogues overrides.
  // With `fp8` (bf16 tensors), the GEMM's operands are rounded to FP8 first (Fp8DenseScaling); the
  // defaults round them with fp8_round_trip and compose as without.
  // With input_act gelu the layer's input is gelu(x): x holds GELU's input. The default makes gelu(x) in
  // memory of its own first; a backend may take GELU on its way through x instead (CUDA in FP8, in the
  // pass that quantizes x), so that gelu(x) is never stored.
  virtual void dense_forward(const Tensor& x, const Tensor& w, const Tensor& b, DenseActivation act,
                             const Tensor* residual, Tensor& y, Tensor* pre,
                             const Fp8DenseScaling* fp8 = nullptr,
                             DenseActivation input_act = DenseActivation::none);
  // dx (+)= dy W, by `accumulate`. With act gelu the layer's input was gelu(pre), `pre` ([N, I]) given:
  // dx = (dy W) * gelu'(pre), the gradient of pre (overwritten; act gelu takes Accumulate::overwrite).
  virtual void dense_backward_data(const Tensor& dy, const Tensor& w, DenseActivation act, const Tensor* pre,
                                   Accumulate accumulate, Tensor& dx, const Fp8DenseScaling* fp8 = nullptr);
  // dW (+)= dy^T x and db (+)= the sum of dy over N, by `accumulate` (db null: made elsewhere,
  // Fusion::layernorm_dx_sums). With `fp8` the GEMM's dy and x are FP8; the bias gradient sums dy as it is.
  virtual void dense_backward_weights(const Tensor& dy, const Tensor& x, Accumulate accumulate, Tensor& dw,
                                      Tensor* db, const Fp8DenseScaling* fp8 = nullptr);
  // A dense layer's whole backward: dense_backward_weights (by `params`), then, where dx is given,
  // dense_backward_data (act, pre and `accumulate` as there). The default runs the two; a backend may share
  // work between them (CUDA in FP8 quantizes dy once for both GEMMs).
  // With output_act gelu, the layer's output y went through GELU, and dy is the gradient of gelu(y), y in
  // `output` ([N, O]): the layer's own output gradient is dy * gelu'(y). dy is then scratch: the default
  // takes GELU's gradient into it in place; a backend may instead take it on its way through dy (CUDA in
  // FP8, in the pass that quantizes dy) and leave dy as it was.
  struct DenseGradients {
    Accumulate params = Accumulate::overwrite;
    Tensor* dw = nullptr;
    Tensor* db = nullptr;  // null: the bias gradient is made elsewhere (Fusion::layernorm_dx_sums)
    Tensor* dx = nullptr;  // null: no input gradient
    Accumulate accumulate = Accumulate::overwrite;
    DenseActivation act = DenseActivation::none;
    const Tensor* pre = nullptr;
    DenseActivation output_act = DenseActivation::none;
    const Tensor* output = nullptr;
    // gelu: the layer's input was gelu(x), x holding GELU's input (dense_forward's input_act): the weight
    // gradient is dy^T gelu(x).
    DenseActivation input_act = DenseActivation::none;
  };
  virtual void dense_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const DenseGradients& g,
                              const Fp8DenseScaling* fp8 = nullptr);

  // ---- FP8 (delayed scaling) ----
  // Whether the dense ops' FP8 GEMMs multiply FP8 codes (and so can use codes kept from the forward,
  // Fp8DenseScaling::input_codes_transposed); false where they are BF16 GEMMs of round-tripped operands.
  virtual bool runs_fp8_gemms() const { return false; }
  // Whether a dense backward given x^T's kept codes reads them in place of x, so that a layer keeping them
  // needs no x after its forward (LinearLayer::backward_reads_input): a backend whose FP8 GEMMs take them.
  virtual bool reads_kept_codes_for_x() const { return runs_fp8_gemms(); }
  // y = fp8(x * *scale) / *scale in y's dtype (x's shape, f32/f16/bf16): x rounded to `format`'s nearest
  // value (ties to even, saturating; core/fp8), its largest |x| folded into *amax where amax is not null.
  // The default runs on the host (CPU backends); scale and amax are in the backend's memory.
  virtual void fp8_round_trip(const Tensor& x, Fp8Format format, const float* scale, float* amax, Tensor& y);
  // The end of a step's delayed scaling: each operand's amax enters its history (the oldest drops out) and
  // is zeroed; its scale becomes fp8_scale_from_amax of the history's maximum, inverse_scale 1 / scale.
  virtual void update_fp8_scales(const Fp8ScalingState& state);

  // ---- loss ----
  // logits [N,K] (any float dtype), labels i32 [N]; probs [N,K] and loss [1] f32 (f64 for f64 logits);
  // loss = mean over N of the
  // cross-entropy against the label-smoothed target (1 - s) * onehot + s / K.
  virtual void softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels,
                                             float label_smoothing, Tensor& probs, Tensor& loss) = 0;
  // dlogits = scale * loss_scale * (probs - target) / N, where loss_scale (optional) is read from the
  // backend's memory when the op runs (dynamic loss scaling inside a recorded step).
  virtual void softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels,
                                              float label_smoothing, float scale, Tensor& dlogits,
                                              const float* loss_scale = nullptr) = 0;

  // ---- elementwise and utilities ----
  virtual void fill(Tensor& x, double value) = 0;
  virtual void add(const Tensor& a, const Tensor& b, Tensor& y) = 0;  // y = a + b (same shape/layout)
  virtual void scale(Tensor& x, double alpha) = 0;                    // x *= alpha
  virtual void cast(const Tensor& src, Tensor& dst) = 0;              // same shape, any float dtypes
  // Sets flag (i32 [1]) to 1 if x holds an Inf or NaN; never clears it.
  virtual void check_finite(const Tensor& x, Tensor& flag) = 0;

  // ---- optimizer: one fused update over the flat FP32 buffers ----
  // g = grad * grad_scale + weight_decay * p (where the segment decays); v = momentum * v + g;
  // p -= lr * (nesterov ? g + momentum * v : v). (PyTorch's SGD with dampening 0.)
  // With `scalars` (in the backend's memory, read when the op runs): nothing happens while
  // scalars->overflow is set; otherwise lr is scalars->lr and the gradients are also divided by
  // scalars->loss_scale (step.lr is ignored). `copies`: see ComputeCopies.
  virtual void sgd_update(Tensor& params, const Tensor& grads, Tensor& momentum_buffer,
                          std::span<const ParamSegment> segments, const SgdStep& step,
                          const StepScalars* scalars = nullptr, const ComputeCopies& copies = {}) = 0;
  // advance_loss_scale(*scalars), in stream order after the update.
  virtual void update_loss_scale(StepScalars* scalars) = 0;

  // ---- transformer ops (GPT-2) ----
  // Activations are row-major, a token's features last ([B, T, C]; [N, C] with N = B * T). Parameters have
  // the activations' dtype. Statistics saved for a backward (layer norm's mean and rstd, attention's stats)
  // are f32 (f64 activations may have f64 ones). Gradients of parameters honour `accumulate`; gradients
  // of activations overwrite. The defaults throw dlbench::Error "<op> is not implemented on backend <name>".
  //
  // out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]; tokens i32 [B,T] in [0, V), wte [V,C], wpe [Tmax >= T, C].
  virtual void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& out);
  // dwte[tokens[b,t],:] += dout[b,t,:] (a token seen twice sums both); dwpe[t,:] += sum over b of
  // dout[b,t,:] (rows t >= T receive nothing). Accumulate::overwrite zeroes all of dwte and dwpe first.
  virtual void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dwte, Tensor& dwpe,
                                  Accumulate accumulate);
  // Each row of x [..., C] (N rows): y = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps)
  // (biased variance); mean and rstd [N] are saved for the backward.
  virtual void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                                 Tensor& y, Tensor& mean, Tensor& rstd);
  // layernorm_forward where an FP8 dense layer alone reads y (Fusion::layernorm_fp8_codes): instead of y,
  // y's E4M3 codes at that layer's scale for x (*scale), the codes its own pass over y would make (y
  // rounded to x's dtype first): codes [N, C], and codes_transposed [C, N] where not null; |y|'s maximum
  // folded into *amax where not null. The default throws: codes are for FP8 GEMMs, which it does not run.
  virtual void layernorm_forward_fp8(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                                     const float* scale, uint8_t* codes, uint8_t* codes_transposed,
                                     float* amax, Tensor& mean, Tensor& rstd);
  // dweight and dbias by `accumulate` (accumulation over micro-batches); dx by `dx_accumulate` (added to
  // where the input's gradient has another writer: a transformer's residual stream).
  virtual void layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                                  const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dweight,
                                  Tensor& dbias, Accumulate accumulate, Accumulate dx_accumulate);
  // layernorm_backward, and dx_sums [C] (by `accumulate`) the sums over the rows of dx as written (after
  // the add): the bias gradient of the dense layer whose output x is (Fusion::layernorm_dx_sums). The
  // default runs layernorm_backward, then bias_backward over dx.
  virtual void layernorm_backward_summing_dx(const Tensor& x, const Tensor& weight, const Tensor& mean,
                                             const Tensor& rstd, const Tensor& dy, Tensor& dx,
                                             Tensor& dweight, Tensor& dbias, Tensor& dx_sums,
                                             Accumulate accumulate, Accumulate dx_accumulate);
  // GELU, tanh form (GPT-2's): y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), any shape.
  virtual void gelu_forward(const Tensor& x, Tensor& y);
  virtual void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);  // dx = dy * gelu'(x)
  // Causal multi-head self-attention. qkv [B,T,3C]: q, k, v side by side in each row (columns [0,C),
  // [C,2C), [2C,3C)), head h on columns [h*d, (h+1)*d) of each, d = C / heads; out [B,T,C] with the heads
  // side by side. Position t attends to positions <= t with weights softmax(q.k * scale), scale 1/sqrt(d).
  // stats [B,heads,T]: each row's log-sum-exp of its scaled (masked) scores, what cuDNN's SDPA training
  // forward saves as Stats: with it the backward rebuilds the softmax exactly without storing [T, T].
  virtual void attention_forward(const Tensor& qkv, int64_t heads, Tensor& out, Tensor& stats);
  // dqkv [B,T,3C] overwritten; `out` and `stats` are the forward's.
  virtual void attention_backward(const Tensor& qkv, const Tensor& out, const Tensor& stats,
                                  const Tensor& dout, int64_t heads, Tensor& dqkv);
  // Softmax cross-entropy over a vocabulary padded to K = logits.dim(1) columns, of which the first
  // `valid_classes` are real: as softmax_cross_entropy_forward/backward over those columns alone, with
  // the padded columns absent (probability 0, gradient 0, never in the smoothing) and labels in
  // [0, valid_classes). The defaults run the unpadded ops where valid_classes == K.
  virtual void softmax_cross_entropy_padded_forward(const Tensor& logits, const Tensor& labels,
                                                    int64_t valid_classes, float label_smoothing,
                                                    Tensor& probs, Tensor& loss);
  virtual void softmax_cross_entropy_padded_backward(const Tensor& probs, const Tensor& labels,
                                                     int64_t valid_classes, float label_smoothing,
                                                     float scale, Tensor& dlogits,
                                                     const float* loss_scale = nullptr);
  // The language model's loss and its gradient in one pass over the logits (llm.c's fused classifier), so
  // that no [N, K] probabilities are stored: over logits [N, K] whose first `valid_classes` columns are
  // the vocabulary, each row's cross-entropy (as softmax_cross_entropy_padded_forward's) into row_loss
  // (f32 [N]) and their mean into loss ([1]; f64 for f64 logits); then, with `gradient_scale`, each row's
  // logits are overwritten by their gradient, gradient_scale * loss_scale * (softmax - target) / N (the
  // padded columns 0), a row read whole before it is written. loss_scale (optional) is read from the
  // backend's memory when the op runs. The logits' memory then holds the gradient the head's backward reads.
  virtual void softmax_cross_entropy_fused(Tensor& logits, const Tensor& labels, int64_t valid_classes,
                                           float label_smoothing, Tensor& row_loss, Tensor& loss,
                                           std::optional<float> gradient_scale,
                                           const float* loss_scale = nullptr);
  // out (f32 [1]) = (or +=, by `accumulate`: several buffers into one norm) the sum of squares of x (a
  // flat buffer of FP32 or of compute-dtype gradients), each square and the sum in f64: the global
  // gradient norm for AdamWStep::grad_norm_squared.
  virtual void sum_of_squares(const Tensor& x, Tensor& out, Accumulate accumulate);
  // AdamW over the flat FP32 buffers, per element of each segment (PyTorch's torch.optim.AdamW):
  //   g = grad * grad_scale * clip          (clip: see AdamWStep; 1 without clipping)
  //   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
  //   p -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * p)   (the decay where the segment decays)
  //   mhat = m / (1 - beta1^t), vhat = v / (1 - beta2^t).
  // With `scalars` (as sgd_update): nothing happens while scalars->overflow is set; otherwise lr is
  // scalars->lr and the gradients (and their norm) are also divided by scalars->loss_scale. `copies`: see
  // ComputeCopies.
  virtual void adamw_update(Tensor& params, const Tensor& grads, Tensor& m, Tensor& v,
                            std::span<const ParamSegment> segments, const AdamWStep& step,
                            const StepScalars* scalars = nullptr, const ComputeCopies& copies = {});
};

// Factories; `threads` = 0 means all cores.
std::unique_ptr<Backend> make_reference_backend();
std::unique_ptr<Backend> make_onednn_backend(int threads);

}  // namespace dlbench
