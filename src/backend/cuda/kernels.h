// Launchers of dlbench's own CUDA kernels (kernels.cu and its siblings): everything the CUDA backend does
// not hand to cuDNN or cuBLAS. Plain C++ signatures, so .cc files include this without nvcc.
//
// All launches are asynchronous on `stream` and never synchronise; `n` counts elements. Float dtypes are
// f32, f16 and bf16 (f64 where a kernel says so). Every launcher checks its launch in debug builds.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/backend.h"
#include "core/fp8.h"

namespace dlbench::cuda {

void fill(void* x, DType dtype, int64_t n, double value, cudaStream_t stream);
void add(const void* a, const void* b, void* y, DType dtype, int64_t n, cudaStream_t stream);  // y = a + b
void scale(void* x, DType dtype, int64_t n, double alpha, cudaStream_t stream);                // x *= alpha
// dst = src converted (round to nearest even); any pair of f32/f16/bf16/f64.
void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n, cudaStream_t stream);

void relu_forward(const void* x, void* y, DType dtype, int64_t n, cudaStream_t stream);
void relu_backward(const void* y, const void* dy, void* dx, DType dtype, int64_t n, cudaStream_t stream);

// y[rows, cols] += bias[cols] (bias f32 or the dtype of y).
void add_bias(void* y, DType y_dtype, const void* bias, DType bias_dtype, int64_t rows, int64_t cols,
              cudaStream_t stream);
// dbias[cols] (=|+=) sum over rows of dy[rows, cols]; accumulated in f32 (f64 for f64), partial sums of
// row chunks in `scratch` (bias_backward_scratch_bytes), then added in a fixed order.
size_t bias_backward_scratch_bytes(int64_t rows, int64_t cols, DType dy_dtype);
void bias_backward(const void* dy, DType dy_dtype, void* dbias, DType dbias_dtype, int64_t rows, int64_t cols,
                   bool accumulate, void* scratch, cudaStream_t stream);
// bias_backward over columns [0, cols) of rows `row_stride` elements apart (row_stride >= cols): the bias
// gradient of a column range of a wider matrix (attention's q third of qkv's gradient). The same scratch.
void bias_backward_columns(const void* dy, DType dy_dtype, int64_t row_stride, void* dbias, DType dbias_dtype,
                           int64_t rows, int64_t cols, bool accumulate, void* scratch, cudaStream_t stream);

// probs[n, k] f32 = softmax(logits); loss[0] f32 = mean over rows of the cross-entropy against the
// label-smoothed target (1 - s) * onehot + s / k. Labels must be in [0, k) (the data pipeline checks).
void softmax_cross_entropy_forward(const void* logits, DType logits_dtype, const int32_t* labels, int64_t n,
                                   int64_t k, float label_smoothing, float* probs, float* loss,
                                   cudaStream_t stream);
// dlogits = scale * loss_scale * (probs - target) / n, written in dlogits_dtype; loss_scale (device memory,
// read by the kernel) may be null.
void softmax_cross_entropy_backward(const float* probs, const int32_t* labels, int64_t n, int64_t k,
                                    float label_smoothing, float scale, const float* loss_scale,
                                    void* dlogits, DType dlogits_dtype, cudaStream_t stream);

// The padded softmax cross-entropy (Backend::softmax_cross_entropy_padded_*): rows of k columns of which
// the first `valid` are classes; the padded columns get probability 0 and gradient 0 and take no part in
// the smoothing (s / valid). Labels must be in [0, valid). The unpadded launchers above are valid == k.
void softmax_cross_entropy_padded_forward(const void* logits, DType logits_dtype, const int32_t* labels,
                                          int64_t n, int64_t k, int64_t valid, float label_smoothing,
                                          float* probs, float* loss, cudaStream_t stream);
void softmax_cross_entropy_padded_backward(const float* probs, const int32_t* labels, int64_t n, int64_t k,
                                           int64_t valid, float label_smoothing, float scale,
                                           const float* loss_scale, void* dlogits, DType dlogits_dtype,
                                           cudaStream_t stream);
