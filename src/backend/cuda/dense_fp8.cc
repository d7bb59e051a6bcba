// The dense ops in FP8 (--precision fp8; Fp8DenseScaling in backend.h): each GEMM's two operands are
// quantized to FP8 codes with their delayed scales (quantize_fp8, which also folds their amax) and
// multiplied by cuBLASLt's FP8 GEMM, which takes the scales' inverses and writes BF16 with the same
// epilogues as the BF16 ops (dense_epilogues.cc):
//   forward          y = x W^T + b (+ r | gelu):  x [N, I] and W [O, I] in E4M3, both K-major as they are;
//   backward data    dx = dy W:                   dy [N, O] in E5M2, W^T [I, O] in E4M3 (quantized
//                                                 transposed: Hopper's FP8 GEMMs take K-major operands only);
//   backward weights dW = dy^T x:                 dy^T [O, N] in E5M2 and x^T [I, N] in E4M3, the
//                                                 reduction over the tokens K-major after transposing;
//                                                 the bias gradient sums dy as it is (in the pass that
//                                                 quantizes dy where the layer's whole backward is one
//                                                 op, dense_backward; else bias_backward).
// Where a layer's input is GELU's output and x holds GELU's input (input_act: the MLP's c_proj), the
// passes that quantize x and x^T take GELU on their way, and gelu(x) is never stored; where its output
// gradient is GELU's (output_act: the MLP's c_fc), the pass that quantizes dy takes GELU's gradient.
// The GEMMs accumulate as cuBLASLt does by default (partial sums promoted to FP32 at intervals), or with
// its fast accumulation where --fp8-fast-accumulation says (the forward's, or all). The codes live in the
// backend's scratch, used by one op at a time, except x^T's and W^T's where the layer keeps them from the
// forward (Fp8DenseScaling::input_codes_transposed, weight_codes_transposed): the forward's passes over x
// and W write them beside x's and W's, and the backward's GEMMs read them instead of passing over x and W
// again. Where cuBLASLt has no FP8 algorithm
// with an epilogue, the plain FP8 GEMM runs and the epilogue's single kernels follow; where it has none
// at all (a dimension FP8 GEMMs cannot take, not a multiple of 16), the operands' round trips through
// FP8, exact in BF16, go into the scratch and the op runs as without FP8: the same products, summed by a
// BF16 GEMM.
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/lt_matmul.h"
#include "core/align.h"
#include "core/log.h"

