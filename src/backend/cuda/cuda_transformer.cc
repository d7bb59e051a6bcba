// The CUDA backend's transformer ops (GPT-2) other than attention (attention.cc): their argument checks
// and the launches of dlbench's own kernels (embedding.cu, layernorm.cu, gelu.cu, loss.cu, optimizer.cu).
//
// Every op only enqueues work on the backend's stream: no host synchronisation, no allocation once the
// scratch memory has grown to the largest op's need (the first step), so a step that runs them can be
// recorded as one CUDA graph.
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/kernels.h"

namespace dlbench::cuda {
namespace {

// Activations and parameters of the transformer ops: f32, f16 or bf16.
void check_transformer_dtype(const char* op, const char* name, const Tensor& t) {
  check_device_tensor(op, name, t);
  DLB_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f16 || t.dtype() == DType::bf16,
            "{}: {} is {}, expected f32, f16 or bf16", op, name, t.describe());
}

// A device tensor of exactly `dims` and `dtype` (any layout tag: these tensors are row-major).
void check_tensor(const char* op, const char* name, const Tensor& t, std::vector<int64_t> dims, DType dtype) {
  check_activation(op, name, t, std::move(dims), dtype, t.layout());
}

}  // namespace

// ---- embedding ----

void CudaBackend::embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& out) {
  const char* op = "embedding_forward";
  check_device_tensor(op, "tokens", tokens);
  DLB_CHECK(tokens.rank() == 2 && tokens.dtype() == DType::i32, "{}: tokens is {}, expected i32[B, T]", op,
            tokens.describe());
  check_transformer_dtype(op, "wte", wte);
  DLB_CHECK(wte.rank() == 2, "{}: wte is {}, expected [V, C]", op, wte.describe());
  const int64_t B = tokens.dim(0), T = tokens.dim(1), V = wte.dim(0), C = wte.dim(1);
  check_device_tensor(op, "wpe", wpe);
  DLB_CHECK(wpe.rank() == 2 && wpe.dim(0) >= T && wpe.dim(1) == C && wpe.dtype() == wte.dtype(),
            "{}: wpe is {}, expected {}[>= {}, {}]", op, wpe.describe(), dtype_name(wte.dtype()), T, C);
  check_tensor(op, "out", out, {B, T, C}, wte.dtype());
  activate();
  cuda::embedding_forward(tokens.ptr<int32_t>(), wte.data(), wpe.data(), out.data(), B, T, C, V, wte.dtype(),
                          stream_);
}

void CudaBackend::embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dwte, Tensor& dwpe,
                                     Accumulate accumulate) {
  const char* op = "embedding_backward";
  check_device_tensor(op, "tokens", tokens);
  DLB_CHECK(tokens.rank() == 2 && tokens.dtype() == DType::i32, "{}: tokens is {}, expected i32[B, T]", op,
            tokens.describe());
  check_transformer_dtype(op, "dwte", dwte);
  DLB_CHECK(dwte.rank() == 2, "{}: dwte is {}, expected [V, C]", op, dwte.describe());
  const int64_t B = tokens.dim(0), T = tokens.dim(1), V = dwte.dim(0), C = dwte.dim(1);
  check_device_tensor(op, "dwpe", dwpe);
  DLB_CHECK(dwpe.rank() == 2 && dwpe.dim(0) >= T && dwpe.dim(1) == C && dwpe.dtype() == dwte.dtype(),
            "{}: dwpe is {}, expected {}[>= {}, {}]", op, dwpe.describe(), dtype_name(dwte.dtype()), T, C);
  check_tensor(op, "dout", dout, {B, T, C}, dwte.dtype());
  activate();
  void* work = scratch(cuda::embedding_backward_scratch_bytes(B * T, V), op);
  cuda::embedding_backward(tokens.ptr<int32_t>(), dout.data(), dwte.data(), dwpe.data(), B, T, C, V,
                           dwpe.dim(0), dwte.dtype(), accumulate == Accumulate::add, work, stream_);
}

// ---- layer norm ----