// Backend::softmax_cross_entropy_fused: rows of ld columns of which the first k are classes; row_loss f32
// [n], loss [1] (f64 for f64 logits); with write_gradient the logits are overwritten by
// scale * loss_scale * (softmax - target) / n (0 in the padded columns).
void softmax_cross_entropy_fused(void* logits, DType logits_dtype, const int32_t* labels, int64_t n,
                                 int64_t ld, int64_t k, float label_smoothing, float* row_loss, void* loss,
                                 bool write_gradient, float scale, const float* loss_scale,
                                 cudaStream_t stream);

// ---- transformer ops (GPT-2): the semantics of Backend's ops of the same names ----

// out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]; rows = B * T tokens, all tensors in `dtype`.
void embedding_forward(const int32_t* tokens, const void* wte, const void* wpe, void* out, int64_t batch,
                       int64_t time, int64_t channels, int64_t vocabulary, DType dtype, cudaStream_t stream);
// The deterministic scatter-add of embedding_backward: the tokens' positions sorted by token (a stable
// radix sort, so each token's positions stay in ascending order), then one block per vocabulary row sums
// its positions' rows of dout in that order (rows no token names become 0 when overwriting). `scratch` holds
// embedding_backward_scratch_bytes(batch * time, vocabulary).
size_t embedding_backward_scratch_bytes(int64_t tokens, int64_t vocabulary);
void embedding_backward(const int32_t* tokens, const void* dout, void* dwte, void* dwpe, int64_t batch,
                        int64_t time, int64_t channels, int64_t vocabulary, int64_t positions, DType dtype,
                        bool accumulate, void* scratch, cudaStream_t stream);

// Layer norm over rows of `channels` (x, y, weight, bias in `dtype`; mean and rstd f32 [rows]).
void layernorm_forward(const void* x, const void* weight, const void* bias, float eps, void* y, float* mean,
                       float* rstd, int64_t rows, int64_t channels, DType dtype, cudaStream_t stream);
// The forward of a layer norm whose output an FP8 dense layer alone reads: y (bf16 or f16, rounded as
// layernorm_forward rounds it) times *scale as E4M3 codes, those quantize_fp8 would make of y, into codes
// [rows, channels] and codes_transposed [channels, rows] where given (not null), |y|'s maximum into *amax
// where given; y itself is not written. Takes what layernorm_forward_fp8_takes says.
bool layernorm_forward_fp8_takes(int64_t channels, const void* x, const void* weight, const void* bias,
                                 const uint8_t* codes);
void layernorm_forward_fp8(const void* x, const void* weight, const void* bias, float eps, const float* scale,
                           uint8_t* codes, uint8_t* codes_transposed, float* amax, float* mean, float* rstd,
                           int64_t rows, int64_t channels, DType dtype, cudaStream_t stream);
// dx overwritten (or added to: accumulate_dx); dweight and dbias reduced over the rows deterministically:
// per-block partial sums of row ranges into `scratch` (layernorm_backward_scratch_bytes), then fixed-order
// sums per channel. dx_sums (null: none) [channels] gets the sums over the rows of dx as written, as
// dweight does (accumulate): the bias gradient of the dense layer whose output x is.
size_t layernorm_backward_scratch_bytes(int64_t rows, int64_t channels);
void layernorm_backward(const void* x, const void* weight, const float* mean, const float* rstd,
                        const void* dy, void* dx, void* dweight, void* dbias, void* dx_sums, int64_t rows,
                        int64_t channels, DType dtype, bool accumulate, bool accumulate_dx, void* scratch,
                        cudaStream_t stream);

// GELU, tanh form: y = gelu(x); dx = dy * gelu'(x).
void gelu_forward(const void* x, void* y, DType dtype, int64_t n, cudaStream_t stream);
void gelu_backward(const void* x, const void* dy, void* dx, DType dtype, int64_t n, cudaStream_t stream);