namespace dlbench::cuda {
namespace {

constexpr size_t kCodeAlignment = 256;

size_t code_bytes(int64_t rows, int64_t cols) {
  return align_up(static_cast<size_t>(rows * cols), kCodeAlignment);
}

struct Fp8Dims {
  int64_t rows, in, out;
};

Fp8Dims check_fp8_dense(const char* op, const Tensor& x, const Tensor& w) {
  check_float(op, "x", x);
  DLB_CHECK(w.rank() == 2 && w.dim(1) > 0 && x.numel() % w.dim(1) == 0 && w.dtype() == x.dtype() &&
                (x.dtype() == DType::bf16 || x.dtype() == DType::f16),
            "{}: x is {}, w {}: FP8 takes x [N, I] and w [O, I] of one dtype, bf16 or f16", op, x.describe(),
            w.describe());
  return {x.numel() / w.dim(1), w.dim(1), w.dim(0)};
}

// Whether a forward (or a backward) FP8 GEMM takes cuBLASLt's fast accumulation under `f`.
bool fast_accumulation(Fp8FastAccumulation f, bool forward) {
  return f == Fp8FastAccumulation::all || (forward && f == Fp8FastAccumulation::forward);
}

// An FP8 GEMM c[m, n] = a[m, k] b[n, k]^T of codes in `a_format` and `b_format`, each times its inverse
// scale.
LtGemm fp8_gemm(int64_t m, int64_t n, int64_t k, DType out, const uint8_t* a, Fp8Format a_format,
                const float* a_inverse, const uint8_t* b, Fp8Format b_format, const float* b_inverse, void* c,
                bool fast) {
  LtGemm g;
  g.fast_accumulation = fast;
  g.ta = Transpose::no, g.tb = Transpose::yes, g.m = m, g.n = n, g.k = k, g.dtype = out;
  g.a = a, g.b = b, g.c = c;
  g.a_fp8 = a_format, g.b_fp8 = b_format, g.a_scale = a_inverse, g.b_scale = b_inverse;
  return g;
}

float* operand_amax(const Fp8DenseScaling& fp8, int operand) {
  return fp8.amax ? fp8.amax + operand : nullptr;
}

// The quantization's prologue where a layer's input x is GELU's input (input_act): GELU on the way.
Fp8Prologue gelu_on_the_way(DenseActivation input_act) {
  Fp8Prologue p;
  if (input_act == DenseActivation::gelu) p.kind = Fp8Prologue::Kind::gelu;
  return p;
}

// x^T's codes for the backward's weight GEMM: those the forward kept, or quantized now into `codes` (x's
// amax was taken by the forward), GELU on the way where x is GELU's input.
const uint8_t* transposed_input_codes(const Tensor& x, const Fp8Dims& d, const Fp8DenseScaling& fp8,
                                      DenseActivation input_act, uint8_t* codes, cudaStream_t stream) {
  if (fp8.input_codes_transposed) return fp8.input_codes_transposed;
  quantize_fp8(x.data(), x.dtype(), d.rows, d.in, Fp8Format::e4m3, fp8.scale + kFp8X, nullptr, codes, nullptr,
               stream, gelu_on_the_way(input_act));
  return codes;
}

// W^T's codes for the backward's data GEMM: those the forward kept, or quantized now into `codes` (W's
// amax was taken by the forward).
const uint8_t* transposed_weight_codes(const Tensor& w, const Fp8Dims& d, const Fp8DenseScaling& fp8,
                                       uint8_t* codes, cudaStream_t stream) {
  if (fp8.weight_codes_transposed) return fp8.weight_codes_transposed;
  quantize_fp8(w.data(), w.dtype(), d.out, d.in, Fp8Format::e4m3, fp8.scale + kFp8W, nullptr, codes, nullptr,
               stream);
  return codes;
}

// A tensor of t's shape and dtype at `at`.
Tensor like(const Tensor& t, void* at) { return Tensor(at, t.dims(), t.dtype(), t.layout(), t.device()); }

}  // namespace

void CudaBackend::note_fp8_in_bf16(const char* op, int64_t rows, int64_t in, int64_t out) {
  ++fp8_gemms_in_bf16_;
  static std::mutex mutex;  // once per process: the backends of one process's GPUs meet the same shapes
  static std::set<std::tuple<std::string, int64_t, int64_t, int64_t>> said;
  std::lock_guard<std::mutex> lock(mutex);
  if (said.emplace(op, rows, in, out).second)
    log_warning(
        "{}: cuBLASLt runs no FP8 GEMM for {} x {} -> {}; its GEMM runs in BF16 on the FP8-rounded "
        "operands (the same products, not FP8's speed)",
        op, rows, in, out);
}

std::pair<Tensor, Tensor> CudaBackend::fp8_round_trips(const Tensor& a, Fp8Format a_format,
                                                       const float* a_scale, const Tensor& b,
                                                       Fp8Format b_format, const float* b_scale,
                                                       const char* op) {
  auto* base = static_cast<unsigned char*>(scratch(align_up(a.bytes(), kCodeAlignment) + b.bytes(), op));
  Tensor a8 = like(a, base), b8 = like(b, base + align_up(a.bytes(), kCodeAlignment));
  cuda::fp8_round_trip(a.data(), a.dtype(), a.numel(), a_format, a_scale, a8.data(), a8.dtype(), nullptr,
                       stream_);
  cuda::fp8_round_trip(b.data(), b.dtype(), b.numel(), b_format, b_scale, b8.data(), b8.dtype(), nullptr,
                       stream_);
  return {a8, b8};
}

void CudaBackend::fp8_round_trip(const Tensor& x, Fp8Format format, const float* scale, float* amax,
                                 Tensor& y) {
  const char* op = "fp8_round_trip";
  check_float(op, "x", x);
  check_float(op, "y", y);
  DLB_CHECK(x.numel() == y.numel(), "{}: x is {}, y {}", op, x.describe(), y.describe());
  activate();
  cuda::fp8_round_trip(x.data(), x.dtype(), x.numel(), format, scale, y.data(), y.dtype(), amax, stream_);
}

void CudaBackend::update_fp8_scales(const Fp8ScalingState& s) {
  activate();
  cuda::update_fp8_scales(s.amax, s.history, s.history_length, s.scale, s.inverse_scale, s.format, s.count,
                          s.margin, stream_);
}

void CudaBackend::dense_forward_fp8(const Tensor& x, const Tensor& w, const Tensor& b, DenseActivation act,
                                    const Tensor* residual, Tensor& y, Tensor* pre,
                                    const Fp8DenseScaling& fp8, DenseActivation input_act) {
  const char* op = "dense_forward (fp8)";
  const Fp8Dims d = check_fp8_dense(op, x, w);
  auto* scratch_codes =
      static_cast<uint8_t*>(scratch(code_bytes(d.rows, d.in) + code_bytes(d.out, d.in), op));
  uint8_t* w_codes = scratch_codes + code_bytes(d.rows, d.in);
  // x's codes, and x^T's where the layer keeps them for its backward; where x is GELU's input, gelu(x)'s,
  // GELU taken on the way (gelu(x) is never stored). Where the layer that writes x made them
  // (Fusion::layernorm_fp8_codes), x holds none of its own values.
  const uint8_t* x_codes = fp8.input_codes;
  if (!x_codes) {
    quantize_fp8(x.data(), x.dtype(), d.rows, d.in, Fp8Format::e4m3, fp8.scale + kFp8X, scratch_codes,
                 fp8.input_codes_transposed, operand_amax(fp8, kFp8X), stream_, gelu_on_the_way(input_act));
    x_codes = scratch_codes;
  }
  quantize_fp8(w.data(), w.dtype(), d.out, d.in, Fp8Format::e4m3, fp8.scale + kFp8W, w_codes,
               fp8.weight_codes_transposed, operand_amax(fp8, kFp8W), stream_);
  Tensor& out = act == DenseActivation::gelu ? *pre : y;
  LtGemm g = fp8_gemm(d.rows, d.out, d.in, x.dtype(), x_codes, Fp8Format::e4m3, fp8.inverse_scale_of(kFp8X),
                      w_codes, Fp8Format::e4m3, fp8.inverse_scale_of(kFp8W), y.data(),
                      fast_accumulation(options_.fp8_fast_accumulation, true));
  g.bias = b.data();
  g.epilogue = act == DenseActivation::gelu ? LtEpilogue::bias_gelu : LtEpilogue::bias;
  if (act == DenseActivation::gelu) g.aux = pre->data();
  if (residual) g.beta = 1.f, g.c_in = residual->data();
  if (lt_->run(g, false, stream_)) return;
  // The plain FP8 GEMM, then the bias, GELU and residual as single passes.
  LtGemm plain = fp8_gemm(d.rows, d.out, d.in, x.dtype(), x_codes, Fp8Format::e4m3,
                          fp8.inverse_scale_of(kFp8X), w_codes, Fp8Format::e4m3, fp8.inverse_scale_of(kFp8W),
                          out.data(), fast_accumulation(options_.fp8_fast_accumulation, true));
  if (!lt_->run(plain, false, stream_)) {
    DLB_CHECK(!fp8.input_codes, "{}: cuBLASLt runs no FP8 GEMM for {} x {} -> {}, and x holds codes", op,
              d.rows, d.in, d.out);
    note_fp8_in_bf16(op, d.rows, d.in, d.out);
    const Tensor input = input_act == DenseActivation::gelu ? gelu_of(x, op) : x;
    const auto [x8, w8] =
        fp8_round_trips(input, Fp8Format::e4m3, fp8.scale + kFp8X, w, Fp8Format::e4m3, fp8.scale + kFp8W, op);
    dense_forward(x8, w8, b, act, residual, y, pre);
    return;
  }
  Tensor out2 = out.reshaped({d.rows, d.out});
  add_bias(out2, b);
  if (act == DenseActivation::gelu) {
    Tensor y2 = y.reshaped({d.rows, d.out});
    gelu_forward(out2, y2);
  }
  if (residual) add(y, *residual, y);
}

bool CudaBackend::data_gemm_fp8(const uint8_t* dy_codes, const uint8_t* wt_codes, int64_t rows, int64_t in,
                                int64_t out, DenseActivation act, const Tensor* pre, Accumulate accumulate,
                                Tensor& dx, const Fp8DenseScaling& fp8) {
  LtGemm g = fp8_gemm(rows, in, out, dx.dtype(), dy_codes, Fp8Format::e5m2, fp8.inverse_scale_of(kFp8Dy),
                      wt_codes, Fp8Format::e4m3, fp8.inverse_scale_of(kFp8W), dx.data(),
                      fast_accumulation(options_.fp8_fast_accumulation, false));
  if (accumulate == Accumulate::add) g.beta = 1.f, g.c_in = dx.data();
  // No DGELU epilogue: cuBLASLt's FP8 GEMM with it ran at a fifth of the plain one's rate on the H200
  // (280 against 1,253 TFLOP/s at gpt2-large's mlp.c_proj, bench/results/gpt2-fp8), slower than BF16's
  // with it; the plain GEMM and one pass for GELU's gradient take a third of its time.
  if (!lt_->run(g, false, stream_)) return false;
  if (act == DenseActivation::gelu) {  // GELU's gradient over dy W, in place (it overwrites dx)
    Tensor dx2 = dx.reshaped({rows, in});
    gelu_backward(pre->reshaped({rows, in}), dx2, dx2);
  }
  return true;
}

bool CudaBackend::weight_gemm_fp8(const uint8_t* dyt_codes, const uint8_t* xt_codes, int64_t rows, int64_t in,
                                  int64_t out, Accumulate accumulate, Tensor& dw,
                                  const Fp8DenseScaling& fp8) {
  LtGemm g = fp8_gemm(out, in, rows, dw.dtype(), dyt_codes, Fp8Format::e5m2, fp8.inverse_scale_of(kFp8Dy),
                      xt_codes, Fp8Format::e4m3, fp8.inverse_scale_of(kFp8X), dw.data(),
                      fast_accumulation(options_.fp8_fast_accumulation, false));
  if (accumulate == Accumulate::add) g.beta = 1.f, g.c_in = dw.data();
  return lt_->run(g, false, stream_);
}

void CudaBackend::dense_backward_data_fp8(const Tensor& dy, const Tensor& w, DenseActivation act,
                                          const Tensor* pre, Accumulate accumulate, Tensor& dx,
                                          const Fp8DenseScaling& fp8) {
  const char* op = "dense_backward_data (fp8)";
  const Fp8Dims d = check_fp8_dense(op, dx, w);
  auto* dy_codes = static_cast<uint8_t*>(scratch(code_bytes(d.rows, d.out) + code_bytes(d.in, d.out), op));
  uint8_t* wt_codes = dy_codes + code_bytes(d.rows, d.out);
  quantize_fp8(dy.data(), dy.dtype(), d.rows, d.out, Fp8Format::e5m2, fp8.scale + kFp8Dy, dy_codes, nullptr,
               operand_amax(fp8, kFp8Dy), stream_);
  const uint8_t* wt = transposed_weight_codes(w, d, fp8, wt_codes, stream_);
  if (data_gemm_fp8(dy_codes, wt, d.rows, d.in, d.out, act, pre, accumulate, dx, fp8)) return;
  note_fp8_in_bf16(op, d.rows, d.in, d.out);
  const auto [dy8, w8] =
      fp8_round_trips(dy, Fp8Format::e5m2, fp8.scale + kFp8Dy, w, Fp8Format::e4m3, fp8.scale + kFp8W, op);
  dense_backward_data(dy8, w8, act, pre, accumulate, dx);
}

void CudaBackend::dense_backward_weights_fp8(const Tensor& dy, const Tensor& x, Accumulate accumulate,
                                             Tensor& dw, Tensor* db, const Fp8DenseScaling& fp8) {
  const char* op = "dense_backward_weights (fp8)";
  const Fp8Dims d = check_fp8_dense(op, x, dw);
  auto* dyt_codes = static_cast<uint8_t*>(scratch(code_bytes(d.out, d.rows) + code_bytes(d.in, d.rows), op));
  uint8_t* xt_codes = dyt_codes + code_bytes(d.out, d.rows);
  quantize_fp8(dy.data(), dy.dtype(), d.rows, d.out, Fp8Format::e5m2, fp8.scale + kFp8Dy, nullptr, dyt_codes,
               operand_amax(fp8, kFp8Dy), stream_);
  const uint8_t* xt = transposed_input_codes(x, d, fp8, DenseActivation::none, xt_codes, stream_);
  if (!weight_gemm_fp8(dyt_codes, xt, d.rows, d.in, d.out, accumulate, dw, fp8)) {
    note_fp8_in_bf16(op, d.rows, d.in, d.out);
    const auto [dy8, x8] =
        fp8_round_trips(dy, Fp8Format::e5m2, fp8.scale + kFp8Dy, x, Fp8Format::e4m3, fp8.scale + kFp8X, op);
    gemm(Transpose::yes, Transpose::no, d.out, d.in, d.rows, 1.f, dy8, x8,
         accumulate == Accumulate::add ? 1.f : 0.f, dw);
  }
  if (db) bias_backward(dy.reshaped({d.rows, d.out}), *db, accumulate);
}

// Both backward GEMMs from one pass over dy, which writes its codes in both layouts: dy for the data
// gradient (reducing over O), dy^T for the weight gradient (reducing over the tokens).
void CudaBackend::dense_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const DenseGradients& g,
                                 const Fp8DenseScaling* fp8) {
  const char* op = fp8 ? "dense_backward (fp8)" : "dense_backward";
  DenseGradients of_input = g;  // the same gradients, of the layer's input where x is GELU's (input_act)
  of_input.input_act = DenseActivation::none;
  if (!fp8 || !g.dx) {
    Backend::dense_backward(dy, g.input_act == DenseActivation::gelu ? gelu_of(x, op) : x, w, of_input, fp8);
    return;
  }
  const Fp8Dims d = check_fp8_dense(op, x, w);
  DLB_CHECK(
      g.dw && (!g.db || g.db->numel() == d.out) && dy.numel() == d.rows * d.out && dy.dtype() == x.dtype() &&
          g.dx->numel() == d.rows * d.in && (g.act == DenseActivation::none || g.pre) &&
          (g.output_act == DenseActivation::none ||
           (g.output && g.output->numel() == dy.numel() && g.output->dtype() == dy.dtype())),
      "{}: dy {} or the gradients do not fit x {} and w {}", op, dy.describe(), x.describe(), w.describe());
  activate();
  if (d.rows == 0) return;
  const size_t dy_bytes = code_bytes(d.rows, d.out);
  const size_t partial_bytes =
      align_up(static_cast<size_t>(fp8_column_partial_rows(d.rows) * d.out) * sizeof(float), kCodeAlignment);
  auto* dy_codes = static_cast<uint8_t*>(
      scratch(2 * dy_bytes + code_bytes(d.in, d.rows) + code_bytes(d.in, d.out) + partial_bytes, op));
  uint8_t *dyt_codes = dy_codes + dy_bytes, *xt_codes = dyt_codes + dy_bytes,
          *wt_codes = xt_codes + code_bytes(d.in, d.rows);
  auto* bias_partials = reinterpret_cast<float*>(wt_codes + code_bytes(d.in, d.out));
  // dy's codes in both layouts and, in the same pass, its column sums: the bias gradient's, for which the
  // BF16 path's bias kernel reads dy once more. Where y went through GELU, the pass takes GELU's gradient
  // on its way (dy stays as it was).
  Fp8Prologue prologue;
  if (g.output_act == DenseActivation::gelu)
    prologue.kind = Fp8Prologue::Kind::gelu_gradient, prologue.gelu_input = g.output->data();
  const int64_t partial_rows = quantize_fp8_summing_columns(
      dy.data(), dy.dtype(), d.rows, d.out, Fp8Format::e5m2, fp8->scale + kFp8Dy, dy_codes, dyt_codes,
      operand_amax(*fp8, kFp8Dy), bias_partials, stream_, prologue);
  const uint8_t* xt = transposed_input_codes(x, d, *fp8, g.input_act, xt_codes, stream_);
  if (!weight_gemm_fp8(dyt_codes, xt, d.rows, d.in, d.out, g.params, *g.dw, *fp8)) {
    // The separate ops, each with its own way round.
    Backend::dense_backward(dy, g.input_act == DenseActivation::gelu ? gelu_of(x, op) : x, w, of_input, fp8);
    return;
  }
  if (g.db)
    sum_column_partials(bias_partials, partial_rows, d.out, g.db->data(), g.db->dtype(),
                        g.params == Accumulate::add, stream_);
  const uint8_t* wt = transposed_weight_codes(w, d, *fp8, wt_codes, stream_);
  if (data_gemm_fp8(dy_codes, wt, d.rows, d.in, d.out, g.act, g.pre, g.accumulate, *g.dx, *fp8)) return;
  if (g.output_act == DenseActivation::gelu) {  // the separate op reads the gradient of y from dy
    Tensor gradient = dy.reshaped(g.output->dims());
    gelu_backward(*g.output, gradient, gradient);
  }
  dense_backward_data_fp8(dy, w, g.act, g.pre, g.accumulate, *g.dx, *fp8);
}

}  // namespace dlbench::cuda
