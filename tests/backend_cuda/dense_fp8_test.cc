// The CUDA backend's FP8 dense ops (dense_fp8.cc: operands quantized to E4M3/E5M2 codes, cuBLASLt's FP8
// GEMMs with the scales' inverses and the BF16 epilogues) against the reference backend's definition of
// them: each operand's round trip through FP8, then the f32 op. With power-of-two scales both multiply
// the same FP8 values, so the results differ only in the order of summation and BF16's rounding of the
// output: the BF16 tolerance of the plain dense ops holds, for each op and for the whole backward as one
// (dense_backward, which quantizes dy once for both GEMMs). The amaxes each op folds in must be the
// reference's exactly, and an op that quantized nothing must not be within the tolerance of the unquantized
// result (so that the test could not pass on a path that forgot to quantize). Shapes: GPT-2's c_fc and
// c_proj on few rows, gpt-mini's c_attn, and one whose rows FP8 GEMMs cannot take (37: not a multiple of
// 16), where the op runs on the operands' round trips instead. On the other shapes every GEMM must run in
// FP8: none may fall back to BF16, which would give the same numbers without FP8's speed (as every GEMM
// did while the scale pointers were 4-byte aligned). Each GEMM accumulates as cuBLASLt does by default
// and, in a second run, with its fast accumulation (--fp8-fast-accumulation all). GELU taken on the way
// (into x, input_act; out of dy, output_act) must give the bits of the separate passes.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.h"
#include "cuda_test_util.h"

namespace dlbench {
namespace {

using namespace cuda_testing;

struct Fp8Case {
  int64_t rows, in, out;
};

const Fp8Case kFp8Cases[] = {{64, 128, 384}, {96, 768, 3072}, {96, 3072, 768}, {37, 96, 48}};

// Scales that put each operand's values well inside its format: x in [-1, 1] times 128 (E4M3's largest
// 448), w in [-0.2, 0.2] times 1024, dy in [-1, 1] times 8192 (E5M2's largest 57344).
const float kScales[kFp8OperandsPerDense] = {128.f, 1024.f, 8192.f};

// One layer's scaling in the memory of `backend`, amaxes starting at 0: the inverse scales first, 16 bytes
// apart from the allocation's start (kFp8InverseScaleStride), then the scales, then the amaxes.
class ScalingMemory {
 public:
  static constexpr int kScalesAt = kFp8OperandsPerDense * kFp8InverseScaleStride;
  static constexpr int kAmaxesAt = kScalesAt + kFp8OperandsPerDense;
  explicit ScalingMemory(Backend& backend) : backend_(backend) {
    std::vector<float> image(kAmaxesAt + kFp8OperandsPerDense, 0.f);
    for (int i = 0; i < kFp8OperandsPerDense; ++i) {
      image[static_cast<size_t>(i * kFp8InverseScaleStride)] = 1.f / kScales[i];
      image[static_cast<size_t>(kScalesAt + i)] = kScales[i];
    }
    memory_ = static_cast<float*>(backend.allocate(image.size() * sizeof(float)));
    backend.copy_to_device(memory_, image.data(), image.size() * sizeof(float));
  }
  ~ScalingMemory() { backend_.deallocate(memory_); }
  Fp8DenseScaling scaling() const { return {memory_ + kScalesAt, memory_, memory_ + kAmaxesAt}; }
  std::vector<float> amaxes() const {
    std::vector<float> a(kFp8OperandsPerDense);
    backend_.synchronize();
    backend_.copy_to_host(a.data(), memory_ + kAmaxesAt, a.size() * sizeof(float));
    return a;
  }

