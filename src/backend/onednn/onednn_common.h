// Internals shared by the oneDNN backend's files: the backend class, checks, and small memory helpers.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>

#include "backend/backend.h"
#include "backend/onednn/onednn_backend.h"
#include "core/align.h"
#include "core/status.h"

namespace dlbench::onednn {

// Converts a oneDNN exception thrown while planning into a dlbench::Error naming what was being built.
#define DNNL_CHECK(expr, ...)                                                            \
  do {                                                                                   \
    try {                                                                                \
      expr;                                                                              \
    } catch (const dnnl::error& dnnl_error_) {                                           \
      ::dlbench::throw_check_failure(                                                    \
          __FILE__, __LINE__, #expr,                                                     \
          fmt::format("oneDNN: {} ({})", dnnl_error_.what(), fmt::format(__VA_ARGS__))); \
    }                                                                                    \
  } while (0)

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

inline void check_f32(const Tensor& t, const char* op) {
  DLB_CHECK(t.dtype() == DType::f32, "onednn backend: {} supports f32 only, got {}", op, t.describe());
}
inline void check_f32(DType dtype, const char* op) {
  DLB_CHECK(dtype == DType::f32, "onednn backend: {} supports f32 only, got {}", op, dtype_name(dtype));
}

// Below this many elements a loop runs on one thread: waking the team costs more than it saves.
inline constexpr int64_t kParallelThreshold = 1 << 14;

// exp(x) in f32 to about 1 ulp, written so that a `#pragma omp simd` loop vectorises it (the build targets
// plain x86-64, where GCC calls libm's scalar expf one element at a time; softmax rows over a vocabulary or
// T keys spend most of their time there). Cephes' expf: x = n ln2 + r with |r| <= ln2/2, a degree-7
// polynomial for e^r, 2^n put in the exponent bits. Below -87.33 it returns 0 (e^x is subnormal there),
// above 88.72 it saturates at e^88.72; NaN stays NaN. The range tests are bit masks, not branches or
// float selects: GCC vectorises neither (with -ftrapping-math, its default, a compare-and-select is not
// if-converted).
inline float select_bits(int32_t mask, float if_set, float if_clear) {
  return std::bit_cast<float>((std::bit_cast<int32_t>(if_set) & mask) |
                              (std::bit_cast<int32_t>(if_clear) & ~mask));
}
inline float exp_for_simd(float x) {
  constexpr float kLow = -87.33f, kHigh = 88.72f;
  const int32_t below = -static_cast<int32_t>(x < kLow), above = -static_cast<int32_t>(x > kHigh);
  const float clamped = select_bits(above, kHigh, select_bits(below, kLow, x));
  // x / ln2 rounded to the nearest integer n by the 1.5 * 2^23 trick: the sum's low mantissa bits hold n.
  constexpr float kRound = 12582912.f;
  const float shifted = clamped * 1.44269504f + kRound;
  const float n = shifted - kRound;
  const int32_t exponent = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kRound) + 127;
  const float r = (clamped - n * 0.693359375f) + n * 2.12194440e-4f;  // ln2 in two parts: r is exact
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  return select_bits(below, 0.f, p * std::bit_cast<float>(exponent << 23));
}

// The largest of x[0, n), n >= 1, in a loop that vectorises (select_bits, not std::max).
inline float max_of(const float* x, int64_t n) {
  float max = x[0];
#pragma omp simd reduction(max : max)
  for (int64_t i = 1; i < n; ++i) max = select_bits(-static_cast<int32_t>(x[i] > max), x[i], max);
  return max;
}

// The transformer ops take f32 alone (as every other op here): another dtype is the user's choice of
// precision reaching a backend that lacks it, so it is a UserError naming the way out.
inline void require_f32(const Tensor& t, const char* op, const char* name) {
  DLB_REQUIRE(t.dtype() == DType::f32,
              "the onednn backend runs {} in f32 only, but {} is {}: use --precision fp32 on the CPU", op,
              name, dtype_name(t.dtype()));
}

// Activations [N,C,H,W] in our layout, and conv weights [K,C,R,S] stored in the activations' layout.
inline tag activation_tag(Layout layout) { return layout == Layout::nchw ? tag::nchw : tag::nhwc; }
inline tag weights_tag(Layout layout) { return layout == Layout::nchw ? tag::oihw : tag::ohwi; }

inline dnnl::memory::desc f32_desc(const dnnl::memory::dims& dims, tag format) {
  return dnnl::memory::desc(dims, dt::f32, format);
}

// oneDNN's buffers and a workspace's slices start on 64 bytes (a cache line, AVX-512's loads).
inline constexpr size_t kOnednnAlignment = 64;

// Hands out 64-byte aligned slices of a workspace whose total is known at plan time.
class WorkspaceLayout {
 public:
  size_t reserve(size_t bytes) {
    size_t offset = total_;
    total_ += align_up(bytes, kOnednnAlignment);
    return offset;
  }
  size_t total() const { return total_; }