namespace {

// x [..., C]: returns the rows N; weight [C] in x's dtype, mean and rstd f32 [N].
int64_t check_layernorm(const char* op, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd) {
  check_transformer_dtype(op, "x", x);
  DLB_CHECK(x.rank() >= 2 && x.dims().back() > 0, "{}: x is {}, expected rows of features [..., C]", op,
            x.describe());
  const int64_t C = x.dims().back(), N = x.numel() / C;
  check_tensor(op, "weight", weight, {C}, x.dtype());
  check_tensor(op, "mean", mean, {N}, DType::f32);
  check_tensor(op, "rstd", rstd, {N}, DType::f32);
  return N;
}

}  // namespace

void CudaBackend::layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                                    Tensor& y, Tensor& mean, Tensor& rstd) {
  const char* op = "layernorm_forward";
  const int64_t N = check_layernorm(op, x, weight, mean, rstd), C = x.dims().back();
  check_same_shape(op, "weight", weight, "bias", bias);
  check_same_shape(op, "x", x, "y", y);
  DLB_CHECK(eps > 0, "{}: eps {} must be positive", op, eps);
  activate();
  cuda::layernorm_forward(x.data(), weight.data(), bias.data(), eps, y.data(), mean.ptr<float>(),
                          rstd.ptr<float>(), N, C, x.dtype(), stream_);
}

// The one kernel where it takes the rows (layernorm_forward_fp8_takes); else y in the scratch and the
// pass over it, which make the same codes.
void CudaBackend::layernorm_forward_fp8(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                                        const float* scale, uint8_t* codes, uint8_t* codes_transposed,
                                        float* amax, Tensor& mean, Tensor& rstd) {
  const char* op = "layernorm_forward_fp8";
  const int64_t N = check_layernorm(op, x, weight, mean, rstd), C = x.dims().back();
  check_same_shape(op, "weight", weight, "bias", bias);
  DLB_CHECK(eps > 0, "{}: eps {} must be positive", op, eps);
  DLB_CHECK(x.dtype() == DType::bf16 || x.dtype() == DType::f16,
            "{}: x is {}: FP8 codes are made of bf16 or f16", op, x.describe());
  DLB_CHECK(scale && codes, "{}: no scale or no codes", op);
  activate();
  if (cuda::layernorm_forward_fp8_takes(C, x.data(), weight.data(), bias.data(), codes)) {
    cuda::layernorm_forward_fp8(x.data(), weight.data(), bias.data(), eps, scale, codes, codes_transposed,
                                amax, mean.ptr<float>(), rstd.ptr<float>(), N, C, x.dtype(), stream_);
    return;
  }
  Tensor y(scratch(x.bytes(), op), x.dims(), x.dtype(), x.layout(), x.device());
  cuda::layernorm_forward(x.data(), weight.data(), bias.data(), eps, y.data(), mean.ptr<float>(),
                          rstd.ptr<float>(), N, C, x.dtype(), stream_);
  cuda::quantize_fp8(y.data(), y.dtype(), N, C, Fp8Format::e4m3, scale, codes, codes_transposed, amax,
                     stream_);
}

void CudaBackend::layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dweight,
                                     Tensor& dbias, Accumulate accumulate, Accumulate dx_accumulate) {
  run_layernorm_backward(x, weight, mean, rstd, dy, dx, dweight, dbias, nullptr, accumulate, dx_accumulate);
}

void CudaBackend::layernorm_backward_summing_dx(const Tensor& x, const Tensor& weight, const Tensor& mean,
                                                const Tensor& rstd, const Tensor& dy, Tensor& dx,
                                                Tensor& dweight, Tensor& dbias, Tensor& dx_sums,
                                                Accumulate accumulate, Accumulate dx_accumulate) {
  check_same_shape("layernorm_backward_summing_dx", "weight", weight, "dx_sums", dx_sums);
  run_layernorm_backward(x, weight, mean, rstd, dy, dx, dweight, dbias, &dx_sums, accumulate, dx_accumulate);
}