 private:
  Backend& backend_;
  float* memory_ = nullptr;
};

// One run of a layer's whole backward on the GPU where GELU is taken on the way (or after gelu_forward or
// gelu_backward): its gradients, starting from given values and added to, and a scaling of its own (its
// amaxes are of GELU's output or gradient, made in f32 on the GPU and in f64 by the reference).
struct GeluRun {
  GeluRun(Backend& gpu, const HostBuffer& dw0, const HostBuffer& db0, const HostBuffer& dx0)
      : scaling(gpu), dw(gpu, dw0), db(gpu, db0), dx(gpu, dx0) {}
  Backend::DenseGradients gradients() {
    Backend::DenseGradients g;
    g.params = Accumulate::add;
    g.dw = &dw.tensor(), g.db = &db.tensor(), g.dx = &dx.tensor();
    return g;
  }
  ScalingMemory scaling;
  DeviceTensor dw, db, dx;
};

// GELU on the way must give the bits of the separate pass: the gradients and the amaxes.
void expect_same_bits(const GeluRun& on_the_way, const GeluRun& separate, const std::string& what) {
  EXPECT_TRUE(same_bits(on_the_way.dw.download(), separate.dw.download())) << "dw " << what;
  EXPECT_TRUE(same_bits(on_the_way.db.download(), separate.db.download())) << "db " << what;
  EXPECT_TRUE(same_bits(on_the_way.dx.download(), separate.dx.download())) << "dx " << what;
  EXPECT_EQ(on_the_way.scaling.amaxes(), separate.scaling.amaxes()) << what;
}

// Epilogues on or off; fast accumulation off or everywhere.
class DenseFp8Test : public ::testing::TestWithParam<std::tuple<bool, Fp8FastAccumulation>> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU: cuda_device_count() == 0";
  }
  std::unique_ptr<Backend> ref = make_reference_backend();
};

