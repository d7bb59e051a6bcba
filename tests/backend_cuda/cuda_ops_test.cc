// The CUDA backend's other ops against the reference backend: pooling (cuDNN; NHWC max pooling our kernels),
// GEMM (cuBLAS), ReLU, bias, softmax cross-entropy, elementwise utilities, casts, check_finite and the SGD
// update (our kernels), in f32/f16/bf16; memory and the factory; and a CUDA-graph capture of a training-like
// sequence of ops, which fails if any op synchronises with the host or allocates.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"

namespace dlbench {
namespace {

using namespace cuda_testing;

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU: cuda_device_count() == 0";
  }
  std::unique_ptr<Backend> ref = make_reference_backend();
};

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

// ---------------------------------------------------------------------------------------------------------
// Pooling

struct PoolCase {
  int64_t n, c, h, w, k, stride, pad;
  PoolKind kind;
  bool ties = false;  // x after a ReLU: windows of equal zeros, whose gradient must go to the first one
};

const PoolCase kPoolCases[] = {
    {2, 5, 9, 11, 3, 2, 1, PoolKind::max},  // ResNet stem pool on odd sizes, one channel at a time
    {2, 16, 8, 8, 2, 2, 0, PoolKind::max},
    {3, 7, 7, 7, 7, 1, 0, PoolKind::average},       // global average
    {2, 64, 7, 7, 7, 1, 0, PoolKind::average},      // global average, 16-byte vectors
    {3, 12, 5, 5, 5, 2, 0, PoolKind::average},      // global average: vectors in f32, not in f16 / bf16
    {2, 8, 9, 9, 3, 2, 1, PoolKind::average},       // padding excluded from the divisor
    {2, 64, 12, 13, 3, 2, 1, PoolKind::max, true},  // the stem's channels: 16-byte vectors, ties
    {2, 8, 7, 7, 3, 1, 1, PoolKind::max, true},     // stride 1: up to 9 windows cover an input
    {2, 64, 8, 10, 3, 2, 1, PoolKind::max},         // the stem pool's 2 x 2 blocks on even sizes
    {1, 3, 6, 5, 3, 2, 1, PoolKind::max, true},     // blocks one channel at a time, ties, odd width
};

class PoolTest : public CudaOpsTest,
                 public ::testing::WithParamInterface<std::tuple<PoolCase, Layout, DType>> {};

TEST_P(PoolTest, MatchesReference) {
  const auto [pc, layout, dtype] = GetParam();
  Backend& gpu = shared_gpu();
  PoolGeometry g;
  g.batch = pc.n, g.channels = pc.c, g.in_h = pc.h, g.in_w = pc.w, g.kernel_h = g.kernel_w = pc.k;
  g.stride_h = g.stride_w = pc.stride, g.pad_h = g.pad_w = pc.pad, g.kind = pc.kind, g.layout = layout;
  g.dtype = dtype;
  PoolGeometry g_ref = g;
  g_ref.dtype = DType::f32;
  const std::vector<int64_t> in{pc.n, pc.c, pc.h, pc.w}, out{pc.n, pc.c, g.out_h(), g.out_w()};
  HostBuffer drawn = random_host(*ref, in, DType::f32, 31, layout);
  if (pc.ties) {
    HostBuffer raw = copy_of(drawn);
    ref->relu_forward(raw.tensor(), drawn.tensor());
  }
  // The reference gets exactly the values the GPU does (rounded to dtype first).
  HostBuffer x = converted(*ref, drawn, dtype), dy = random_host(*ref, out, dtype, 32, layout);
  HostBuffer x_ref = converted(*ref, x, DType::f32), dy_ref = converted(*ref, dy, DType::f32);
  auto plan = gpu.plan_pool(g);
  auto ref_plan = ref->plan_pool(g_ref);
  // NHWC max pooling (dlbench's kernels) keeps one argmax byte per output; cuDNN's pooling nothing.
  const bool saves = pc.kind == PoolKind::max && layout == Layout::nhwc;
  EXPECT_EQ(plan->saved_bytes(), saves ? static_cast<size_t>(pc.n * pc.c * g.out_h() * g.out_w()) : 0u);
  auto saved = plan->saved_bytes() > 0 ? workspace(gpu, plan->saved_bytes()) : nullptr;
  void* saved_ptr = saved ? saved->tensor().data() : nullptr;
  DeviceTensor xg(gpu, x), dyg(gpu, dy), yg(gpu, out, dtype, layout), dxg(gpu, in, dtype, layout);
  HostBuffer y_ref(out, DType::f32, layout), dx_ref(in, DType::f32, layout);
  gpu.pool_forward(*plan, xg.tensor(), yg.tensor(), saved_ptr);
  ref->pool_forward(*ref_plan, x_ref.tensor(), y_ref.tensor(), nullptr);
  // Max is exact in any dtype; an average is one rounding.
  const double tol = pc.kind == PoolKind::max ? 0.0 : tolerance(dtype) * (dtype == DType::f32 ? 0.1 : 1.0);
  expect_close("forward", download_wide(*ref, yg).tensor(), y_ref.tensor(), tol);
  ref->pool_backward(*ref_plan, x_ref.tensor(), y_ref.tensor(), dy_ref.tensor(), nullptr, dx_ref.tensor());
  // Overlapping windows sum gradients into one input (one rounding in f16/bf16). With saved positions,
  // and (where there are some) without: the backward then finds each window's maximum again from x.
  gpu.fill(dxg.tensor(), 7.0);  // the backward overwrites dx, windowless inputs included
  gpu.pool_backward(*plan, xg.tensor(), yg.tensor(), dyg.tensor(), saved_ptr, dxg.tensor());
  expect_close("backward", download_wide(*ref, dxg).tensor(), dx_ref.tensor(), tolerance(dtype) * 0.5);
  if (saved_ptr) {
    const HostBuffer with_positions = dxg.download();
    gpu.fill(dxg.tensor(), 7.0);
    gpu.pool_backward(*plan, xg.tensor(), yg.tensor(), dyg.tensor(), nullptr, dxg.tensor());
    expect_close("backward, argmax found again", download_wide(*ref, dxg).tensor(), dx_ref.tensor(),
                 tolerance(dtype) * 0.5);
    // The same sums in the same order (the stem pool's blocks with positions, the gather without): the
    // same bits.
    const HostBuffer without_positions = dxg.download();
    EXPECT_EQ(std::memcmp(with_positions.tensor().data(), without_positions.tensor().data(),
                          with_positions.tensor().bytes()),
              0);
  }
}