// Causal self-attention on dlbench's own kernels (attention_kernel.cu), any float dtype and head size up to
// kOwnAttentionMaxHead: what runs where cuDNN's fused attention refuses an f16/bf16 shape. qkv
// [B, T, 3C], out [B, T, C], stats f32 [B, heads, T] (natural-log log-sum-exp of the scaled scores).
inline constexpr int64_t kOwnAttentionMaxHead = 256;
void attention_forward(const void* qkv, void* out, float* stats, int64_t batch, int64_t time,
                       int64_t channels, int64_t heads, DType dtype, cudaStream_t stream);
// dqkv overwritten (no atomics: one warp per query row for dq, one per key row for dk and dv).
void attention_backward(const void* qkv, const void* out, const float* stats, const void* dout, void* dqkv,
                        int64_t batch, int64_t time, int64_t channels, int64_t heads, DType dtype,
                        cudaStream_t stream);

// The row kernels of f32 attention from GEMMs (attention_rows.cu), over one sequence's scores S [heads, T,
// T] (row h * T + t: query t against every key; keys past t are causal-masked and written 0):
//   causal_softmax_rows           S (scaled) -> P in place; stats [heads, T] = max + log(sum of exp)
//   causal_probabilities          S (scaled) -> P = exp(S - stats) in place, from the forward's stats
//   causal_softmax_backward_rows  dp (dO V^T) -> dS = P * (dp - D) in place, D = the row's sum over the
//                                 head's channels of dout * out (out, dout [T, channels] of the sequence)
void causal_softmax_rows(float* scores, float* stats, int64_t heads, int64_t time, cudaStream_t stream);
void causal_probabilities(float* scores, const float* stats, int64_t heads, int64_t time,
                          cudaStream_t stream);
void causal_softmax_backward_rows(const float* probs, float* dp, const float* out, const float* dout,
                                  int64_t heads, int64_t time, int64_t channels, cudaStream_t stream);

// out[0] (=|+=) the sum of squares of x[0..n) (f32, f16 or bf16), in f64 partial sums per block
// (`scratch`, sum_of_squares_scratch_bytes()) added in a fixed order: the same bits every run, and the same
// for FP16/BF16 values as for their exact FP32 widening.
size_t sum_of_squares_scratch_bytes();
void sum_of_squares(const void* x, DType dtype, int64_t n, float* out, bool accumulate, void* scratch,
                    cudaStream_t stream);

// An optimizer update's compute copies (Backend's ComputeCopies) as the kernels take them: elements
// [0, count) have copies of `dtype` (f16 or bf16); `parameters` (written after the update) and
// `gradients` (read instead of the f32 gradients) are null where the update does neither.
struct UpdateCopies {
  void* parameters = nullptr;
  const void* gradients = nullptr;
  int64_t count = 0;
  DType dtype = DType::f32;
};
// Backend::adamw_update over f32 buffers, all segments in one launch (as sgd_update). Everything a
// recorded step must see change is read in device memory when the kernel runs: scalars (lr, loss scale,
// overflow; may be null), step.grad_norm_squared and step.step_count (may be null: step.step is t), which a
// second one-thread kernel advances after the update unless the step overflowed.
void adamw_update(float* params, const float* grads, float* m, float* v, const ParamSegment* segments,
                  int count, const AdamWStep& step, const StepScalars* scalars, const UpdateCopies& copies,
                  cudaStream_t stream);

// Space-to-depth by 2 (space_to_depth.cu): dst[n, i, j, (bh * 2 + bw) * c + k] = src[n, 2i + bh - off_h,
// 2j + bw - off_w, k] over the blocks_h x blocks_w x block_channels result, zero outside src and past 4c
// channels. depth_to_space2 is its transpose: each of src's pixels (the [batch, h, w, c] dst) takes (or with
// `accumulate` adds) its element of the blocks' tensor `src`.
void space_to_depth2(const void* src, int64_t batch, int64_t h, int64_t w, int64_t c, int64_t off_h,
                     int64_t off_w, void* dst, int64_t blocks_h, int64_t blocks_w, int64_t block_channels,
                     DType dtype, cudaStream_t stream);
void depth_to_space2(const void* src, int64_t blocks_h, int64_t blocks_w, int64_t block_channels,
                     int64_t batch, int64_t h, int64_t w, int64_t c, int64_t off_h, int64_t off_w, void* dst,
                     DType dtype, bool accumulate, cudaStream_t stream);