TEST_P(DenseFp8Test, ForwardAndBackwardMatchTheReferenceRoundTrips) {
  const DType dtype = DType::bf16;
  CudaOptions options;
  options.dense_epilogues = std::get<0>(GetParam());
  options.fp8_fast_accumulation = std::get<1>(GetParam());
  Backend& gpu = shared_gpu(options);
  for (const Fp8Case& c : kFp8Cases) {
    const std::string where = fmt::format("N={} I={} O={} epilogues {} fast accumulation {}", c.rows, c.in,
                                          c.out, options.dense_epilogues ? "on" : "off",
                                          fp8_fast_accumulation_name(options.fp8_fast_accumulation));
    SCOPED_TRACE(where);
    const int64_t in_bf16_before = cuda::as_cuda(gpu).fp8_gemms_in_bf16();
    const double tol = tolerance(dtype, false, 2);
    const HostBuffer x = random_host(*ref, {c.rows, c.in}, dtype, 71),
                     w = random_host(*ref, {c.out, c.in}, dtype, 72, Layout::nchw, -0.2, 0.2),
                     b = random_host(*ref, {c.out}, dtype, 73),
                     r = random_host(*ref, {c.rows, c.out}, dtype, 74),
                     dy = random_host(*ref, {c.rows, c.out}, dtype, 75);
    DeviceTensor d_x(gpu, x), d_w(gpu, w), d_b(gpu, b), d_r(gpu, r), d_dy(gpu, dy);
    const auto wide = [&](const HostBuffer& h) { return converted(*ref, h, DType::f32); };
    const HostBuffer rx = wide(x), rw = wide(w), rb = wide(b), rr = wide(r), rdy = wide(dy);
    const ScalingMemory gpu_scaling(gpu), ref_scaling(*ref);
    const Fp8DenseScaling g8 = gpu_scaling.scaling(), r8 = ref_scaling.scaling();
    auto check = [&](const std::string& what, const DeviceTensor& actual, const HostBuffer& expected) {
      expect_close((what + " " + where).c_str(), download_wide(*ref, actual).tensor(), expected.tensor(),
                   tol);
    };

    // y = x W^T + b + r, and y = gelu(x W^T + b) with its input.
    DeviceTensor d_y(gpu, {c.rows, c.out}, dtype), d_g(gpu, {c.rows, c.out}, dtype),
        d_pre(gpu, {c.rows, c.out}, dtype);
    HostBuffer ry({c.rows, c.out}, DType::f32), rg({c.rows, c.out}, DType::f32),
        rpre({c.rows, c.out}, DType::f32);
    gpu.dense_forward(d_x.tensor(), d_w.tensor(), d_b.tensor(), DenseActivation::none, d_r.ptr(),
                      d_y.tensor(), nullptr, &g8);
    ref->dense_forward(rx.tensor(), rw.tensor(), rb.tensor(), DenseActivation::none, &rr.tensor(),
                       ry.tensor(), nullptr, &r8);
    check("fp8 dense_forward y (bias, residual)", d_y, ry);
    gpu.dense_forward(d_x.tensor(), d_w.tensor(), d_b.tensor(), DenseActivation::gelu, nullptr, d_g.tensor(),
                      d_pre.ptr(), &g8);
    ref->dense_forward(rx.tensor(), rw.tensor(), rb.tensor(), DenseActivation::gelu, nullptr, rg.tensor(),
                       &rpre.tensor(), &r8);
    check("fp8 dense_forward pre (GELU)", d_pre, rpre);
    check("fp8 dense_forward y (GELU)", d_g, rg);
    {
      // The unquantized result is off by FP8's rounding (measured 2-4%), far more than BF16's (under 0.5%).
      HostBuffer unquantized({c.rows, c.out}, DType::f32);
      ref->dense_forward(rx.tensor(), rw.tensor(), rb.tensor(), DenseActivation::none, &rr.tensor(),
                         unquantized.tensor(), nullptr);
      EXPECT_GT(relative_error(download_wide(*ref, d_y).tensor(), unquantized.tensor()), tol / 2)
          << "the FP8 forward matches the unquantized one: nothing was quantized";
    }

    // dx = dy W, overwritten and added to.
    for (const Accumulate accumulate : {Accumulate::overwrite, Accumulate::add}) {
      const HostBuffer dx0 = random_host(*ref, {c.rows, c.in}, dtype, 76);
      DeviceTensor d_dx(gpu, dx0);
      HostBuffer rdx = wide(dx0);
      gpu.dense_backward_data(d_dy.tensor(), d_w.tensor(), DenseActivation::none, nullptr, accumulate,
                              d_dx.tensor(), &g8);
      ref->dense_backward_data(rdy.tensor(), rw.tensor(), DenseActivation::none, nullptr, accumulate,
                               rdx.tensor(), &r8);
      check(accumulate == Accumulate::add ? "fp8 dense_backward_data dx (add)" : "fp8 dense_backward_data dx",
            d_dx, rdx);
    }
    {
      // Through GELU: the layer after it maps [N, out] to [N, in] with W2 [in, out].
      const HostBuffer w2 = random_host(*ref, {c.in, c.out}, dtype, 77, Layout::nchw, -0.2, 0.2),
                       dy2 = random_host(*ref, {c.rows, c.in}, dtype, 78);
      DeviceTensor d_w2(gpu, w2), d_dy2(gpu, dy2), d_dh(gpu, {c.rows, c.out}, dtype);
      const HostBuffer rpre_exact = wide(d_pre.download());
      HostBuffer rdh({c.rows, c.out}, DType::f32);
      gpu.dense_backward_data(d_dy2.tensor(), d_w2.tensor(), DenseActivation::gelu, d_pre.ptr(),
                              Accumulate::overwrite, d_dh.tensor(), &g8);
      ref->dense_backward_data(wide(dy2).tensor(), wide(w2).tensor(), DenseActivation::gelu,
                               &rpre_exact.tensor(), Accumulate::overwrite, rdh.tensor(), &r8);
      check("fp8 dense_backward_data dh (GELU)", d_dh, rdh);
    }

    // dW = dy^T x (FP8) and db = the sum of dy (as it is), overwritten and added to.
    for (const Accumulate accumulate : {Accumulate::overwrite, Accumulate::add}) {
      const HostBuffer dw0 = random_host(*ref, {c.out, c.in}, dtype, 79),
                       db0 = random_host(*ref, {c.out}, dtype, 80);
      DeviceTensor d_dw(gpu, dw0), d_db(gpu, db0);
      HostBuffer rdw = wide(dw0), rdb = wide(db0);
      gpu.dense_backward_weights(d_dy.tensor(), d_x.tensor(), accumulate, d_dw.tensor(), &d_db.tensor(), &g8);
      ref->dense_backward_weights(rdy.tensor(), rx.tensor(), accumulate, rdw.tensor(), &rdb.tensor(), &r8);
      const std::string mode = accumulate == Accumulate::add ? " (add)" : "";
      check("fp8 dense_backward_weights dw" + mode, d_dw, rdw);
      check("fp8 dense_backward_weights db" + mode, d_db, rdb);
    }

    // The whole backward in one op (dy quantized once for both GEMMs on the GPU), plain and through GELU.
    for (const bool gelu : {false, true}) {
      const HostBuffer dw0 = random_host(*ref, {c.out, c.in}, dtype, 81),
                       db0 = random_host(*ref, {c.out}, dtype, 82),
                       dx0 = random_host(*ref, {c.rows, c.in}, dtype, 83),
                       pre = random_host(*ref, {c.rows, c.in}, dtype, 84);
      DeviceTensor d_dw(gpu, dw0), d_db(gpu, db0), d_dx(gpu, dx0), d_pre_in(gpu, pre);
      HostBuffer rdw = wide(dw0), rdb = wide(db0), rdx = wide(dx0), rpre_in = wide(pre);
      Backend::DenseGradients gg, rg_;
      gg.params = rg_.params = Accumulate::add;
      gg.dw = &d_dw.tensor(), gg.db = &d_db.tensor(), gg.dx = &d_dx.tensor();
      rg_.dw = &rdw.tensor(), rg_.db = &rdb.tensor(), rg_.dx = &rdx.tensor();
      gg.accumulate = rg_.accumulate = gelu ? Accumulate::overwrite : Accumulate::add;
      if (gelu) {
        gg.act = rg_.act = DenseActivation::gelu;
        gg.pre = &d_pre_in.tensor(), rg_.pre = &rpre_in.tensor();
      }
      gpu.dense_backward(d_dy.tensor(), d_x.tensor(), d_w.tensor(), gg, &g8);
      ref->dense_backward(rdy.tensor(), rx.tensor(), rw.tensor(), rg_, &r8);
      const std::string mode = gelu ? " (GELU)" : "";
      check("fp8 dense_backward dw" + mode, d_dw, rdw);
      check("fp8 dense_backward db" + mode, d_db, rdb);
      check("fp8 dense_backward dx" + mode, d_dx, rdx);
    }

    // GELU's gradient taken by the pass that quantizes dy (output_act, as the MLP's c_fc in FP8), and the
    // layer's input given as GELU's input (input_act, as the MLP's c_proj in FP8: the forward too): the
    // same bits as gelu_backward or gelu_forward first and the ops after it, and the reference's result
    // within the tolerance. The reference is given GELU's BF16 result as the GPU stores it: taken again
    // in f32, it would round a few percent of the values to the other FP8 neighbour, which moves dw and
    // dx by ~3% (measured on an H100), more than the tolerance, through no fault of either side.
    {
      const HostBuffer dw0 = random_host(*ref, {c.out, c.in}, dtype, 86),
                       db0 = random_host(*ref, {c.out}, dtype, 87),
                       dx0 = random_host(*ref, {c.rows, c.in}, dtype, 88);
      auto check_reference = [&](const GeluRun& run, const HostBuffer& rdy_, const Tensor& rx_,
                                 const std::string& what) {
        Backend::DenseGradients rg;
        HostBuffer rdw = wide(dw0), rdb = wide(db0), rdx = wide(dx0), rdy_scratch = wide(rdy_);
        const ScalingMemory ref_scaling(*ref);
        const Fp8DenseScaling r8_gelu = ref_scaling.scaling();
        rg.params = Accumulate::add;
        rg.dw = &rdw.tensor(), rg.db = &rdb.tensor(), rg.dx = &rdx.tensor();
        ref->dense_backward(rdy_scratch.tensor(), rx_, rw.tensor(), rg, &r8_gelu);
        check("fp8 dense_backward dw " + what, run.dw, rdw);
        check("fp8 dense_backward db " + what, run.db, rdb);
        check("fp8 dense_backward dx " + what, run.dx, rdx);
      };

      // Out of dy: y in [-3, 3] went through GELU.
      const HostBuffer y = random_host(*ref, {c.rows, c.out}, dtype, 85, Layout::nchw, -3, 3);
      DeviceTensor d_out(gpu, y), d_dy_on_the_way(gpu, dy), d_dy_separate(gpu, dy);
      GeluRun out_on_the_way(gpu, dw0, db0, dx0), out_separate(gpu, dw0, db0, dx0);
      Backend::DenseGradients g = out_on_the_way.gradients();
      g.output_act = DenseActivation::gelu, g.output = &d_out.tensor();
      const Fp8DenseScaling out8 = out_on_the_way.scaling.scaling(),
                            out_separate8 = out_separate.scaling.scaling();
      gpu.dense_backward(d_dy_on_the_way.tensor(), d_x.tensor(), d_w.tensor(), g, &out8);
      gpu.gelu_backward(d_out.tensor(), d_dy_separate.tensor(), d_dy_separate.tensor());
      gpu.dense_backward(d_dy_separate.tensor(), d_x.tensor(), d_w.tensor(), out_separate.gradients(),
                         &out_separate8);
      expect_same_bits(out_on_the_way, out_separate, "(GELU's gradient out of dy)");
      check_reference(out_on_the_way, d_dy_separate.download(), rx.tensor(), "(GELU's gradient out of dy)");

      // Into x: h in [-3, 3] is GELU's input, the layer's input gelu(h).
      const HostBuffer h = random_host(*ref, {c.rows, c.in}, dtype, 89, Layout::nchw, -3, 3);
      DeviceTensor d_h(gpu, h), d_gelu_h(gpu, {c.rows, c.in}, dtype),
          d_y_on_the_way(gpu, {c.rows, c.out}, dtype), d_y_separate(gpu, {c.rows, c.out}, dtype);
      gpu.gelu_forward(d_h.tensor(), d_gelu_h.tensor());
      GeluRun in_on_the_way(gpu, dw0, db0, dx0), in_separate(gpu, dw0, db0, dx0);
      const Fp8DenseScaling in8 = in_on_the_way.scaling.scaling(),
                            in_separate8 = in_separate.scaling.scaling();
      gpu.dense_forward(d_h.tensor(), d_w.tensor(), d_b.tensor(), DenseActivation::none, d_r.ptr(),
                        d_y_on_the_way.tensor(), nullptr, &in8, DenseActivation::gelu);
      gpu.dense_forward(d_gelu_h.tensor(), d_w.tensor(), d_b.tensor(), DenseActivation::none, d_r.ptr(),
                        d_y_separate.tensor(), nullptr, &in_separate8);
      EXPECT_TRUE(same_bits(d_y_on_the_way.download(), d_y_separate.download())) << "y (GELU into x)";
      g = in_on_the_way.gradients();
      g.input_act = DenseActivation::gelu;
      gpu.dense_backward(d_dy.tensor(), d_h.tensor(), d_w.tensor(), g, &in8);
      gpu.dense_backward(d_dy.tensor(), d_gelu_h.tensor(), d_w.tensor(), in_separate.gradients(),
                         &in_separate8);
      expect_same_bits(in_on_the_way, in_separate, "(GELU into x)");
      const HostBuffer r_gelu_h = wide(d_gelu_h.download());
      HostBuffer ry_gelu({c.rows, c.out}, DType::f32);
      {
        const ScalingMemory ref_scaling(*ref);
        const Fp8DenseScaling r8_gelu = ref_scaling.scaling();
        ref->dense_forward(r_gelu_h.tensor(), rw.tensor(), rb.tensor(), DenseActivation::none, &rr.tensor(),
                           ry_gelu.tensor(), nullptr, &r8_gelu);
      }
      check("fp8 dense_forward y (GELU into x)", d_y_on_the_way, ry_gelu);
      check_reference(in_on_the_way, dy, r_gelu_h.tensor(), "(GELU into x)");
    }

    // Shapes FP8 GEMMs take ran every GEMM in FP8.
    if (c.rows % 16 == 0) {
      EXPECT_EQ(cuda::as_cuda(gpu).fp8_gemms_in_bf16(), in_bf16_before)
          << "cuBLASLt ran no FP8 GEMM for some of these ops: they ran in BF16 on FP8-rounded operands";
    }

    // Every op folded its operands' largest |value|: the same floats on both sides.
    const std::vector<float> gpu_amax = gpu_scaling.amaxes(), ref_amax = ref_scaling.amaxes();
    for (int i = 0; i < kFp8OperandsPerDense; ++i) {
      EXPECT_EQ(gpu_amax[static_cast<size_t>(i)], ref_amax[static_cast<size_t>(i)]) << "operand " << i;
      EXPECT_GT(gpu_amax[static_cast<size_t>(i)], 0.f) << "operand " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EpiloguesAndAccumulation, DenseFp8Test,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(Fp8FastAccumulation::off,
                                                                                 Fp8FastAccumulation::all)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "epilogues_on" : "epilogues_off") +
                                  "_fast_accumulation_" + fp8_fast_accumulation_name(std::get<1>(info.param));
                         });