// A NaN anywhere in a window is the window's maximum, so a diverged activation reaches check_finite.
TEST_F(CudaOpsTest, MaxPoolPropagatesNaN) {
  Backend& gpu = shared_gpu();
  PoolGeometry g;
  g.batch = 1, g.channels = 8, g.in_h = g.in_w = 5, g.kernel_h = g.kernel_w = 3, g.stride_h = g.stride_w = 2;
  g.pad_h = g.pad_w = 1, g.kind = PoolKind::max, g.layout = Layout::nhwc, g.dtype = DType::f32;
  HostBuffer x = random_host(*ref, {1, 8, 5, 5}, DType::f32, 5, Layout::nhwc);
  // Pixel (1, 1) of channel 3: inside the four windows of outputs (0..1, 0..1), last in one's scan and
  // first in another's.
  x.tensor().ptr<float>()[(1 * 5 + 1) * 8 + 3] = std::numeric_limits<float>::quiet_NaN();
  auto plan = gpu.plan_pool(g);
  auto saved = workspace(gpu, plan->saved_bytes());
  DeviceTensor xg(gpu, x), yg(gpu, {1, 8, 3, 3}, DType::f32, Layout::nhwc);
  gpu.pool_forward(*plan, xg.tensor(), yg.tensor(), saved->tensor().data());
  HostBuffer y = yg.download();
  for (int64_t p = 0; p < 3; ++p)
    for (int64_t q = 0; q < 3; ++q)
      for (int64_t c = 0; c < 8; ++c) {
        const float v = y.tensor().ptr<float>()[(p * 3 + q) * 8 + c];
        EXPECT_EQ(std::isnan(v), c == 3 && p <= 1 && q <= 1)
            << "output " << p << "," << q << " channel " << c;
      }
}

INSTANTIATE_TEST_SUITE_P(Shapes, PoolTest,
                         ::testing::Combine(::testing::ValuesIn(kPoolCases),
                                            ::testing::Values(Layout::nchw, Layout::nhwc),
                                            ::testing::ValuesIn(kDtypes)),
                         [](const auto& info) {
                           return fmt::format("case{}_{}_{}", info.index / 6,
                                              layout_name(std::get<1>(info.param)),
                                              dtype_name(std::get<2>(info.param)));
                         });

// ---------------------------------------------------------------------------------------------------------
// GEMM