// NHWC pixels at a stride (a 1x1 convolution of stride s is the stride-1 one of those pixels).
// gather_strided_pixels: dst[n, h, w, c] = src[n, h * stride, w * stride, c] for the out_h x out_w pixels,
// out = (in - 1) / stride + 1. scatter_strided_pixels, its gradient: dst (in_h x in_w) gets src's value at
// the pixels whose h and w are multiples of the stride and 0 elsewhere, or with `accumulate` adds src there
// and leaves the others.
void gather_strided_pixels(const void* src, int64_t batch, int64_t in_h, int64_t in_w, int64_t channels,
                           int64_t stride, void* dst, DType dtype, cudaStream_t stream);
void scatter_strided_pixels(const void* src, int64_t batch, int64_t in_h, int64_t in_w, int64_t channels,
                            int64_t stride, void* dst, DType dtype, bool accumulate, cudaStream_t stream);

// What a quantization applies to each value of x on its way (GELU's, where a dense layer's operand is an
// activation's input or output gradient the layer before left as it was): the value is rounded to x's dtype
// before it is quantized, summed and its amax taken, exactly as the separate pass (gelu_forward,
// gelu_backward) would have stored it: the same codes as that pass followed by the quantization.
struct Fp8Prologue {
  enum class Kind { none, gelu, gelu_gradient };
  Kind kind = Kind::none;
  const void* gelu_input = nullptr;  // gelu_gradient: x is the gradient of gelu(gelu_input), of x's shape
};

// FP8 quantization of a GEMM operand for delayed per-tensor scaling (fp8_quantize.cu): x [rows, cols] (f32,
// f16 or bf16), after `prologue`, times *scale, rounded to `format` as core/fp8's float_to_fp8 rounds
// (nearest even, saturating) into q [rows, cols] where given, into q_transposed [cols, rows] where given,
// and the largest |x| folded into *amax (an atomic maximum; NaN ignored). scale and amax live in device
// memory, so a recorded step follows their changes.
void quantize_fp8(const void* x, DType dtype, int64_t rows, int64_t cols, Fp8Format format,
                  const float* scale, uint8_t* q, uint8_t* q_transposed, float* amax, cudaStream_t stream,
                  const Fp8Prologue& prologue = {});

// quantize_fp8 that also sums x's columns (after `prologue`), as a dense layer's bias gradient sums its
// output gradient, in the same pass over x: each tile of rows writes its columns' f32 sums into
// `column_partials` (row-major, room for fp8_column_partial_rows(rows) rows); returns the rows it wrote.
// sum_column_partials then adds them in a fixed order into sums (cols elements, f32, f16 or bf16; added
// to where `accumulate`): no atomics, the same bits every run.
int64_t quantize_fp8_summing_columns(const void* x, DType dtype, int64_t rows, int64_t cols, Fp8Format format,
                                     const float* scale, uint8_t* q, uint8_t* q_transposed, float* amax,
                                     float* column_partials, cudaStream_t stream,
                                     const Fp8Prologue& prologue = {});
inline int64_t fp8_column_partial_rows(int64_t rows) { return (rows + 31) / 32; }  // the smallest tile: 32
void sum_column_partials(const float* partials, int64_t partial_rows, int64_t cols, void* sums,
                         DType sums_dtype, bool accumulate, cudaStream_t stream);

// Delayed scaling at the end of a step, for `count` operands (fp8_quantize.cu): operand i's amax becomes
// the newest of the `length` entries of its history (histories[i * length], newest first; the oldest
// drops out) and is zeroed, and scales[i] = fp8_scale_from_amax(max of the history, formats[i], margin,
// scales[i]) and inverse_scales[i * kFp8InverseScaleStride] = 1 / scales[i]. Everything in device memory.
void update_fp8_scales(float* amaxes, float* histories, int length, float* scales, float* inverse_scales,
                       const Fp8Format* formats, int count, int margin, cudaStream_t stream);