// x^T's and W^T's codes kept from the forward (Fp8DenseScaling::input_codes_transposed and
// weight_codes_transposed, as an FP8 network's dense layers keep them) give the backward the bits of
// quantizing x and W again, also where GELU is taken into x on the way (the MLP's c_proj): the forward
// writes them, and the backward reads them, for zeroed x^T codes change dw and zeroed W^T codes dx (where
// FP8 GEMMs run: not at 37 rows), each leaving the other gradient as it was.
TEST(DenseFp8KeptCodes, GiveTheBackwardTheBitsOfQuantizingXAndWAgain) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU: cuda_device_count() == 0";
  Backend& gpu = shared_gpu();
  std::unique_ptr<Backend> ref = make_reference_backend();
  const DType dtype = DType::bf16;
  for (const Fp8Case& c : kFp8Cases) {
    for (const DenseActivation input_act : {DenseActivation::none, DenseActivation::gelu}) {
      const std::string where = fmt::format("N={} I={} O={}{}", c.rows, c.in, c.out,
                                            input_act == DenseActivation::gelu ? ", GELU into x" : "");
      SCOPED_TRACE(where);
      const HostBuffer x = random_host(*ref, {c.rows, c.in}, dtype, 91, Layout::nchw, -3, 3),
                       w = random_host(*ref, {c.out, c.in}, dtype, 92, Layout::nchw, -0.2, 0.2),
                       b = random_host(*ref, {c.out}, dtype, 93),
                       dy = random_host(*ref, {c.rows, c.out}, dtype, 94),
                       dw0 = random_host(*ref, {c.out, c.in}, dtype, 95),
                       db0 = random_host(*ref, {c.out}, dtype, 96),
                       dx0 = random_host(*ref, {c.rows, c.in}, dtype, 97);
      DeviceTensor d_x(gpu, x), d_w(gpu, w), d_b(gpu, b), d_dy(gpu, dy);
      DeviceTensor x_codes(gpu, {(c.rows * c.in + 3) / 4}, DType::i32),
          w_codes(gpu, {(c.out * c.in + 3) / 4}, DType::i32);
      // A forward, then the whole backward (GEMMs added into dw and dx) and each GEMM's op alone.
      struct Run {
        Run(Backend& gpu, const HostBuffer& dw0, const HostBuffer& db0, const HostBuffer& dx0, int64_t rows,
            int64_t out)
            : fused(gpu, dw0, db0, dx0),
              alone_dw(gpu, dw0),
              alone_db(gpu, db0),
              alone_dx(gpu, dx0),
              y(gpu, {rows, out}, DType::bf16) {}
        GeluRun fused;
        DeviceTensor alone_dw, alone_db, alone_dx, y;
      };
      enum class Zeroed { none, x_codes, w_codes };
      auto run = [&](Run& r, bool keep, Zeroed zeroed) {
        Fp8DenseScaling s = r.fused.scaling.scaling();
        if (keep) {
          s.input_codes_transposed = static_cast<uint8_t*>(x_codes.tensor().data());
          s.weight_codes_transposed = static_cast<uint8_t*>(w_codes.tensor().data());
        }
        gpu.dense_forward(d_x.tensor(), d_w.tensor(), d_b.tensor(), DenseActivation::none, nullptr,
                          r.y.tensor(), nullptr, &s, input_act);
        if (zeroed == Zeroed::x_codes) x_codes.upload(HostBuffer(x_codes.tensor().dims(), DType::i32));
        if (zeroed == Zeroed::w_codes) w_codes.upload(HostBuffer(w_codes.tensor().dims(), DType::i32));
        Backend::DenseGradients g = r.fused.gradients();
        g.input_act = input_act;
        gpu.dense_backward(d_dy.tensor(), d_x.tensor(), d_w.tensor(), g, &s);
        if (input_act == DenseActivation::none)
          gpu.dense_backward_weights(d_dy.tensor(), d_x.tensor(), Accumulate::add, r.alone_dw.tensor(),
                                     &r.alone_db.tensor(), &s);
        gpu.dense_backward_data(d_dy.tensor(), d_w.tensor(), DenseActivation::none, nullptr, Accumulate::add,
                                r.alone_dx.tensor(), &s);
      };
      Run again(gpu, dw0, db0, dx0, c.rows, c.out), kept(gpu, dw0, db0, dx0, c.rows, c.out),
          zeroed_x(gpu, dw0, db0, dx0, c.rows, c.out), zeroed_w(gpu, dw0, db0, dx0, c.rows, c.out);
      run(again, false, Zeroed::none);
      run(kept, true, Zeroed::none);
      run(zeroed_x, true, Zeroed::x_codes);
      run(zeroed_w, true, Zeroed::w_codes);
      EXPECT_TRUE(same_bits(kept.y.download(), again.y.download())) << "y";
      expect_same_bits(kept.fused, again.fused, "(dense_backward)");
      if (input_act == DenseActivation::none) {
        EXPECT_TRUE(same_bits(kept.alone_dw.download(), again.alone_dw.download())) << "dw (weights alone)";
      }
      EXPECT_TRUE(same_bits(kept.alone_dx.download(), again.alone_dx.download())) << "dx (data alone)";
      const bool fp8_gemms = c.rows % 16 == 0;  // else the GEMMs take the operands' round trips
      if (fp8_gemms) {
        if (input_act == DenseActivation::none) {
          EXPECT_FALSE(same_bits(zeroed_x.alone_dw.download(), again.alone_dw.download()))
              << "dense_backward_weights did not read the kept x^T codes";
        }
        EXPECT_FALSE(same_bits(zeroed_x.fused.dw.download(), again.fused.dw.download()))
            << "dense_backward did not read the kept x^T codes";
        EXPECT_FALSE(same_bits(zeroed_w.alone_dx.download(), again.alone_dx.download()))
            << "dense_backward_data did not read the kept W^T codes";
        EXPECT_FALSE(same_bits(zeroed_w.fused.dx.download(), again.fused.dx.download()))
            << "dense_backward did not read the kept W^T codes";
      }
      EXPECT_TRUE(same_bits(zeroed_x.fused.dx.download(), again.fused.dx.download()))
          << "the data gradient needs no x";
      EXPECT_TRUE(same_bits(zeroed_w.fused.dw.download(), again.fused.dw.download()))
          << "the weight gradient needs no W";
    }
  }
}