void run_gemm(Backend& ref, Backend& gpu, DType dtype, bool tf32, int64_t m, int64_t n, int64_t k) {
  const DType wide = reference_dtype(dtype);
  for (Transpose ta : {Transpose::no, Transpose::yes}) {
    for (Transpose tb : {Transpose::no, Transpose::yes}) {
      for (float beta : {0.f, 0.3f}) {
        SCOPED_TRACE(fmt::format("{} m={} n={} k={} ta={} tb={} beta={}", dtype_name(dtype), m, n, k,
                                 ta == Transpose::yes, tb == Transpose::yes, beta));
        const auto ad = ta == Transpose::no ? std::vector<int64_t>{m, k} : std::vector<int64_t>{k, m};
        const auto bd = tb == Transpose::no ? std::vector<int64_t>{k, n} : std::vector<int64_t>{n, k};
        HostBuffer a = random_host(ref, ad, dtype, 51), b = random_host(ref, bd, dtype, 52),
                   c = random_host(ref, {m, n}, dtype, 53);
        HostBuffer a_ref = converted(ref, a, wide), b_ref = converted(ref, b, wide),
                   c_ref = converted(ref, c, wide);
        DeviceTensor ag(gpu, a), bg(gpu, b), cg(gpu, c);
        if (beta == 0.f) gpu.fill(cg.tensor(), std::nan(""));  // beta == 0 must not read c
        gpu.gemm(ta, tb, m, n, k, 0.7f, ag.tensor(), bg.tensor(), beta, cg.tensor());
        ref.gemm(ta, tb, m, n, k, 0.7f, a_ref.tensor(), b_ref.tensor(), beta, c_ref.tensor());
        expect_close("gemm", download_wide(ref, cg).tensor(), c_ref.tensor(), tolerance(dtype, tf32));
      }
    }
  }
}

TEST_F(CudaOpsTest, Gemm) {
  for (DType dtype : kDtypes) {
    run_gemm(*ref, shared_gpu(), dtype, false, 13, 17, 29);
    run_gemm(*ref, shared_gpu(), dtype, false, 64, 96, 300);
  }
  run_gemm(*ref, shared_gpu(true), DType::f32, true, 64, 96, 300);
  run_gemm(*ref, shared_gpu(), DType::f64, false, 13, 17, 29);
}

// ---------------------------------------------------------------------------------------------------------
// ReLU, bias, loss

TEST_F(CudaOpsTest, Relu) {
  Backend& gpu = shared_gpu();
  for (DType dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<int64_t> dims{3, 5, 7, 11};
    HostBuffer x = random_host(*ref, dims, dtype, 41), dy = random_host(*ref, dims, dtype, 42);
    HostBuffer x_ref = converted(*ref, x, DType::f32), dy_ref = converted(*ref, dy, DType::f32);
    DeviceTensor xg(gpu, x), dyg(gpu, dy), yg(gpu, dims, dtype), dxg(gpu, dims, dtype);
    HostBuffer y_ref(dims, DType::f32), dx_ref(dims, DType::f32);
    gpu.relu_forward(xg.tensor(), yg.tensor());
    ref->relu_forward(x_ref.tensor(), y_ref.tensor());
    expect_close("relu forward", download_wide(*ref, yg).tensor(), y_ref.tensor(), 0.0);
    gpu.relu_backward(yg.tensor(), dyg.tensor(), dxg.tensor());
    ref->relu_backward(y_ref.tensor(), dy_ref.tensor(), dx_ref.tensor());
    expect_close("relu backward", download_wide(*ref, dxg).tensor(), dx_ref.tensor(), 0.0);
    gpu.relu_forward(xg.tensor(), xg.tensor());  // in place
    expect_close("relu in place", download_wide(*ref, xg).tensor(), y_ref.tensor(), 0.0);
  }
}