// y[i] = fp8(x[i] * *scale) / *scale in y_dtype (Backend::fp8_round_trip), max |x| folded into *amax
// where amax is not null. x and y f32, f16 or bf16.
void fp8_round_trip(const void* x, DType x_dtype, int64_t n, Fp8Format format, const float* scale, void* y,
                    DType y_dtype, float* amax, cudaStream_t stream);

// Holds `stream` for `microseconds` (one thread polling the GPU's global timer): work queued behind it then
// runs back to back, whatever the host's time per call (the convolution search times calls this way).
void hold_stream(double microseconds, cudaStream_t stream);

// Sets *flag = 1 if any of x[0..n) is Inf or NaN; never clears it.
void check_finite(const void* x, DType dtype, int64_t n, int32_t* flag, cudaStream_t stream);

// The fused SGD update of Backend::sgd_update over f32 buffers, all segments in one launch.
// `segments` points to `count` ParamSegment in device memory; `scalars` (device memory) may be null.
void sgd_update(float* params, const float* grads, float* momentum, const ParamSegment* segments, int count,
                const SgdStep& step, const StepScalars* scalars, const UpdateCopies& copies,
                cudaStream_t stream);
// advance_loss_scale(*scalars) in one thread (scalars in device memory).
void update_loss_scale(StepScalars* scalars, cudaStream_t stream);

// Max pooling of NHWC tensors (max_pool.cu). x is [n, h, w, c], y and dy [n, out_h, out_w, c]. `argmax`
// holds one byte per output element: where in its window the maximum is (r * kernel_w + s), written by the
// forward when not null and read by the backward when not null (the backward finds it again from x
// otherwise). The backward overwrites dx.
struct MaxPoolShape {
  int64_t n, c, h, w, out_h, out_w, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
};
bool max_pool_positions_fit(const MaxPoolShape& shape);  // a window's positions fit one byte
void max_pool_forward_nhwc(const void* x, void* y, uint8_t* argmax, DType dtype, const MaxPoolShape& shape,
                           cudaStream_t stream);
void max_pool_backward_nhwc(const void* x, const uint8_t* argmax, const void* dy, void* dx, DType dtype,
                            const MaxPoolShape& shape, cudaStream_t stream);

// Global average pooling of NHWC tensors ([n, pixels, channels] -> [n, channels]; avg_pool.cu): the
// forward's mean per image and channel, the backward's dy / pixels to every pixel.
void global_avg_pool_forward_nhwc(const void* x, void* y, DType dtype, int64_t n, int64_t pixels,
                                  int64_t channels, cudaStream_t stream);
void global_avg_pool_backward_nhwc(const void* dy, void* dx, DType dtype, int64_t n, int64_t pixels,
                                   int64_t channels, cudaStream_t stream);

// Batch-norm training on dlbench's own kernels (batchnorm_own.cu, with the NCHW and NHWC passes in
// batchnorm_nchw.cu and batchnorm_nhwc.cu): the semantics of Backend's batchnorm_forward_training /
// batchnorm_backward, fusion included, for f32/f16/bf16 data with f32 parameters and statistics. Each
// channel's N * H * W values are reduced in `splits` ranges of `chunk` values (NCHW: a multiple of 4 of
// the channel's values; NHWC: rows), one partial each; the partials and per-channel coefficients live in
// the workspace (own_batchnorm_workspace_bytes), which the forward and the backward each use only during
// the call. Each layer also holds own_batchnorm_held_bytes of its own (`held`): the forward's
// coefficients, which the backward of a ReLU reads to recompute y from x instead of reading y. The
// launch sizes the splits for the current device.
struct OwnBatchNormLaunch {
  BatchNormGeometry geometry;
  int64_t splits = 1, chunk = 0;
};
OwnBatchNormLaunch own_batchnorm_launch(const BatchNormGeometry& geometry);
size_t own_batchnorm_workspace_bytes(const OwnBatchNormLaunch& launch);
size_t own_batchnorm_held_bytes(const OwnBatchNormLaunch& launch);
// `residual` is read for add_relu only (else null). y may alias x.
void own_batchnorm_forward_training(const OwnBatchNormLaunch& launch, const void* x, const void* residual,
                                    const float* gamma, const float* beta, void* y, float* running_mean,
                                    float* running_var, float* saved_mean, float* saved_inv_std,
                                    void* workspace, void* held, cudaStream_t stream,
                                    const float* input_sums = nullptr);