// The step end on the GPU follows the host's rule: histories, scales and inverses equal to the bit.
TEST(Fp8ScalesOnTheGpu, UpdateMatchesTheHost) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU: cuda_device_count() == 0";
  Backend& gpu = shared_gpu();
  std::unique_ptr<Backend> ref = make_reference_backend();
  const int count = 6, length = 3;
  std::vector<float> image(static_cast<size_t>(count * kFp8InverseScaleStride), 1.f);  // inverse, 16 B apart
  for (int i = 0; i < count; ++i) image.push_back(1.f);                                // scale
  for (int i = 0; i < count; ++i) image.push_back(0.37f * float(i));  // amax (operand 0 saw nothing)
  for (int i = 0; i < count * length; ++i) image.push_back(0.1f * float(i % 5));  // history
  const std::vector<Fp8Format> formats = {Fp8Format::e4m3, Fp8Format::e4m3, Fp8Format::e5m2,
                                          Fp8Format::e4m3, Fp8Format::e4m3, Fp8Format::e5m2};
  const size_t bytes = image.size() * sizeof(float);
  std::vector<float> host_state = image;
  auto* device_state = static_cast<float*>(gpu.allocate(bytes + formats.size()));
  gpu.copy_to_device(device_state, image.data(), bytes);
  gpu.copy_to_device(reinterpret_cast<unsigned char*>(device_state) + bytes, formats.data(), formats.size());
  auto state = [&](float* base, const Fp8Format* f) {
    float* scale = base + count * kFp8InverseScaleStride;
    return Fp8ScalingState{scale, base, scale + count, scale + 2 * count, f, count, length, 1};
  };
  for (int step = 0; step < 4; ++step) {
    gpu.update_fp8_scales(state(device_state, reinterpret_cast<const Fp8Format*>(
                                                  reinterpret_cast<unsigned char*>(device_state) + bytes)));
    ref->update_fp8_scales(state(host_state.data(), formats.data()));
  }
  std::vector<float> from_gpu(image.size());
  gpu.synchronize();
  gpu.copy_to_host(from_gpu.data(), device_state, bytes);
  gpu.deallocate(device_state);
  EXPECT_EQ(from_gpu, host_state);
}

}  // namespace
}  // namespace dlbench
