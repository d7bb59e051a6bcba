// The dense ops (a transformer's linear layers) on cuBLASLt with epilogues (lt_matmul.h), where
// --dense-epilogues is on:
//   forward         y = x W^T + b (+ r): the bias, and a residual as the GEMM's C with beta 1, added as
//                   the GEMM writes y; with GELU, h = x W^T + b is written beside y = gelu(h);
//   backward data   dx = dy W, or with GELU's gradient (dy W) * gelu'(h) from the saved h;
//   backward weights dW = dy^T x, a plain GEMM, and db = the sum of dy's rows by the bias kernel: cuBLASLt's
//                   bias-gradient epilogue (BGRADB) made the weight GEMMs of a gpt2-large block 0.31 ms
//                   slower, more than the kernel's pass over dy costs (gpt2-large 0.9% faster without it,
//                   gpt2 0.15% slower; bench/results/gpt2-gemm-choice).
// Each of the others would be a pass of its own over an [N, O] matrix (add_bias, gelu, add,
// gelu_backward). Where the option is off, or cuBLASLt has no algorithm for a shape, the
// ops are composed from the single kernels (Backend's defaults), with the same results up to rounding.
// With FP8 scaling the ops run on FP8 GEMMs instead (dense_fp8.cc).
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/lt_matmul.h"

namespace dlbench::cuda {
namespace {

struct DenseDims {
  int64_t rows, in, out;
};

// x (or dx) [N, I] and w [O, I] on the device, of one float dtype.
DenseDims check_dense(const char* op, const Tensor& x, const Tensor& w) {
  check_float(op, "x", x);
  check_float(op, "w", w);
  DLB_CHECK(w.rank() == 2 && w.dim(1) > 0 && x.numel() % w.dim(1) == 0 && w.dtype() == x.dtype(),
            "{}: x is {}, w {}: expected x [N, I] and w [O, I] of one dtype", op, x.describe(), w.describe());
  return {x.numel() / w.dim(1), w.dim(1), w.dim(0)};
}

void check_size(const char* op, const char* name, const Tensor& t, int64_t elements, DType dtype) {
  check_device_tensor(op, name, t);
  DLB_CHECK(t.numel() == elements && t.dtype() == dtype, "{}: {} is {}, expected {} elements of {}", op, name,
            t.describe(), elements, dtype_name(dtype));
}

}  // namespace

void CudaBackend::dense_forward(const Tensor& x, const Tensor& w, const Tensor& b, DenseActivation act,
                                const Tensor* residual, Tensor& y, Tensor* pre, const Fp8DenseScaling* fp8,
                                DenseActivation input_act) {
  const char* op = "dense_forward";
  const DenseDims d = check_dense(op, x, w);
  check_size(op, "b", b, d.out, x.dtype());
  check_size(op, "y", y, d.rows * d.out, x.dtype());
  if (residual) check_size(op, "residual", *residual, d.rows * d.out, x.dtype());
  if (act == DenseActivation::gelu) {
    DLB_CHECK(pre && !residual, "{}: GELU needs `pre` and takes no residual", op);
    check_size(op, "pre", *pre, d.rows * d.out, x.dtype());
  }
  if (d.rows == 0) return;
  activate();
  if (fp8) {
    dense_forward_fp8(x, w, b, act, residual, y, pre, *fp8, input_act);
    return;
  }
  if (input_act == DenseActivation::gelu) {  // only FP8 takes GELU on its way through x
    dense_forward(gelu_of(x, op), w, b, act, residual, y, pre);
    return;
  }
  if (options_.dense_epilogues) {
    LtGemm g;
    g.ta = Transpose::no, g.tb = Transpose::yes, g.m = d.rows, g.n = d.out, g.k = d.in, g.dtype = x.dtype();
    g.a = x.data(), g.b = w.data(), g.c = y.data(), g.bias = b.data();
    g.epilogue = act == DenseActivation::gelu ? LtEpilogue::bias_gelu : LtEpilogue::bias;
    if (act == DenseActivation::gelu) g.aux = pre->data();
    if (residual) g.beta = 1.f, g.c_in = residual->data();
    if (lt_->run(g, allow_tf32(), stream_)) return;
  }
  Backend::dense_forward(x, w, b, act, residual, y, pre);
}

void CudaBackend::dense_backward_data(const Tensor& dy, const Tensor& w, DenseActivation act,
                                      const Tensor* pre, Accumulate accumulate, Tensor& dx,
                                      const Fp8DenseScaling* fp8) {
  const char* op = "dense_backward_data";
  const DenseDims d = check_dense(op, dx, w);
  check_size(op, "dy", dy, d.rows * d.out, dx.dtype());
  if (act == DenseActivation::gelu) {
    DLB_CHECK(pre && accumulate == Accumulate::overwrite, "{}: GELU's gradient needs `pre` and overwrites dx",
              op);
    check_size(op, "pre", *pre, d.rows * d.in, dx.dtype());
  }
  if (d.rows == 0) return;
  activate();
  if (fp8) {
    dense_backward_data_fp8(dy, w, act, pre, accumulate, dx, *fp8);
    return;
  }
  if (act == DenseActivation::none) {  // a plain GEMM: no epilogue to apply
    Backend::dense_backward_data(dy, w, act, pre, accumulate, dx);
    return;
  }
  if (options_.dense_epilogues) {
    LtGemm g;
    g.ta = Transpose::no, g.tb = Transpose::no, g.m = d.rows, g.n = d.in, g.k = d.out, g.dtype = dx.dtype();
    g.a = dy.data(), g.b = w.data(), g.c = dx.data(), g.epilogue = LtEpilogue::dgelu, g.aux = pre->data();
    if (lt_->run(g, allow_tf32(), stream_)) return;
  }
  // dy W into dx, then GELU's gradient over it in place (an elementwise kernel).
  Tensor dx2 = dx.reshaped({d.rows, d.in});
  gemm(Transpose::no, Transpose::no, d.rows, d.in, d.out, 1.f, dy, w, 0.f, dx2);
  gelu_backward(pre->reshaped({d.rows, d.in}), dx2, dx2);
}

void CudaBackend::dense_backward_weights(const Tensor& dy, const Tensor& x, Accumulate accumulate, Tensor& dw,
                                         Tensor* db, const Fp8DenseScaling* fp8) {
  const char* op = "dense_backward_weights";
  const DenseDims d = check_dense(op, x, dw);
  check_size(op, "dy", dy, d.rows * d.out, x.dtype());
  if (db) check_size(op, "db", *db, d.out, x.dtype());
  activate();
  if (fp8 && d.rows > 0) {
    dense_backward_weights_fp8(dy, x, accumulate, dw, db, *fp8);
    return;
  }
  Backend::dense_backward_weights(dy, x, accumulate, dw, db);
}

}  // namespace dlbench::cuda