// y is read with add_relu only; dresidual (add_relu only, else null) is overwritten with the masked dy; dx
// is overwritten; dgamma/dbeta are added to when `accumulate`. `held` is what the layer's last training
// forward left there.
void own_batchnorm_backward(const OwnBatchNormLaunch& launch, const void* x, const void* y, const void* dy,
                            const float* gamma, const float* saved_mean, const float* saved_inv_std, void* dx,
                            void* dresidual, float* dgamma, float* dbeta, bool accumulate, void* workspace,
                            const void* held, cudaStream_t stream);

// A projection block's shortcut batch norm folded into the block's closing one
// (Backend::batchnorm_shortcut_*; NHWC only): y = relu(bn(x) + bn_s(s)) from each side's statistics, and both
// inputs' gradients. Each side is one batch norm's launch, tensors and held memory (the closing one's
// add_relu, the shortcut's none); the workspace holds both sides' workspaces one after the other
// (own_batchnorm_workspace_bytes is a multiple of 256 bytes, so the second starts aligned). False, with
// nothing launched, where the kernels cannot take the tensors.
struct OwnBatchNormSide {
  const OwnBatchNormLaunch* launch = nullptr;
  const void* x = nullptr;
  const float* gamma = nullptr;
  const float* beta = nullptr;
  float *running_mean = nullptr, *running_var = nullptr, *saved_mean = nullptr, *saved_inv_std = nullptr;
  void* dx = nullptr;
  float *dgamma = nullptr, *dbeta = nullptr;
  void* held = nullptr;
  const float* input_sums = nullptr;  // the forward's statistics from x's sums (as input_sums above), or null
};
bool own_batchnorm_shortcut_forward_training(const OwnBatchNormSide& main, const OwnBatchNormSide& shortcut,
                                             void* y, void* workspace, cudaStream_t stream);
bool own_batchnorm_shortcut_backward(const OwnBatchNormSide& main, const OwnBatchNormSide& shortcut,
                                     const void* dy, bool accumulate, void* workspace, cudaStream_t stream);

// The ImageNet stem's batch norm (fusion relu) and the 3 x 3, stride-2, padding-1 max pool after it as one
// op on the own NHWC kernels (Backend::batchnorm_max_pool_*): the forward's statistics as
// own_batchnorm_forward_training makes them, then one pass that normalises each window's values as it pools
// them (y and the pool's positions, `argmax`, one byte per output element); the backward gathers the pool's
// gradient from dy and the positions inside the batch norm's two passes. relu(bn(x)) and its gradient are
// never stored. own_batchnorm_max_pool_fits: whether the kernels take the shapes (channels in whole 16-byte
// vectors, the stem's pool with a ceil(h / 2) x ceil(w / 2) output, 32-bit offsets); the calls return false,
// with nothing launched, where they do not or the pointers are not aligned for vectors. Inference writes the
// running statistics' coefficients into `coefficients` (channels x 16 bytes) first.
bool own_batchnorm_max_pool_fits(const BatchNormGeometry& g, const MaxPoolShape& pool);
bool own_batchnorm_max_pool_forward_training(const OwnBatchNormSide& bn, const MaxPoolShape& pool, void* y,
                                             uint8_t* argmax, void* workspace, cudaStream_t stream);
bool own_batchnorm_max_pool_forward_inference(const BatchNormGeometry& g, const void* x, const float* gamma,
                                              const float* beta, const float* running_mean,
                                              const float* running_var, const MaxPoolShape& pool, void* y,
                                              void* coefficients, cudaStream_t stream);
bool own_batchnorm_max_pool_backward(const OwnBatchNormSide& bn, const MaxPoolShape& pool, const void* dy,
                                     const uint8_t* argmax, bool accumulate, void* workspace,
                                     cudaStream_t stream);

}  // namespace dlbench::cuda