TEST_F(CudaOpsTest, BiasForwardAndBackward) {
  Backend& gpu = shared_gpu();
  for (DType dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    HostBuffer y = random_host(*ref, {9, 1000}, dtype, 61), bias = random_host(*ref, {1000}, dtype, 62);
    HostBuffer y_ref = converted(*ref, y, DType::f32), bias_ref = converted(*ref, bias, DType::f32);
    DeviceTensor yg(gpu, y), biasg(gpu, bias);
    gpu.add_bias(yg.tensor(), biasg.tensor());
    ref->add_bias(y_ref.tensor(), bias_ref.tensor());
    expect_close("add_bias", download_wide(*ref, yg).tensor(), y_ref.tensor(), tolerance(dtype) * 0.5);
    // Columns one access covers whole or not (element by element), one chunk of rows or many, a last
    // column tile part-full: c_attn's width over rows in many chunks, one tile and a bit.
    for (const auto& [rows, cols] :
         std::vector<std::pair<int64_t, int64_t>>{{37, 10}, {4099, 3840}, {200, 264}, {130, 1000}}) {
      SCOPED_TRACE(fmt::format("dy [{}, {}]", rows, cols));
      HostBuffer dy = random_host(*ref, {rows, cols}, dtype, 63);
      HostBuffer dy_ref = converted(*ref, dy, DType::f32);
      DeviceTensor dyg(gpu, dy);
      for (Accumulate acc : {Accumulate::overwrite, Accumulate::add}) {
        HostBuffer db = random_host(*ref, {cols}, dtype, 64);
        HostBuffer db_ref = converted(*ref, db, DType::f32);
        DeviceTensor dbg(gpu, db);
        gpu.bias_backward(dyg.tensor(), dbg.tensor(), acc);
        ref->bias_backward(dy_ref.tensor(), db_ref.tensor(), acc);
        expect_close(acc == Accumulate::add ? "bias_backward (+=)" : "bias_backward",
                     download_wide(*ref, dbg).tensor(), db_ref.tensor(), tolerance(dtype));
      }
      // The sums are added in a fixed order: the same bits twice.
      DeviceTensor first(gpu, random_host(*ref, {cols}, dtype, 65)),
          second(gpu, random_host(*ref, {cols}, dtype, 66));
      gpu.bias_backward(dyg.tensor(), first.tensor(), Accumulate::overwrite);
      gpu.bias_backward(dyg.tensor(), second.tensor(), Accumulate::overwrite);
      expect_close("bias_backward twice", download_wide(*ref, first).tensor(),
                   download_wide(*ref, second).tensor(), 0.0);
    }
    // A column range of a wider dy: the q and v thirds of c_attn's [rows, 3C], and a range whose rows are
    // not 16-byte aligned (element by element).
    HostBuffer qkv = random_host(*ref, {4099, 3 * 264}, dtype, 67);
    HostBuffer qkv_ref = converted(*ref, qkv, DType::f32);
    DeviceTensor qkvg(gpu, qkv);
    for (const auto& [first, cols] :
         std::vector<std::pair<int64_t, int64_t>>{{0, 264}, {528, 264}, {3, 100}}) {
      SCOPED_TRACE(fmt::format("columns [{}, {})", first, first + cols));
      for (Accumulate acc : {Accumulate::overwrite, Accumulate::add}) {
        HostBuffer db = random_host(*ref, {cols}, dtype, 68);
        HostBuffer db_ref = converted(*ref, db, DType::f32);
        DeviceTensor dbg(gpu, db);
        gpu.bias_backward_columns(qkvg.tensor(), first, dbg.tensor(), acc);
        ref->bias_backward_columns(qkv_ref.tensor(), first, db_ref.tensor(), acc);
        expect_close("bias_backward_columns", download_wide(*ref, dbg).tensor(), db_ref.tensor(),
                     tolerance(dtype));
      }
    }
  }
}