void CudaBackend::run_layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                                         const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dweight,
                                         Tensor& dbias, Tensor* dx_sums, Accumulate accumulate,
                                         Accumulate dx_accumulate) {
  const char* op = "layernorm_backward";
  const int64_t N = check_layernorm(op, x, weight, mean, rstd), C = x.dims().back();
  check_same_shape(op, "x", x, "dy", dy);
  check_same_shape(op, "x", x, "dx", dx);
  check_same_shape(op, "weight", weight, "dweight", dweight);
  check_same_shape(op, "weight", weight, "dbias", dbias);
  activate();
  void* work = scratch(cuda::layernorm_backward_scratch_bytes(N, C), op);
  cuda::layernorm_backward(x.data(), weight.data(), mean.ptr<float>(), rstd.ptr<float>(), dy.data(),
                           dx.data(), dweight.data(), dbias.data(), dx_sums ? dx_sums->data() : nullptr, N, C,
                           x.dtype(), accumulate == Accumulate::add, dx_accumulate == Accumulate::add, work,
                           stream_);
}

// ---- GELU ----

void CudaBackend::gelu_forward(const Tensor& x, Tensor& y) {
  check_transformer_dtype("gelu_forward", "x", x);
  check_same_shape("gelu_forward", "x", x, "y", y);
  activate();
  cuda::gelu_forward(x.data(), y.data(), x.dtype(), x.numel(), stream_);
}

void CudaBackend::gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  check_transformer_dtype("gelu_backward", "x", x);
  check_same_shape("gelu_backward", "x", x, "dy", dy);
  check_same_shape("gelu_backward", "x", x, "dx", dx);
  activate();
  cuda::gelu_backward(x.data(), dy.data(), dx.data(), x.dtype(), x.numel(), stream_);
}

// ---- the padded softmax cross-entropy ----

namespace {

// Logits [N, K] of a transformer dtype, `valid_classes` of their columns classes, a smoothing in [0, 1].
void check_logits(const char* op, const Tensor& logits, int64_t valid_classes, float label_smoothing) {
  check_transformer_dtype(op, "logits", logits);
  DLB_CHECK(logits.rank() == 2, "{}: logits is {}, expected [N, K]", op, logits.describe());
  DLB_CHECK(valid_classes > 0 && valid_classes <= logits.dim(1), "{}: {} valid classes for logits {}", op,
            valid_classes, logits.describe());
  DLB_CHECK(label_smoothing >= 0.f && label_smoothing <= 1.f, "{}: label_smoothing {} is outside [0, 1]", op,
            label_smoothing);
}

}  // namespace

void CudaBackend::softmax_cross_entropy_padded_forward(const Tensor& logits, const Tensor& labels,
                                                       int64_t valid_classes, float label_smoothing,
                                                       Tensor& probs, Tensor& loss) {
  const char* op = "softmax_cross_entropy_padded_forward";
  check_logits(op, logits, valid_classes, label_smoothing);
  const int64_t n = logits.dim(0), k = logits.dim(1);
  check_tensor(op, "labels", labels, {n}, DType::i32);
  check_tensor(op, "probs", probs, {n, k}, DType::f32);
  check_tensor(op, "loss", loss, {1}, DType::f32);
  DLB_CHECK(n > 0, "{}: no rows (the mean over no rows is undefined)", op);
  activate();
  cuda::softmax_cross_entropy_padded_forward(logits.data(), logits.dtype(), labels.ptr<int32_t>(), n, k,
                                             valid_classes, label_smoothing, probs.ptr<float>(),
                                             loss.ptr<float>(), stream_);
}

void CudaBackend::softmax_cross_entropy_padded_backward(const Tensor& probs, const Tensor& labels,
                                                        int64_t valid_classes, float label_smoothing,
                                                        float scale, Tensor& dlogits,
                                                        const float* loss_scale) {
  const char* op = "softmax_cross_entropy_padded_backward";
  check_device_tensor(op, "probs", probs);
  DLB_CHECK(probs.rank() == 2 && probs.dtype() == DType::f32, "{}: probs is {}, expected f32[N, K]", op,
            probs.describe());
  const int64_t n = probs.dim(0), k = probs.dim(1);
  DLB_CHECK(valid_classes > 0 && valid_classes <= k, "{}: {} valid classes for probs {}", op, valid_classes,
            probs.describe());
  DLB_CHECK(label_smoothing >= 0.f && label_smoothing <= 1.f, "{}: label_smoothing {} is outside [0, 1]", op,
            label_smoothing);
  check_tensor(op, "labels", labels, {n}, DType::i32);
  check_transformer_dtype(op, "dlogits", dlogits);
  DLB_CHECK(dlogits.dims() == probs.dims(), "{}: dlogits is {} but probs is {}", op, dlogits.describe(),
            probs.describe());
  activate();
  cuda::softmax_cross_entropy_padded_backward(probs.ptr<float>(), labels.ptr<int32_t>(), n, k, valid_classes,
                                              label_smoothing, scale, loss_scale, dlogits.data(),
                                              dlogits.dtype(), stream_);
}