 private:
  size_t total_ = 0;
};

// Memory an op uses only while it runs (per-thread score blocks, saved statistics in oneDNN's form), kept
// from one call to the next: it grows to the largest request at the first steps and is never allocated
// again, so the timed loop allocates nothing.
class ScratchBuffer {
 public:
  float* floats(size_t count) {
    if (count > capacity_) {
      data_.reset(static_cast<float*>(std::aligned_alloc(64, align_up(count * sizeof(float), size_t{64}))));
      DLB_CHECK(data_ != nullptr, "onednn backend: out of memory allocating {} floats of scratch", count);
      capacity_ = count;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data_;
  size_t capacity_ = 0;
};

inline void* at_offset(void* base, size_t offset) { return static_cast<std::byte*>(base) + offset; }

// Wraps a caller's pointer without copying (a const_cast: oneDNN memory objects take void*).
inline dnnl::memory wrap(const dnnl::memory::desc& md, const dnnl::engine& engine, const void* data) {
  return dnnl::memory(md, engine, const_cast<void*>(data));
}

class OneDnnBackend final : public Backend {
 public:
  explicit OneDnnBackend(int threads);

  std::string name() const override { return "onednn"; }
  Device device() const override { return Device{DeviceKind::cpu, 0}; }
  int threads() const { return threads_; }
  const dnnl::engine& engine() const { return engine_; }
  dnnl::stream& stream() { return stream_; }

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr) override;
  void copy_to_device(void* dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void synchronize() override;

  std::unique_ptr<ConvPlan> plan_conv(const ConvGeometry& geometry) override;
  std::string describe(const ConvPlan& plan) const override {
    return dlbench::describe_onednn_conv_plan(plan);
  }
  void conv_forward(const ConvPlan& plan, const Tensor& x, const Tensor& w, Tensor& y,
                    void* workspace) override;
  void conv_backward_data(const ConvPlan& plan, const Tensor& dy, const Tensor& w, Tensor& dx,
                          Accumulate accumulate, void* workspace) override;
  void conv_backward_filter(const ConvPlan& plan, const Tensor& x, const Tensor& dy, Tensor& dw,
                            Accumulate accumulate, void* workspace) override;

  std::unique_ptr<BatchNormPlan> plan_batchnorm(const BatchNormGeometry& geometry) override;
  void batchnorm_forward_training(const BatchNormPlan& plan, const BatchNormTensors& bn,
                                  const Tensor* residual, Tensor& y, void* workspace) override;
  void batchnorm_forward_inference(const BatchNormPlan& plan, const BatchNormTensors& bn,
                                   const Tensor* residual, Tensor& y) override;
  void batchnorm_backward(const BatchNormPlan& plan, const BatchNormTensors& bn, const Tensor& y,
                          const Tensor& dy, Tensor* dresidual, Accumulate accumulate,
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

  // ---- transformer ops (f32; one file each: onednn_embedding, _layernorm, _gelu, _attention, _loss,
  // _adamw) ----
  void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& out) override;
  void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dwte, Tensor& dwpe,
                          Accumulate accumulate) override;
  void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y,
                         Tensor& mean, Tensor& rstd) override;
  void layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                          const Tensor& dy, Tensor& dx, Tensor& dweight, Tensor& dbias, Accumulate accumulate,
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

  // The transformer ops have no plans (their shapes arrive with each call), so their oneDNN primitives are
  // made at the first call of a shape and kept under a key naming the op and the shape.
  template <typename Make>
  const dnnl::primitive& cached_primitive(const std::string& key, Make make) {
    auto it = primitives_.find(key);
    if (it == primitives_.end()) it = primitives_.emplace(key, make()).first;
    return it->second;
  }
  ScratchBuffer& scratch() { return scratch_; }

 private:
  int threads_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::unordered_map<std::string, dnnl::primitive> primitives_;
  ScratchBuffer scratch_;
};

}  // namespace dlbench::onednn

namespace dlbench::onednn {

using ArgMap = std::unordered_map<int, dnnl::memory>;

// Adds the scratchpad argument when the primitive has one (user scratchpad mode).
inline ArgMap with_scratchpad(ArgMap args, const dnnl::memory& scratchpad) {
  if (scratchpad) args.emplace(DNNL_ARG_SCRATCHPAD, scratchpad);
  return args;
}

// The scratchpad slice of a workspace, or an empty memory when the primitive needs none.
inline dnnl::memory scratchpad_memory(const dnnl::engine& engine, void* workspace, size_t offset,
                                      size_t bytes) {
  if (bytes == 0) return dnnl::memory();
  DLB_CHECK(workspace != nullptr, "onednn backend: a workspace is required (plan.workspace_bytes())");
  return dnnl::memory(dnnl::memory::desc({static_cast<dnnl::memory::dim>(bytes)}, dnnl::memory::data_type::u8,
                                         dnnl::memory::format_tag::a),
                      engine, at_offset(workspace, offset));
}

}  // namespace dlbench::onednn
