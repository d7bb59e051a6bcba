// Backend's defaults for the dense ops (a fully connected layer with its bias, its GELU or the residual
// add after it), composed from gemm, add_bias, gelu_forward/backward, add and bias_backward in the order
// the separate layers run them: the same results, bit for bit, and no saving. A backend whose GEMMs apply
// epilogues (CUDA's cuBLASLt) overrides them.
//
// FP8 (Fp8DenseScaling): each GEMM operand is replaced by its round trip through FP8 (fp8_round_trip, x
// and w in E4M3, dy in E5M2), and the op composes as without. With power-of-two scales that is what an FP8
// GEMM computes, up to the order of summation.
#include "backend/backend.h"
#include "backend/scratch_tensor.h"
#include "core/status.h"

namespace dlbench {
namespace {

// x [N, I], w [O, I]: returns {N, I, O}.
struct DenseShape {
  int64_t rows, in, out;
};

DenseShape dense_shape(const char* op, const Tensor& x, const Tensor& w) {
  DLB_CHECK(w.rank() == 2 && w.dim(1) > 0 && x.numel() % w.dim(1) == 0, "{}: x is {}, w {}", op, x.describe(),
            w.describe());
  return {x.numel() / w.dim(1), w.dim(1), w.dim(0)};
}

// An operand's FP8 round trip. `count_amax`: whether x's largest |value| joins the operand's amax (the
// backward ops leave out x and w, whose amaxes the forward took).
class RoundTripped : public ScratchTensor {
 public:
  RoundTripped(Backend& backend, const Tensor& x, Fp8Format format, const Fp8DenseScaling& fp8, int operand,
               bool count_amax = true)
      : ScratchTensor(backend, x) {
    backend.fp8_round_trip(x, format, fp8.scale + operand,
                           fp8.amax && count_amax ? fp8.amax + operand : nullptr, tensor());
  }
};

// gelu(x): a dense layer's input given as GELU's input (input_act).
class GeluOf : public ScratchTensor {
 public:
  GeluOf(Backend& backend, const Tensor& x) : ScratchTensor(backend, x) { backend.gelu_forward(x, tensor()); }
};

}  // namespace

void Backend::dense_forward(const Tensor& x, const Tensor& w, const Tensor& b, DenseActivation act,
                            const Tensor* residual, Tensor& y, Tensor* pre, const Fp8DenseScaling* fp8,
                            DenseActivation input_act) {
  if (input_act == DenseActivation::gelu) {
    const GeluOf input(*this, x);
    dense_forward(input.tensor(), w, b, act, residual, y, pre, fp8);
    return;
  }
  if (fp8) {
    const RoundTripped x8(*this, x, Fp8Format::e4m3, *fp8, kFp8X), w8(*this, w, Fp8Format::e4m3, *fp8, kFp8W);
    dense_forward(x8.tensor(), w8.tensor(), b, act, residual, y, pre);
    return;
  }
  const char* op = "dense_forward";
  const DenseShape s = dense_shape(op, x, w);
  DLB_CHECK(act == DenseActivation::none || (pre && pre->numel() == y.numel()),
            "{}: GELU needs `pre` of y's size", op);
  DLB_CHECK(!residual || residual->numel() == y.numel(), "{}: the residual is {}, y {}", op,
            residual ? residual->describe() : "", y.describe());
  Tensor out = (act == DenseActivation::gelu ? *pre : y).reshaped({s.rows, s.out});
  gemm(Transpose::no, Transpose::yes, s.rows, s.out, s.in, 1.f, x, w, 0.f, out);
  add_bias(out, b);
  if (act == DenseActivation::gelu) {
    Tensor y2 = y.reshaped({s.rows, s.out});
    gelu_forward(out, y2);
  }
  if (residual) add(y, *residual, y);  // branch + residual: the residual layer's sum, bit for bit
}

void Backend::dense_backward_data(const Tensor& dy, const Tensor& w, DenseActivation act, const Tensor* pre,
                                  Accumulate accumulate, Tensor& dx, const Fp8DenseScaling* fp8) {
  if (fp8) {
    const RoundTripped dy8(*this, dy, Fp8Format::e5m2, *fp8, kFp8Dy),
        w8(*this, w, Fp8Format::e4m3, *fp8, kFp8W, false);
    dense_backward_data(dy8.tensor(), w8.tensor(), act, pre, accumulate, dx);
    return;
  }
  const char* op = "dense_backward_data";
  const DenseShape s = dense_shape(op, dx, w);
  const float beta = accumulate == Accumulate::add ? 1.f : 0.f;
  if (act == DenseActivation::none) {
    Tensor dx2 = dx.reshaped({s.rows, s.in});
    gemm(Transpose::no, Transpose::no, s.rows, s.in, s.out, 1.f, dy, w, beta, dx2);
    return;
  }
  DLB_CHECK(pre && pre->numel() == dx.numel() && accumulate == Accumulate::overwrite,
            "{}: GELU's gradient needs `pre` of dx's size and overwrites dx", op);
  // The gradient reaching gelu(pre), then through GELU, as the GELU layer would take it.
  Tensor gradient(allocate(dx.bytes()), {s.rows, s.in}, dx.dtype(), dx.layout(), device());
  gemm(Transpose::no, Transpose::no, s.rows, s.in, s.out, 1.f, dy, w, 0.f, gradient);
  Tensor dx2 = dx.reshaped({s.rows, s.in});
  gelu_backward(pre->reshaped({s.rows, s.in}), gradient, dx2);
  deallocate(gradient.data());
}

void Backend::dense_backward_weights(const Tensor& dy, const Tensor& x, Accumulate accumulate, Tensor& dw,
                                     Tensor* db, const Fp8DenseScaling* fp8) {
  const DenseShape s = dense_shape("dense_backward_weights", x, dw);
  const float beta = accumulate == Accumulate::add ? 1.f : 0.f;
  const Tensor dy2 = dy.reshaped({s.rows, s.out});
  if (fp8) {
    const RoundTripped dy8(*this, dy2, Fp8Format::e5m2, *fp8, kFp8Dy),
        x8(*this, x, Fp8Format::e4m3, *fp8, kFp8X, false);
    gemm(Transpose::yes, Transpose::no, s.out, s.in, s.rows, 1.f, dy8.tensor(), x8.tensor(), beta, dw);
  } else {
    gemm(Transpose::yes, Transpose::no, s.out, s.in, s.rows, 1.f, dy2, x, beta, dw);
  }
  if (db) bias_backward(dy2, *db, accumulate);  // the sum of dy as it is: no GEMM, so no FP8
}

void Backend::dense_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const DenseGradients& g,
                             const Fp8DenseScaling* fp8) {
  DLB_CHECK(g.dw, "dense_backward: no dw");
  if (g.input_act == DenseActivation::gelu) {
    const GeluOf input(*this, x);
    DenseGradients of_input = g;
    of_input.input_act = DenseActivation::none;
    dense_backward(dy, input.tensor(), w, of_input, fp8);
    return;
  }
  if (g.output_act == DenseActivation::gelu) {
    DLB_CHECK(g.output && g.output->numel() == dy.numel(),
              "dense_backward: GELU's gradient needs y of dy's shape");
    Tensor gradient = dy.reshaped(g.output->dims());  // dy is scratch (DenseGradients): GELU's, in place
    gelu_backward(*g.output, gradient, gradient);
  }
  dense_backward_weights(dy, x, g.params, *g.dw, g.db, fp8);
  if (g.dx) dense_backward_data(dy, w, g.act, g.pre, g.accumulate, *g.dx, fp8);
}

}  // namespace dlbench