void CudaBackend::softmax_cross_entropy_fused(Tensor& logits, const Tensor& labels, int64_t valid_classes,
                                              float label_smoothing, Tensor& row_loss, Tensor& loss,
                                              std::optional<float> gradient_scale, const float* loss_scale) {
  const char* op = "softmax_cross_entropy_fused";
  check_logits(op, logits, valid_classes, label_smoothing);
  const int64_t n = logits.dim(0), k = logits.dim(1);
  DLB_CHECK(n > 0, "{}: no rows (the mean over no rows is undefined)", op);
  check_tensor(op, "labels", labels, {n}, DType::i32);
  check_tensor(op, "row_loss", row_loss, {n}, DType::f32);
  check_tensor(op, "loss", loss, {1}, logits.dtype() == DType::f64 ? DType::f64 : DType::f32);
  activate();
  cuda::softmax_cross_entropy_fused(logits.data(), logits.dtype(), labels.ptr<int32_t>(), n, k, valid_classes,
                                    label_smoothing, row_loss.ptr<float>(), loss.data(),
                                    gradient_scale.has_value(), gradient_scale.value_or(0.f), loss_scale,
                                    stream_);
}

// ---- the gradient norm and AdamW ----

void CudaBackend::sum_of_squares(const Tensor& x, Tensor& out, Accumulate accumulate) {
  const char* op = "sum_of_squares";
  check_device_tensor(op, "x", x);
  DLB_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::f16 || x.dtype() == DType::bf16,
            "{}: x is {}, expected an f32, f16 or bf16 buffer", op, x.describe());
  check_tensor(op, "out", out, {1}, DType::f32);
  activate();
  void* work = scratch(cuda::sum_of_squares_scratch_bytes(), op);
  cuda::sum_of_squares(x.data(), x.dtype(), x.numel(), out.ptr<float>(), accumulate == Accumulate::add, work,
                       stream_);
}

void CudaBackend::adamw_update(Tensor& params, const Tensor& grads, Tensor& m, Tensor& v,
                               std::span<const ParamSegment> segments, const AdamWStep& step,
                               const StepScalars* scalars, const ComputeCopies& copies) {
  const char* op = "adamw_update";
  check_device_tensor(op, "params", params);
  DLB_CHECK(params.rank() == 1 && params.dtype() == DType::f32,
            "{}: params is {}, expected a flat f32 buffer (the FP32 masters)", op, params.describe());
  const UpdateCopies raw_copies = update_copies(op, params, grads, copies);
  check_same_shape(op, "params", params, "m", m);
  check_same_shape(op, "params", params, "v", v);
  DLB_CHECK(step.step_count || step.step >= 1, "{}: step {} must count from 1", op, step.step);
  DLB_CHECK(step.max_grad_norm >= 0, "{}: max_grad_norm {} is negative", op, step.max_grad_norm);
  DLB_CHECK(step.max_grad_norm == 0 || step.grad_norm_squared,
            "{}: clipping to {} needs grad_norm_squared (the gradients' sum of squares)", op,
            step.max_grad_norm);
  activate();
  const ParamSegment* table = segments.empty() ? nullptr : segment_table(op, params, segments);
  cuda::adamw_update(params.ptr<float>(), grads.ptr<float>(), m.ptr<float>(), v.ptr<float>(), table,
                     static_cast<int>(segments.size()), step, scalars, raw_copies, stream_);
}

}  // namespace dlbench::cuda
