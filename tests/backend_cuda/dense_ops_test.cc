// The CUDA backend's dense ops (a transformer's linear layers: the bias, GELU and its gradient and the
// residual add in cuBLASLt's epilogues) against the reference backend's
// composition of gemm, add_bias, gelu and add, in f32, f16 and bf16, with --dense-epilogues on and off.
// The shapes include GPT-2's c_fc and c_proj and one whose width cuBLASLt's GELU epilogue cannot take (not a
// multiple of 8), where the ops must compose the single kernels instead. Every failure names the op, the
// shape, the dtype and the option.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"

namespace dlbench {
namespace {

using namespace cuda_testing;

struct DenseCase {
  int64_t rows, in, out;
};

const DenseCase kDenseCases[] = {
    {64, 128, 384},   // gpt-mini's c_attn
    {96, 768, 3072},  // GPT-2's c_fc (on few rows: the reference computes them one by one)
    {96, 3072, 768},  // and its c_proj
    {37, 96, 40},     // rows no tile divides
    {50, 24, 12},     // a width cuBLASLt's GELU epilogue refuses (its saved input's rows: a multiple of 8)
};

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

class DenseOpsTest : public ::testing::TestWithParam<std::tuple<DType, bool>> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU: cuda_device_count() == 0";
  }
  std::unique_ptr<Backend> ref = make_reference_backend();
};

HostBuffer wide(Backend& ref, const HostBuffer& x) {
  return converted(ref, x, reference_dtype(x.tensor().dtype()));
}

