// The reference backend: the test oracle every other backend is compared against.
//
// Plain loops over logical indices that read like the math, accumulating in double. It is never fast and
// never needs to be; what matters is that each op is obviously right. Single-threaded, host memory.
//
// Compute dtypes are f32 and f64 (every op is a template over the two); elementwise utilities (fill, add,
// scale, cast, check_finite) also take f16 and bf16, converted with round-to-nearest-even.
//
// Beyond the contract of backend.h (a superset, so that gradient checks can run entirely in double):
//   * softmax_cross_entropy accepts f64 probs and loss as well as f32;
//   * the transformer ops' f32 statistics and scalars (layer norm's mean and rstd, attention's stats,
//     sum_of_squares' out) may be f64, and the AdamW buffers f64, so a gradient check stays in double;
//   * plans of any backend are accepted: only their geometry is read.
// Choices the contract leaves open:
//   * max-pool backward recomputes the argmax from x (saved_bytes() == 0; `saved` is ignored);
//   * gemm with beta == 0 does not read c (BLAS convention: NaN in uninitialised memory does not leak);
//   * sgd_update updates only the elements covered by segments (segments must not overlap).
#pragma once

#include "backend/backend.h"

namespace dlbench {

class ReferenceBackend : public Backend {
 public:
  std::string name() const override { return "reference"; }
  Device device() const override { return Device{}; }

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr) override;
  void copy_to_device(void* dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void synchronize() override {}

  std::unique_ptr<ConvPlan> plan_conv(const ConvGeometry& geometry) override;
  void conv_forward(const ConvPlan& plan, const Tensor& x, const Tensor& w, Tensor& y,
                    void* workspace) override;
  // Where the plan asks (ConvGeometry::output_statistics, its plans' emits_statistics): the forward, then
  // its output's sums in double.
  void conv_forward_with_statistics(const ConvPlan& plan, const Tensor& x, const Tensor& w, Tensor& y,
                                    Tensor& sums, void* workspace) override;
  void conv_backward_data(const ConvPlan& plan, const Tensor& dy, const Tensor& w, Tensor& dx,
                          Accumulate accumulate, void* workspace) override;
  void conv_backward_filter(const ConvPlan& plan, const Tensor& x, const Tensor& dy, Tensor& dw,
                            Accumulate accumulate, void* workspace) override;

  std::unique_ptr<BatchNormPlan> plan_batchnorm(const BatchNormGeometry& geometry) override;
  // Takes the input's sums where given (in double, as the convolution made them).
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

  // ---- transformer ops: f32 and f64 (f64 activations take f64 statistics and scalars too) ----
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
};

}  // namespace dlbench