TEST_F(CudaOpsTest, SoftmaxCrossEntropy) {
  Backend& gpu = shared_gpu();
  const int64_t rows = 7, classes = 10;
  HostBuffer labels({rows}, DType::i32);
  for (int64_t i = 0; i < rows; ++i) labels.ptr<int32_t>()[i] = static_cast<int32_t>((i * 3) % classes);
  DeviceTensor labelsg(gpu, labels);
  for (DType dtype : kDtypes) {
    HostBuffer logits = random_host(*ref, {rows, classes}, dtype, 71, Layout::nchw, -4.0, 4.0);
    HostBuffer logits_ref = converted(*ref, logits, DType::f32);
    DeviceTensor logitsg(gpu, logits);
    for (float smoothing : {0.f, 0.1f}) {
      SCOPED_TRACE(fmt::format("{} smoothing {}", dtype_name(dtype), smoothing));
      DeviceTensor probs(gpu, {rows, classes}, DType::f32), loss(gpu, {1}, DType::f32),
          d(gpu, {rows, classes}, dtype);
      HostBuffer probs_ref({rows, classes}, DType::f32), loss_ref({1}, DType::f32),
          d_ref({rows, classes}, DType::f32);
      gpu.softmax_cross_entropy_forward(logitsg.tensor(), labelsg.tensor(), smoothing, probs.tensor(),
                                        loss.tensor());
      ref->softmax_cross_entropy_forward(logits_ref.tensor(), labels.tensor(), smoothing, probs_ref.tensor(),
                                         loss_ref.tensor());
      expect_close("probs", probs.download().tensor(), probs_ref.tensor(), 1e-5);
      expect_close("loss", loss.download().tensor(), loss_ref.tensor(), 1e-5);
      gpu.softmax_cross_entropy_backward(probs.tensor(), labelsg.tensor(), smoothing, 0.5f, d.tensor());
      ref->softmax_cross_entropy_backward(probs_ref.tensor(), labels.tensor(), smoothing, 0.5f,
                                          d_ref.tensor());
      expect_close("dlogits", download_wide(*ref, d).tensor(), d_ref.tensor(), tolerance(dtype));
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Elementwise, casts, check_finite, SGD

TEST_F(CudaOpsTest, FillAddScale) {
  Backend& gpu = shared_gpu();
  for (DType dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    HostBuffer a = random_host(*ref, {50001}, dtype, 81), b = random_host(*ref, {50001}, dtype, 82);
    HostBuffer a_ref = converted(*ref, a, DType::f32), b_ref = converted(*ref, b, DType::f32);
    DeviceTensor ag(gpu, a), bg(gpu, b), yg(gpu, {50001}, dtype);
    HostBuffer y_ref({50001}, DType::f32);
    gpu.add(ag.tensor(), bg.tensor(), yg.tensor());
    ref->add(a_ref.tensor(), b_ref.tensor(), y_ref.tensor());
    // The reference adds in f32 here; the GPU rounds the sum to the dtype: at most half an ulp.
    expect_close("add", download_wide(*ref, yg).tensor(), y_ref.tensor(), tolerance(dtype) * 0.5);
    gpu.scale(yg.tensor(), 0.37);
    ref->scale(y_ref.tensor(), 0.37);
    expect_close("scale", download_wide(*ref, yg).tensor(), y_ref.tensor(), tolerance(dtype));
    gpu.fill(yg.tensor(), -2.5);
    HostBuffer filled = download_wide(*ref, yg);
    for (int64_t i = 0; i < filled.numel(); ++i) ASSERT_EQ(filled.ptr<float>()[i], -2.5f);
  }
  DeviceTensor flag(gpu, {1}, DType::i32);
  gpu.fill(flag.tensor(), 7);
  EXPECT_EQ(flag.download().ptr<int32_t>()[0], 7);
}

TEST_F(CudaOpsTest, CastRoundTrips) {
  Backend& gpu = shared_gpu();
  HostBuffer src = random_host(*ref, {1000}, DType::f32, 91, Layout::nchw, -100.0, 100.0);
  DeviceTensor srcg(gpu, src);
  for (DType dtype : {DType::f64, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    DeviceTensor mid(gpu, {1000}, dtype), back(gpu, {1000}, DType::f32);
    HostBuffer mid_ref({1000}, dtype), back_ref({1000}, DType::f32);
    gpu.cast(srcg.tensor(), mid.tensor());
    gpu.cast(mid.tensor(), back.tensor());
    ref->cast(src.tensor(), mid_ref.tensor());
    ref->cast(mid_ref.tensor(), back_ref.tensor());
    // Both round to nearest even: the round trips agree exactly.
    expect_close("cast round trip", back.download().tensor(), back_ref.tensor(), 0.0);
  }
}

TEST_F(CudaOpsTest, CheckFiniteSetsButNeverClears) {
  Backend& gpu = shared_gpu();
  for (DType dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    HostBuffer x32 = random_host(*ref, {40000}, DType::f32, 101);
    DeviceTensor flag(gpu, {1}, DType::i32), flag2(gpu, {1}, DType::i32);
    gpu.fill(flag.tensor(), 0);
    gpu.fill(flag2.tensor(), 0);
    auto upload = [&](DeviceTensor& t) { t.upload(converted(*ref, x32, dtype)); };
    DeviceTensor x(gpu, {40000}, dtype);
    upload(x);
    gpu.check_finite(x.tensor(), flag.tensor());
    EXPECT_EQ(flag.download().ptr<int32_t>()[0], 0);
    x32.ptr<float>()[39999] = std::numeric_limits<float>::infinity();
    upload(x);
    gpu.check_finite(x.tensor(), flag.tensor());
    EXPECT_EQ(flag.download().ptr<int32_t>()[0], 1);
    x32.ptr<float>()[39999] = 0.f;
    upload(x);
    gpu.check_finite(x.tensor(), flag.tensor());
    EXPECT_EQ(flag.download().ptr<int32_t>()[0], 1) << "never clears";
    x32.ptr<float>()[5] = std::numeric_limits<float>::quiet_NaN();
    upload(x);
    gpu.check_finite(x.tensor(), flag2.tensor());
    EXPECT_EQ(flag2.download().ptr<int32_t>()[0], 1) << "NaN";
  }
}

TEST_F(CudaOpsTest, SgdUpdate) {
  Backend& gpu = shared_gpu();
  const int64_t count = 30001;
  const ParamSegment segments[] = {{0, 20000, true}, {20000, 9000, false}};  // the last 1001 are not updated
  for (bool nesterov : {false, true}) {
    SCOPED_TRACE(nesterov ? "nesterov" : "plain momentum");
    HostBuffer p = random_host(*ref, {count}, DType::f32, 111),
               g = random_host(*ref, {count}, DType::f32, 112),
               v = random_host(*ref, {count}, DType::f32, 113);
    HostBuffer p_ref = copy_of(p), v_ref = copy_of(v);
    DeviceTensor pg(gpu, p), gg(gpu, g), vg(gpu, v);
    SgdStep step;
    step.lr = 0.05f, step.momentum = 0.9f, step.weight_decay = 1e-4f, step.nesterov = nesterov;
    step.grad_scale = 0.5f;
    for (int i = 0; i < 3; ++i) {
      gpu.sgd_update(pg.tensor(), gg.tensor(), vg.tensor(), segments, step);
      ref->sgd_update(p_ref.tensor(), g.tensor(), v_ref.tensor(), segments, step);
    }
    expect_close("params", pg.download().tensor(), p_ref.tensor(), 1e-6);
    expect_close("momentum", vg.download().tensor(), v_ref.tensor(), 1e-6);
  }
}

// The step scalars in device memory: the rate and the loss scale are read by the kernels, an overflow skips
// the update, and the loss-scale rule runs on the device exactly as on the host.
TEST_F(CudaOpsTest, StepScalarsDriveUpdateAndLossScale) {
  Backend& gpu = shared_gpu();
  const int64_t count = 5003;
  const ParamSegment segments[] = {{0, count, true}};
  HostBuffer p = random_host(*ref, {count}, DType::f32, 121), g = random_host(*ref, {count}, DType::f32, 122),
             v = random_host(*ref, {count}, DType::f32, 123);
  HostBuffer p_ref = copy_of(p), v_ref = copy_of(v);
  DeviceTensor pg(gpu, p), gg(gpu, g), vg(gpu, v);
  SgdStep step;
  step.lr = 99.f;  // ignored: the rate comes from the scalars
  step.momentum = 0.9f, step.weight_decay = 1e-4f, step.grad_scale = 0.5f;
  StepScalars host;
  host.lr = 0.05f;
  host.loss_scale = 8.f;
  host.dynamic = 1;
  host.growth_interval = 2;
  auto* device = static_cast<StepScalars*>(gpu.allocate(sizeof(StepScalars)));
  gpu.copy_to_device(device, &host, sizeof host);
  gpu.sgd_update(pg.tensor(), gg.tensor(), vg.tensor(), segments, step, device);
  ref->sgd_update(p_ref.tensor(), g.tensor(), v_ref.tensor(), segments, step, &host);
  gpu.update_loss_scale(device);
  ref->update_loss_scale(&host);
  expect_close("params", pg.download().tensor(), p_ref.tensor(), 1e-6);
  expect_close("momentum", vg.download().tensor(), v_ref.tensor(), 1e-6);

  // An Inf gradient raises the flag; the update is skipped and the scale halves.
  HostBuffer bad = copy_of(g);
  bad.ptr<float>()[77] = std::numeric_limits<float>::infinity();
  DeviceTensor badg(gpu, bad);
  Tensor flag(reinterpret_cast<std::byte*>(device) + offsetof(StepScalars, overflow), {1}, DType::i32,
              Layout::nchw, gpu.device());
  gpu.check_finite(badg.tensor(), flag);
  HostBuffer before = pg.download();
  gpu.sgd_update(pg.tensor(), badg.tensor(), vg.tensor(), segments, step, device);
  gpu.update_loss_scale(device);
  StepScalars after;
  gpu.copy_to_host(&after, device, sizeof after);
  EXPECT_EQ(after.loss_scale, 4.f);
  EXPECT_EQ(after.skipped_steps, 1);
  EXPECT_EQ(after.overflow, 0);
  expect_close("params unchanged", pg.download().tensor(), before.tensor(), 0.0);

  // The loss gradient carries the scale read from device memory.
  const int64_t n = 8, k = 10;
  HostBuffer probs = random_host(*ref, {n, k}, DType::f32, 124);
  HostBuffer labels({n}, DType::i32);
  for (int64_t i = 0; i < n; ++i) labels.ptr<int32_t>()[i] = static_cast<int32_t>((i * 3) % k);
  DeviceTensor probs_g(gpu, probs), labels_g(gpu, labels);
  HostBuffer d_ref({n, k}, DType::f32);
  DeviceTensor d(gpu, d_ref);
  gpu.softmax_cross_entropy_backward(probs_g.tensor(), labels_g.tensor(), 0.1f, 1.f, d.tensor(),
                                     &device->loss_scale);
  ref->softmax_cross_entropy_backward(probs.tensor(), labels.tensor(), 0.1f, 4.f, d_ref.tensor());
  expect_close("dlogits", d.download().tensor(), d_ref.tensor(), 1e-6);
  gpu.deallocate(device);
}

// ---------------------------------------------------------------------------------------------------------
// Memory, factory, graph capture

TEST_F(CudaOpsTest, MemoryAndCopies) {
  Backend& gpu = shared_gpu();
  EXPECT_EQ(gpu.name(), "cuda");
  EXPECT_EQ(gpu.device(), (Device{DeviceKind::cuda, 0}));
  HostBuffer a = random_host(*ref, {12345}, DType::f32, 1);
  DeviceTensor d1(gpu, a), d2(gpu, {12345}, DType::f32);
  gpu.copy(d2.tensor().data(), d1.tensor().data(), a.tensor().bytes());
  expect_close("round trip", d2.download().tensor(), a.tensor(), 0.0);
  void* empty = gpu.allocate(0);
  gpu.deallocate(empty);
  gpu.deallocate(nullptr);
}

TEST_F(CudaOpsTest, Factory) {
  EXPECT_TRUE(cuda_backend_available());
  CudaOptions tf32;
  tf32.allow_tf32 = true;
  auto b = make_backend("cuda", Device{DeviceKind::cuda, 0}, 0, tf32);
  EXPECT_EQ(b->name(), "cuda");
  EXPECT_THROW(make_backend("onednn", Device{DeviceKind::cuda, 0}, 0), UserError);
  EXPECT_THROW(make_cuda_backend(cuda_device_count()), UserError);
}

// A training-like sequence captured in a CUDA graph (global mode: a host synchronisation, a blocking copy
// or an allocation inside it fails the capture) and replayed; its results must equal the eager run's.
TEST_F(CudaOpsTest, StepCapturesInCudaGraph) {
  Backend& gpu = shared_gpu();
  const Layout L = Layout::nhwc;
  const DType D = DType::f16;
  ConvGeometry cg;
  cg.batch = 4, cg.in_channels = 16, cg.in_h = cg.in_w = 8, cg.out_channels = 32,
  cg.kernel_h = cg.kernel_w = 3;
  cg.pad_h = cg.pad_w = 1, cg.layout = L, cg.dtype = D;
  BatchNormGeometry bg;
  bg.batch = 4, bg.channels = 32, bg.h = bg.w = 8, bg.layout = L, bg.dtype = D,
  bg.fusion = BatchNormFusion::relu;
  PoolGeometry pg;
  pg.batch = 4, pg.channels = 32, pg.in_h = pg.in_w = 8, pg.kernel_h = pg.kernel_w = 8,
  pg.kind = PoolKind::average;
  pg.layout = L, pg.dtype = D;
  auto conv = gpu.plan_conv(cg);
  auto bn = gpu.plan_batchnorm(bg);
  auto pool = gpu.plan_pool(pg);
  auto ws_buffer = workspace(gpu, std::max(conv->workspace_bytes(), bn->workspace_bytes()));
  DeviceTensor& ws = *ws_buffer;
  const std::vector<int64_t> xd{4, 16, 8, 8}, wd{32, 16, 3, 3}, yd{4, 32, 8, 8}, cd{32}, pd{4, 32, 1, 1};
  DeviceTensor x(gpu, random_host(*ref, xd, D, 1, L)), w(gpu, random_host(*ref, wd, D, 2, L)),
      fc(gpu, random_host(*ref, {32, 10}, D, 3)),
      gamma(gpu, random_host(*ref, cd, DType::f32, 4, Layout::nchw, 0.5, 1.5)),
      beta(gpu, random_host(*ref, cd, DType::f32, 5));
  HostBuffer labels_host({4}, DType::i32);
  for (int i = 0; i < 4; ++i) labels_host.ptr<int32_t>()[i] = i * 2;
  DeviceTensor labels(gpu, labels_host);
  DeviceTensor y(gpu, yd, D, L), z(gpu, yd, D, L), pooled(gpu, pd, D, L), logits(gpu, {4, 10}, D),
      probs(gpu, {4, 10}, DType::f32), loss(gpu, {1}, DType::f32), dlogits(gpu, {4, 10}, D),
      dpooled(gpu, pd, D, L), dz(gpu, yd, D, L), dy(gpu, yd, D, L), dx(gpu, xd, D, L), dw(gpu, wd, D, L),
      dfc(gpu, {32, 10}, D), rm(gpu, cd, DType::f32), rv(gpu, cd, DType::f32), sm(gpu, cd, DType::f32),
      sis(gpu, cd, DType::f32), dgamma(gpu, cd, DType::f32), dbeta(gpu, cd, DType::f32),
      flag(gpu, {1}, DType::i32);
  auto step = [&] {
    gpu.fill(rm.tensor(), 0.0);
    gpu.fill(rv.tensor(), 1.0);
    gpu.fill(flag.tensor(), 0.0);
    gpu.conv_forward(*conv, x.tensor(), w.tensor(), y.tensor(), ws.tensor().data());
    gpu.batchnorm_forward_training(*bn,
                                   BatchNormTensors{.x = &y.tensor(),
                                                    .gamma = &gamma.tensor(),
                                                    .beta = &beta.tensor(),
                                                    .running_mean = &rm.tensor(),
                                                    .running_var = &rv.tensor(),
                                                    .saved_mean = &sm.tensor(),
                                                    .saved_inv_std = &sis.tensor()},
                                   nullptr, z.tensor(), ws.tensor().data());
    gpu.pool_forward(*pool, z.tensor(), pooled.tensor(), nullptr);
    Tensor flat = pooled.tensor().reshaped({4, 32});
    gpu.gemm(Transpose::no, Transpose::no, 4, 10, 32, 1.f, flat, fc.tensor(), 0.f, logits.tensor());
    gpu.softmax_cross_entropy_forward(logits.tensor(), labels.tensor(), 0.1f, probs.tensor(), loss.tensor());
    gpu.softmax_cross_entropy_backward(probs.tensor(), labels.tensor(), 0.1f, 1.f, dlogits.tensor());
    gpu.gemm(Transpose::yes, Transpose::no, 32, 10, 4, 1.f, flat, dlogits.tensor(), 0.f, dfc.tensor());
    Tensor dflat = dpooled.tensor().reshaped({4, 32});
    gpu.gemm(Transpose::no, Transpose::yes, 4, 32, 10, 1.f, dlogits.tensor(), fc.tensor(), 0.f, dflat);
    gpu.pool_backward(*pool, z.tensor(), pooled.tensor(), dpooled.tensor(), nullptr, dz.tensor());
    gpu.batchnorm_backward(*bn,
                           BatchNormTensors{.x = &y.tensor(),
                                            .gamma = &gamma.tensor(),
                                            .saved_mean = &sm.tensor(),
                                            .saved_inv_std = &sis.tensor(),
                                            .dx = &dy.tensor(),
                                            .dgamma = &dgamma.tensor(),
                                            .dbeta = &dbeta.tensor()},
                           z.tensor(), dz.tensor(), nullptr, Accumulate::overwrite, ws.tensor().data());
    gpu.conv_backward_data(*conv, dy.tensor(), w.tensor(), dx.tensor(), Accumulate::overwrite,
                           ws.tensor().data());
    gpu.conv_backward_filter(*conv, x.tensor(), dy.tensor(), dw.tensor(), Accumulate::overwrite,
                             ws.tensor().data());
    gpu.check_finite(dw.tensor(), flag.tensor());
  };
  step();
  gpu.synchronize();
  HostBuffer loss_eager = loss.download(), dx_eager = download_wide(*ref, dx),
             dw_eager = download_wide(*ref, dw), dgamma_eager = dgamma.download(), rv_eager = rv.download();
  gpu.fill(dx.tensor(), 0.0);
  gpu.fill(dw.tensor(), 0.0);
  gpu.fill(loss.tensor(), 0.0);
  ASSERT_NO_THROW(cuda_capture_and_replay(gpu, step, 2));
  expect_close("graph loss", loss.download().tensor(), loss_eager.tensor(), 1e-6);
  expect_close("graph dx", download_wide(*ref, dx).tensor(), dx_eager.tensor(), 1e-3);
  expect_close("graph dw", download_wide(*ref, dw).tensor(), dw_eager.tensor(), 1e-3);
  expect_close("graph dgamma", dgamma.download().tensor(), dgamma_eager.tensor(), 1e-5);
  expect_close("graph running var", rv.download().tensor(), rv_eager.tensor(), 1e-6);
  EXPECT_EQ(flag.download().ptr<int32_t>()[0], 0);
  // The stream is still usable after the graph.
  gpu.fill(flag.tensor(), 1.0);
  EXPECT_EQ(flag.download().ptr<int32_t>()[0], 1);
}

// --comm-priority low gives training's stream the device's greatest priority; otherwise its lowest (the
// default priority, as before streams had one).
TEST_F(CudaOpsTest, StreamPriority) {
  int lowest = 0, greatest = 0;
  ASSERT_EQ(cudaDeviceGetStreamPriorityRange(&lowest, &greatest), cudaSuccess);
  for (bool priority_stream : {false, true}) {
    CudaOptions options;
    options.training_stream =
        priority_stream ? TrainingStreamPriority::greatest : TrainingStreamPriority::normal;
    auto backend = make_cuda_backend(0, options);
    int priority = 1;
    ASSERT_EQ(cudaStreamGetPriority(static_cast<cudaStream_t>(backend->native_stream()), &priority),
              cudaSuccess);
    EXPECT_EQ(priority, priority_stream ? greatest : lowest);
  }
}

}  // namespace
}  // namespace dlbench