TEST_P(DenseOpsTest, ForwardAndBackwardMatchReference) {
  const auto [dtype, epilogues] = GetParam();
  CudaOptions options;
  options.dense_epilogues = epilogues;
  Backend& gpu = shared_gpu(options);
  for (const DenseCase& c : kDenseCases) {
    const std::string where = fmt::format("N={} I={} O={} {} epilogues {}", c.rows, c.in, c.out,
                                          dtype_name(dtype), epilogues ? "on" : "off");
    SCOPED_TRACE(where);
    std::printf("  dense %s\n", where.c_str());
    const double tol = tolerance(dtype, false, 2);
    const HostBuffer x = random_host(*ref, {c.rows, c.in}, dtype, 61),
                     w = random_host(*ref, {c.out, c.in}, dtype, 62, Layout::nchw, -0.2, 0.2),
                     b = random_host(*ref, {c.out}, dtype, 63),
                     r = random_host(*ref, {c.rows, c.out}, dtype, 64),
                     dy = random_host(*ref, {c.rows, c.out}, dtype, 65);
    DeviceTensor d_x(gpu, x), d_w(gpu, w), d_b(gpu, b), d_r(gpu, r), d_dy(gpu, dy);
    const HostBuffer rx = wide(*ref, x), rw = wide(*ref, w), rb = wide(*ref, b), rr = wide(*ref, r),
                     rdy = wide(*ref, dy);
    auto check = [&](const std::string& what, const DeviceTensor& actual, const HostBuffer& expected) {
      expect_close((what + " " + where).c_str(), download_wide(*ref, actual).tensor(), expected.tensor(),
                   tol);
    };

    // y = x W^T + b, with and without the residual; with GELU, and its input saved.
    for (const bool residual : {false, true}) {
      DeviceTensor d_y(gpu, {c.rows, c.out}, dtype);
      HostBuffer ry({c.rows, c.out}, reference_dtype(dtype));
      gpu.dense_forward(d_x.tensor(), d_w.tensor(), d_b.tensor(), DenseActivation::none,
                        residual ? d_r.ptr() : nullptr, d_y.tensor(), nullptr);
      ref->dense_forward(rx.tensor(), rw.tensor(), rb.tensor(), DenseActivation::none,
                         residual ? &rr.tensor() : nullptr, ry.tensor(), nullptr);
      check(residual ? "dense_forward y (bias, residual)" : "dense_forward y (bias)", d_y, ry);
    }
    DeviceTensor d_g(gpu, {c.rows, c.out}, dtype), d_pre(gpu, {c.rows, c.out}, dtype);
    HostBuffer rg({c.rows, c.out}, reference_dtype(dtype)), rpre({c.rows, c.out}, reference_dtype(dtype));
    gpu.dense_forward(d_x.tensor(), d_w.tensor(), d_b.tensor(), DenseActivation::gelu, nullptr, d_g.tensor(),
                      d_pre.ptr());
    ref->dense_forward(rx.tensor(), rw.tensor(), rb.tensor(), DenseActivation::gelu, nullptr, rg.tensor(),
                       &rpre.tensor());
    check("dense_forward pre (GELU)", d_pre, rpre);
    check("dense_forward y (GELU)", d_g, rg);

    // dx = dy W, overwritten and added to; and through GELU: (dy^T-side) an input that was gelu(pre).
    for (const Accumulate accumulate : {Accumulate::overwrite, Accumulate::add}) {
      const HostBuffer dx0 = random_host(*ref, {c.rows, c.in}, dtype, 66);
      DeviceTensor d_dx(gpu, dx0);
      HostBuffer rdx = wide(*ref, dx0);
      gpu.dense_backward_data(d_dy.tensor(), d_w.tensor(), DenseActivation::none, nullptr, accumulate,
                              d_dx.tensor());
      ref->dense_backward_data(rdy.tensor(), rw.tensor(), DenseActivation::none, nullptr, accumulate,
                               rdx.tensor());
      check(accumulate == Accumulate::add ? "dense_backward_data dx (add)" : "dense_backward_data dx", d_dx,
            rdx);
    }
    {
      // The layer after a GELU reads gelu(pre) [N, O] and maps it to [N, O2]: here its weight is w^T's
      // shape [in, out] (O2 = in), so dx = (dy2 W2) * gelu'(pre) with dy2 [N, in].
      const HostBuffer w2 = random_host(*ref, {c.in, c.out}, dtype, 67, Layout::nchw, -0.2, 0.2),
                       dy2 = random_host(*ref, {c.rows, c.in}, dtype, 68);
      DeviceTensor d_w2(gpu, w2), d_dy2(gpu, dy2), d_dh(gpu, {c.rows, c.out}, dtype);
      const HostBuffer pre = d_pre.download();
      const HostBuffer rpre_exact = wide(*ref, pre);  // the reference sees the GPU's rounded pre
      HostBuffer rdh({c.rows, c.out}, reference_dtype(dtype));
      gpu.dense_backward_data(d_dy2.tensor(), d_w2.tensor(), DenseActivation::gelu, d_pre.ptr(),
                              Accumulate::overwrite, d_dh.tensor());
      ref->dense_backward_data(wide(*ref, dy2).tensor(), wide(*ref, w2).tensor(), DenseActivation::gelu,
                               &rpre_exact.tensor(), Accumulate::overwrite, rdh.tensor());
      check("dense_backward_data dh (GELU)", d_dh, rdh);
    }

    // dW = dy^T x and db = the sum of dy over rows, overwritten and added to.
    for (const Accumulate accumulate : {Accumulate::overwrite, Accumulate::add}) {
      const HostBuffer dw0 = random_host(*ref, {c.out, c.in}, dtype, 69),
                       db0 = random_host(*ref, {c.out}, dtype, 70);
      DeviceTensor d_dw(gpu, dw0), d_db(gpu, db0);
      HostBuffer rdw = wide(*ref, dw0), rdb = wide(*ref, db0);
      gpu.dense_backward_weights(d_dy.tensor(), d_x.tensor(), accumulate, d_dw.tensor(), &d_db.tensor());
      ref->dense_backward_weights(rdy.tensor(), rx.tensor(), accumulate, rdw.tensor(), &rdb.tensor());
      const std::string mode = accumulate == Accumulate::add ? " (add)" : "";
      check("dense_backward_weights dw" + mode, d_dw, rdw);
      check("dense_backward_weights db" + mode, d_db, rdb);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DtypesAndEpilogues, DenseOpsTest,
                         ::testing::Combine(::testing::ValuesIn(kDtypes), ::testing::Bool()),
                         [](const auto& info) {
                           return fmt::format("{}_epilogues_{}", dtype_name(std::get<0>(info.param)),
                                              std::get<1>(info.param) ? "on" : "off");
                         });

// Bad arguments are refused with one line naming the op.
TEST(DenseOpsRefusal, MismatchedShapesAndMissingGeluInput) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU: cuda_device_count() == 0";
  Backend& gpu = shared_gpu();
  DeviceTensor x(gpu, {8, 16}, DType::f32), w(gpu, {24, 16}, DType::f32), b(gpu, {24}, DType::f32),
      y(gpu, {8, 24}, DType::f32), wrong(gpu, {8, 23}, DType::f32), w_bad(gpu, {24, 15}, DType::f32);
  auto message = [](auto&& body) {
    try {
      body();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] {
              gpu.dense_forward(x.tensor(), w_bad.tensor(), b.tensor(), DenseActivation::none, nullptr,
                                y.tensor(), nullptr);
            }).find("dense_forward"),
            std::string::npos);
  EXPECT_NE(message([&] {
              gpu.dense_forward(x.tensor(), w.tensor(), b.tensor(), DenseActivation::none, nullptr,
                                wrong.tensor(), nullptr);
            }).find("dense_forward: y"),
            std::string::npos);
  EXPECT_NE(message([&] {
              gpu.dense_forward(x.tensor(), w.tensor(), b.tensor(), DenseActivation::gelu, nullptr,
                                y.tensor(), nullptr);
            }).find("GELU needs `pre`"),
            std::string::npos);
  EXPECT_NE(message([&] {
              gpu.dense_backward_data(y.tensor(), w.tensor(), DenseActivation::gelu, y.ptr(), Accumulate::add,
                                      x.tensor());
            }).find("dense_backward_data"),
            std::string::npos);
}

}  // namespace
}  // namespace dlbench
