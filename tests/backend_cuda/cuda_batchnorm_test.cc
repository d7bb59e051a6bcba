// CUDA batch norm (dlbench's own kernels in training, cuDNN in inference and FP64 training) against the
// reference backend: training forward with running statistics, backward (overwriting and accumulating
// dgamma/dbeta), inference, in every fusion (none, relu, add_relu), NCHW and NHWC, f32/f16/bf16 (and f64).
// The plan's path is printed; all must match the reference.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <span>
#include <string>
#include <tuple>

#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"

namespace dlbench {
namespace {

using namespace cuda_testing;

class CudaBatchNormTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU: cuda_device_count() == 0";
  }
  std::unique_ptr<Backend> ref = make_reference_backend();
};

struct BnCase {
  int64_t n, c, h, w;
};

const BnCase kBnCases[] = {{2, 3, 5, 7}, {4, 16, 6, 6}, {3, 20, 1, 1}, {8, 8, 3, 3}, {2, 64, 5, 5}};

const char* fusion_name(BatchNormFusion f) {
  return f == BatchNormFusion::none ? "none" : f == BatchNormFusion::relu ? "relu" : "add_relu";
}

// `expected_path`, when given, must appear in the plan's description (the case fails if another path ran).
void run_bn_case(Backend& ref, const BnCase& bc, Layout layout, BatchNormFusion fusion, DType dtype,
                 const char* expected_path = nullptr) {
  Backend& gpu = shared_gpu(false);
  BatchNormGeometry g;
  g.batch = bc.n, g.channels = bc.c, g.h = bc.h, g.w = bc.w, g.layout = layout, g.fusion = fusion;
  g.dtype = dtype, g.epsilon = 1e-5, g.momentum = 0.1;
  const DType wide = reference_dtype(dtype), pd = wide;  // parameters: f32 (f64 for f64 data)
  const std::vector<int64_t> dims{bc.n, bc.c, bc.h, bc.w}, cdims{bc.c};
  const bool add = fusion == BatchNormFusion::add_relu;
  // A non-zero mean per channel so that the statistics are not trivially ~0.
  HostBuffer x = random_host(ref, dims, dtype, 21, layout, -1.0, 3.0);
  HostBuffer residual = random_host(ref, dims, dtype, 22, layout);
  HostBuffer dy = random_host(ref, dims, dtype, 25, layout);
  HostBuffer x_ref = converted(ref, x, wide), residual_ref = converted(ref, residual, wide),
             dy_ref = converted(ref, dy, wide);
  HostBuffer gamma = random_host(ref, cdims, pd, 23, Layout::nchw, 0.5, 1.5),
             beta = random_host(ref, cdims, pd, 24);
  HostBuffer rmean = random_host(ref, cdims, pd, 26),
             rvar = random_host(ref, cdims, pd, 27, Layout::nchw, 0.5, 2.0);

  auto plan = gpu.plan_batchnorm(g);
  const std::string path = describe_cuda_batchnorm_plan(*plan);
  std::printf("  [plan] %s\n", path.c_str());
  if (expected_path) {
    EXPECT_NE(path.find(expected_path), std::string::npos) << path;
  }
  BatchNormGeometry g_ref = g;
  g_ref.dtype = wide;
  auto ref_plan = ref.plan_batchnorm(g_ref);
  auto ws_buffer = workspace(gpu, plan->workspace_bytes());
  DeviceTensor& ws = *ws_buffer;
  const double tol = tolerance(dtype);

  // Training forward.
  DeviceTensor xg(gpu, x), rg(gpu, residual), dyg(gpu, dy), gammag(gpu, gamma), betag(gpu, beta),
      rmeang(gpu, rmean), rvarg(gpu, rvar), yg(gpu, dims, dtype, layout), meang(gpu, cdims, pd),
      inv_stdg(gpu, cdims, pd);
  HostBuffer rmean_ref = copy_of(rmean), rvar_ref = copy_of(rvar), y_ref(dims, wide, layout),
             mean_ref(cdims, pd), inv_std_ref(cdims, pd);
  gpu.batchnorm_forward_training(*plan,
                                 BatchNormTensors{.x = &xg.tensor(),
                                                  .gamma = &gammag.tensor(),
                                                  .beta = &betag.tensor(),
                                                  .running_mean = &rmeang.tensor(),
                                                  .running_var = &rvarg.tensor(),
                                                  .saved_mean = &meang.tensor(),
                                                  .saved_inv_std = &inv_stdg.tensor()},
                                 add ? rg.ptr() : nullptr, yg.tensor(), ws.tensor().data());
  ref.batchnorm_forward_training(*ref_plan,
                                 BatchNormTensors{.x = &x_ref.tensor(),
                                                  .gamma = &gamma.tensor(),
                                                  .beta = &beta.tensor(),
                                                  .running_mean = &rmean_ref.tensor(),
                                                  .running_var = &rvar_ref.tensor(),
                                                  .saved_mean = &mean_ref.tensor(),
                                                  .saved_inv_std = &inv_std_ref.tensor()},
                                 add ? &residual_ref.tensor() : nullptr, y_ref.tensor(), nullptr);
  HostBuffer y_gpu = download_wide(ref, yg);
  const double stat_tol = dtype == DType::f64 ? 1e-12 : 1e-5;  // statistics are f32 (f64) whatever the data
  expect_close("y", y_gpu.tensor(), y_ref.tensor(), tol);
  expect_close("saved mean", meang.download().tensor(), mean_ref.tensor(), stat_tol);
  expect_close("saved inv std", inv_stdg.download().tensor(), inv_std_ref.tensor(), stat_tol * 2);
  expect_close("running mean", rmeang.download().tensor(), rmean_ref.tensor(), stat_tol);
  expect_close("running var (unbiased)", rvarg.download().tensor(), rvar_ref.tensor(), stat_tol * 2);

  // Backward, overwriting then accumulating dgamma/dbeta. The reference masks the ReLU with the GPU's y,
  // so that an element rounded to the other side of 0 in f16/bf16 cannot flip the mask.
  for (Accumulate acc : {Accumulate::overwrite, Accumulate::add}) {
    SCOPED_TRACE(acc == Accumulate::add ? "accumulate" : "overwrite");
    HostBuffer dgamma = random_host(ref, cdims, pd, 28), dbeta = random_host(ref, cdims, pd, 29);
    HostBuffer dgamma_ref = copy_of(dgamma), dbeta_ref = copy_of(dbeta), dx_ref(dims, wide, layout),
               dres_ref(dims, wide, layout);
    DeviceTensor dxg(gpu, dims, dtype, layout), dresg(gpu, dims, dtype, layout), dgammag(gpu, dgamma),
        dbetag(gpu, dbeta);
    gpu.fill(dxg.tensor(), std::nan(""));  // overwritten, never read
    gpu.batchnorm_backward(*plan,
                           BatchNormTensors{.x = &xg.tensor(),
                                            .gamma = &gammag.tensor(),
                                            .saved_mean = &meang.tensor(),
                                            .saved_inv_std = &inv_stdg.tensor(),
                                            .dx = &dxg.tensor(),
                                            .dgamma = &dgammag.tensor(),
                                            .dbeta = &dbetag.tensor()},
                           yg.tensor(), dyg.tensor(), add ? dresg.ptr() : nullptr, acc, ws.tensor().data());
    ref.batchnorm_backward(*ref_plan,
                           BatchNormTensors{.x = &x_ref.tensor(),
                                            .gamma = &gamma.tensor(),
                                            .saved_mean = &mean_ref.tensor(),
                                            .saved_inv_std = &inv_std_ref.tensor(),
                                            .dx = &dx_ref.tensor(),
                                            .dgamma = &dgamma_ref.tensor(),
                                            .dbeta = &dbeta_ref.tensor()},
                           y_gpu.tensor(), dy_ref.tensor(), add ? &dres_ref.tensor() : nullptr, acc, nullptr);
    const double grad_tol = dtype == DType::f32 ? 5e-5 : tol * 2;
    expect_close("dx", download_wide(ref, dxg).tensor(), dx_ref.tensor(), grad_tol);
    expect_close(acc == Accumulate::add ? "dgamma (+=)" : "dgamma", dgammag.download().tensor(),
                 dgamma_ref.tensor(), grad_tol);
    expect_close(acc == Accumulate::add ? "dbeta (+=)" : "dbeta", dbetag.download().tensor(),
                 dbeta_ref.tensor(), grad_tol);
    if (add) expect_close("dresidual", download_wide(ref, dresg).tensor(), dres_ref.tensor(), 0.0);
  }

  // A second training step on the same plan: the running statistics keep following the reference.
  gpu.batchnorm_forward_training(*plan,
                                 BatchNormTensors{.x = &xg.tensor(),
                                                  .gamma = &gammag.tensor(),
                                                  .beta = &betag.tensor(),
                                                  .running_mean = &rmeang.tensor(),
                                                  .running_var = &rvarg.tensor(),
                                                  .saved_mean = &meang.tensor(),
                                                  .saved_inv_std = &inv_stdg.tensor()},
                                 add ? rg.ptr() : nullptr, yg.tensor(), ws.tensor().data());
  ref.batchnorm_forward_training(*ref_plan,
                                 BatchNormTensors{.x = &x_ref.tensor(),
                                                  .gamma = &gamma.tensor(),
                                                  .beta = &beta.tensor(),
                                                  .running_mean = &rmean_ref.tensor(),
                                                  .running_var = &rvar_ref.tensor(),
                                                  .saved_mean = &mean_ref.tensor(),
                                                  .saved_inv_std = &inv_std_ref.tensor()},
                                 add ? &residual_ref.tensor() : nullptr, y_ref.tensor(), nullptr);
  expect_close("running var, step 2", rvarg.download().tensor(), rvar_ref.tensor(), stat_tol * 2);

  // Inference with the running statistics (the GPU's, given to both).
  DeviceTensor yig(gpu, dims, dtype, layout);
  HostBuffer yi_ref(dims, wide, layout), rmean_now = rmeang.download(), rvar_now = rvarg.download();
  gpu.batchnorm_forward_inference(*plan,
                                  BatchNormTensors{.x = &xg.tensor(),
                                                   .gamma = &gammag.tensor(),
                                                   .beta = &betag.tensor(),
                                                   .running_mean = &rmeang.tensor(),
                                                   .running_var = &rvarg.tensor()},
                                  add ? rg.ptr() : nullptr, yig.tensor());
  ref.batchnorm_forward_inference(*ref_plan,
                                  BatchNormTensors{.x = &x_ref.tensor(),
                                                   .gamma = &gamma.tensor(),
                                                   .beta = &beta.tensor(),
                                                   .running_mean = &rmean_now.tensor(),
                                                   .running_var = &rvar_now.tensor()},
                                  add ? &residual_ref.tensor() : nullptr, yi_ref.tensor());
  expect_close("inference y", download_wide(ref, yig).tensor(), yi_ref.tensor(), tol);
}

// How gtest names the parameters in its output.
void PrintTo(const BnCase& c, std::ostream* os) { *os << c.n << "x" << c.c << "x" << c.h << "x" << c.w; }

class BatchNormTest
    : public CudaBatchNormTest,
      public ::testing::WithParamInterface<std::tuple<BnCase, Layout, BatchNormFusion, DType>> {};

TEST_P(BatchNormTest, MatchesReference) {
  const auto [bc, layout, fusion, dtype] = GetParam();
  run_bn_case(*ref, bc, layout, fusion, dtype, "own ");
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormTest,
                         ::testing::Combine(::testing::ValuesIn(kBnCases),
                                            ::testing::Values(Layout::nchw, Layout::nhwc),
                                            ::testing::Values(BatchNormFusion::none, BatchNormFusion::relu,
                                                              BatchNormFusion::add_relu),
                                            ::testing::Values(DType::f32, DType::f16, DType::bf16)),
                         [](const auto& info) {
                           const BnCase& bc = std::get<0>(info.param);
                           return fmt::format("own_{}x{}x{}x{}_{}_{}_{}", bc.n, bc.c, bc.h, bc.w,
                                              layout_name(std::get<1>(info.param)),
                                              fusion_name(std::get<2>(info.param)),
                                              dtype_name(std::get<3>(info.param)));
                         });

TEST_F(CudaBatchNormTest, Float64) {
  run_bn_case(*ref, kBnCases[0], Layout::nchw, BatchNormFusion::none, DType::f64);
  run_bn_case(*ref, kBnCases[1], Layout::nhwc, BatchNormFusion::add_relu, DType::f64);
  run_bn_case(*ref, kBnCases[2], Layout::nchw, BatchNormFusion::relu, DType::f64);
}

// A ResNet-sized activation, where the NHWC kernels reduce over many blocks.
TEST_F(CudaBatchNormTest, LargerShape) {
  const BnCase big{16, 64, 28, 28};
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (BatchNormFusion fusion : {BatchNormFusion::none, BatchNormFusion::relu, BatchNormFusion::add_relu}) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(dtype), fusion_name(fusion)));
      run_bn_case(*ref, big, Layout::nhwc, fusion, dtype, "own ");
    }
  }
  run_bn_case(*ref, big, Layout::nchw, BatchNormFusion::add_relu, DType::f32, "own ");
}

// Training runs dlbench's own kernels and matches the reference in
// every dtype and fusion, on shapes chosen for how the kernels cut the work.
// NCHW: channels of HW % 4 == 0 (vector loads) and not (7x7, 5x5, 1x1: element by element), a tiny one, a
// ResNet-sized one, and few channels of many values, reduced in several splits per channel.
// NHWC: channels in whole 16-byte vectors (64, 256) and not (3, 20, 36 in 16-bit), one tile and several
// (520 channels: a last tile of one vector in 16-bit; 2048: sixteen), rows in one split and many
// (ResNet-sized). (Two values a channel would test float statistics against the reference's double:
// where the two are close, the float mean's rounding is a large part of x - mean.)
// Inference (same plan) stays on cuDNN and is checked too.
TEST_F(CudaBatchNormTest, OwnKernelsMatchTheReference) {
  // The last two reduce each channel in several splits (4 and 7), whose ranges start inside a row.
  const BnCase nchw_cases[] = {{2, 3, 5, 5},    {4, 16, 7, 7},   {3, 20, 1, 1},  {4, 8, 6, 6},
                               {8, 64, 28, 28}, {13, 4, 36, 36}, {32, 2, 33, 31}};
  const BnCase nhwc_cases[] = {{2, 3, 5, 5},     {4, 20, 7, 7},  {3, 36, 2, 2},  {4, 64, 6, 6},
                               {16, 64, 28, 28}, {8, 256, 7, 7}, {4, 520, 3, 5}, {3, 2048, 2, 2}};
  for (Layout layout : {Layout::nchw, Layout::nhwc}) {
    const auto& cases =
        layout == Layout::nchw ? std::span<const BnCase>(nchw_cases) : std::span<const BnCase>(nhwc_cases);
    const char* path = layout == Layout::nchw ? "own NCHW kernels" : "own NHWC kernels";
    for (const BnCase& bc : cases) {
      for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
        for (BatchNormFusion fusion :
             {BatchNormFusion::none, BatchNormFusion::relu, BatchNormFusion::add_relu}) {
          SCOPED_TRACE(fmt::format("{} {}x{}x{}x{} {} {}", layout_name(layout), bc.n, bc.c, bc.h, bc.w,
                                   dtype_name(dtype), fusion_name(fusion)));
          run_bn_case(*ref, bc, layout, fusion, dtype, path);
        }
      }
    }
  }
  // FP64 keeps cuDNN.
  BatchNormGeometry g;
  g.batch = 2, g.channels = 8, g.h = g.w = 4, g.layout = Layout::nhwc, g.dtype = DType::f64;
  EXPECT_EQ(describe_cuda_batchnorm_plan(*shared_gpu().plan_batchnorm(g)).find("own"), std::string::npos);
  g.layout = Layout::nchw;
  EXPECT_EQ(describe_cuda_batchnorm_plan(*shared_gpu().plan_batchnorm(g)).find("own"), std::string::npos);
}

// NHWC add_relu on the own kernels keeps a bit mask of where the ReLU passed, and the backward reads it
// in place of y. A forward whose output is not aligned for vectors runs element by element and fills the
// mask from y afterwards: a backward on aligned tensors then reads that mask, and must give exactly what
// it gives after an aligned forward.
TEST_F(CudaBatchNormTest, OwnNhwcMaskFromAnUnalignedForward) {
  Backend& gpu = shared_gpu(false);
  BatchNormGeometry g;
  g.batch = 4, g.channels = 64, g.h = 5, g.w = 3, g.layout = Layout::nhwc, g.dtype = DType::f16;
  g.fusion = BatchNormFusion::add_relu;
  const std::vector<int64_t> dims{g.batch, g.channels, g.h, g.w}, cdims{g.channels};
  auto plan = gpu.plan_batchnorm(g);
  auto ws = workspace(gpu, plan->workspace_bytes());
  DeviceTensor x(gpu, random_host(*ref, dims, g.dtype, 31, g.layout)),
      residual(gpu, random_host(*ref, dims, g.dtype, 32, g.layout)),
      dy(gpu, random_host(*ref, dims, g.dtype, 33, g.layout)),
      gamma(gpu, random_host(*ref, cdims, DType::f32, 34, Layout::nchw, 0.5, 1.5)),
      beta(gpu, random_host(*ref, cdims, DType::f32, 35));
  // The unaligned output: one element into a buffer one element longer.
  DeviceTensor y_buffer(gpu, {g.batch * g.channels * g.h * g.w + 1}, g.dtype);
  Tensor y_unaligned(static_cast<char*>(y_buffer.tensor().data()) + dtype_size(g.dtype), dims, g.dtype,
                     g.layout, y_buffer.tensor().device());
  auto backward = [&](Tensor& y_forward) {
    DeviceTensor rmean(gpu, cdims, DType::f32), rvar(gpu, cdims, DType::f32), mean(gpu, cdims, DType::f32),
        inv_std(gpu, cdims, DType::f32), y(gpu, dims, g.dtype, g.layout), dx(gpu, dims, g.dtype, g.layout),
        dres(gpu, dims, g.dtype, g.layout), dgamma(gpu, cdims, DType::f32), dbeta(gpu, cdims, DType::f32);
    gpu.fill(rmean.tensor(), 0.0);
    gpu.fill(rvar.tensor(), 1.0);
    gpu.batchnorm_forward_training(*plan,
                                   BatchNormTensors{.x = &x.tensor(),
                                                    .gamma = &gamma.tensor(),
                                                    .beta = &beta.tensor(),
                                                    .running_mean = &rmean.tensor(),
                                                    .running_var = &rvar.tensor(),
                                                    .saved_mean = &mean.tensor(),
                                                    .saved_inv_std = &inv_std.tensor()},
                                   residual.ptr(), y_forward, ws->tensor().data());
    // The backward's y, aligned, with the forward's values.
    gpu.copy(y.tensor().data(), y_forward.data(), y.tensor().bytes());
    gpu.batchnorm_backward(*plan,
                           BatchNormTensors{.x = &x.tensor(),
                                            .gamma = &gamma.tensor(),
                                            .saved_mean = &mean.tensor(),
                                            .saved_inv_std = &inv_std.tensor(),
                                            .dx = &dx.tensor(),
                                            .dgamma = &dgamma.tensor(),
                                            .dbeta = &dbeta.tensor()},
                           y.tensor(), dy.tensor(), dres.ptr(), Accumulate::overwrite, ws->tensor().data());
    return std::make_pair(download_wide(*ref, dx), download_wide(*ref, dres));
  };
  // The unaligned forward first, on a plan whose mask no forward has written yet: if it left the mask
  // unfilled, its backward would read whatever the memory held.
  const auto [dx_unaligned, dres_unaligned] = backward(y_unaligned);
  DeviceTensor y_aligned(gpu, dims, g.dtype, g.layout);
  const auto [dx_aligned, dres_aligned] = backward(y_aligned.tensor());
  expect_close("dx after an unaligned forward", dx_unaligned.tensor(), dx_aligned.tensor(), 0.0);
  expect_close("dresidual after an unaligned forward", dres_unaligned.tensor(), dres_aligned.tensor(), 0.0);
}

// The training forward with x's statistics from its sums (a convolution's, BatchNormTensors::input_sums)
// on the own kernels: y, the saved and the running statistics as the
// reference computes them from x, in both layouts, every fusion and dtype (NHWC in vectors and not).
TEST_F(CudaBatchNormTest, StatisticsFromTheInputsSums) {
  Backend& gpu = shared_gpu(false);
  {
    for (Layout layout : {Layout::nhwc, Layout::nchw}) {
      for (const BnCase& bc : {BnCase{4, 64, 6, 6}, BnCase{3, 20, 5, 7}}) {
        for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
          for (BatchNormFusion fusion :
               {BatchNormFusion::none, BatchNormFusion::relu, BatchNormFusion::add_relu}) {
            SCOPED_TRACE(fmt::format("{} {}x{}x{}x{} {} {}", layout_name(layout), bc.n, bc.c, bc.h, bc.w,
                                     dtype_name(dtype), fusion_name(fusion)));
            BatchNormGeometry g;
            g.batch = bc.n, g.channels = bc.c, g.h = bc.h, g.w = bc.w, g.layout = layout, g.fusion = fusion;
            g.dtype = dtype, g.epsilon = 1e-5, g.momentum = 0.1;
            const bool add = fusion == BatchNormFusion::add_relu;
            const std::vector<int64_t> dims{bc.n, bc.c, bc.h, bc.w}, cdims{bc.c};
            const HostBuffer x = random_host(*ref, dims, dtype, 21, layout, -1.0, 3.0),
                             residual = random_host(*ref, dims, dtype, 22, layout);
            const HostBuffer gamma = random_host(*ref, cdims, DType::f32, 23, Layout::nchw, 0.5, 1.5),
                             beta = random_host(*ref, cdims, DType::f32, 24);
            HostBuffer rmean = random_host(*ref, cdims, DType::f32, 26),
                       rvar = random_host(*ref, cdims, DType::f32, 27, Layout::nchw, 0.5, 2.0);
            auto plan = gpu.plan_batchnorm(g);
            auto ws = workspace(gpu, plan->workspace_bytes());
            DeviceTensor xg(gpu, x), rg(gpu, residual), gammag(gpu, gamma), betag(gpu, beta),
                rmeang(gpu, rmean), rvarg(gpu, rvar), yg(gpu, dims, dtype, layout),
                meang(gpu, cdims, DType::f32), inv_stdg(gpu, cdims, DType::f32),
                sums(gpu, converted(*ref, channel_sums(*ref, x), DType::f32));
            gpu.batchnorm_forward_training(*plan,
                                           BatchNormTensors{.x = &xg.tensor(),
                                                            .gamma = &gammag.tensor(),
                                                            .beta = &betag.tensor(),
                                                            .running_mean = &rmeang.tensor(),
                                                            .running_var = &rvarg.tensor(),
                                                            .saved_mean = &meang.tensor(),
                                                            .saved_inv_std = &inv_stdg.tensor(),
                                                            .input_sums = &sums.tensor()},
                                           add ? rg.ptr() : nullptr, yg.tensor(), ws->tensor().data());
            BatchNormGeometry g_ref = g;
            g_ref.dtype = reference_dtype(dtype);
            const HostBuffer x_ref = converted(*ref, x, g_ref.dtype),
                             residual_ref = converted(*ref, residual, g_ref.dtype);
            HostBuffer y_ref(dims, g_ref.dtype, layout), mean_ref(cdims, DType::f32),
                inv_std_ref(cdims, DType::f32);
            ref->batchnorm_forward_training(*ref->plan_batchnorm(g_ref),
                                            BatchNormTensors{.x = &x_ref.tensor(),
                                                             .gamma = &gamma.tensor(),
                                                             .beta = &beta.tensor(),
                                                             .running_mean = &rmean.tensor(),
                                                             .running_var = &rvar.tensor(),
                                                             .saved_mean = &mean_ref.tensor(),
                                                             .saved_inv_std = &inv_std_ref.tensor()},
                                            add ? &residual_ref.tensor() : nullptr, y_ref.tensor(), nullptr);
            expect_close("y", download_wide(*ref, yg).tensor(), y_ref.tensor(), tolerance(dtype));
            expect_close("saved mean", meang.download().tensor(), mean_ref.tensor(), 1e-5);
            expect_close("saved inv std", inv_stdg.download().tensor(), inv_std_ref.tensor(), 2e-5);
            expect_close("running mean", rmeang.download().tensor(), rmean.tensor(), 1e-5);
            expect_close("running var", rvarg.download().tensor(), rvar.tensor(), 2e-5);
          }
        }
      }
    }
  }
}

// One batch norm of a folded pair: its data and parameters on the host (the reference's, wide) and the GPU.
struct FoldSide {
  FoldSide(Backend& ref, Backend& gpu, const BatchNormGeometry& g, uint64_t seed)
      : dims{g.batch, g.channels, g.h, g.w},
        cdims{g.channels},
        wide(reference_dtype(g.dtype)),
        x(random_host(ref, dims, g.dtype, seed, g.layout, -1.0, 3.0)),
        x_ref(converted(ref, x, wide)),
        gamma(random_host(ref, cdims, wide, seed + 1, Layout::nchw, 0.5, 1.5)),
        beta(random_host(ref, cdims, wide, seed + 2)),
        rmean_ref(random_host(ref, cdims, wide, seed + 3)),
        rvar_ref(random_host(ref, cdims, wide, seed + 4, Layout::nchw, 0.5, 2.0)),
        mean_ref(cdims, wide),
        inv_std_ref(cdims, wide),
        dx_ref(dims, wide, g.layout),
        dgamma_ref(random_host(ref, cdims, wide, seed + 5)),
        dbeta_ref(random_host(ref, cdims, wide, seed + 6)),
        xg(gpu, x),
        gammag(gpu, gamma),
        betag(gpu, beta),
        rmeang(gpu, rmean_ref),
        rvarg(gpu, rvar_ref),
        meang(gpu, cdims, wide),
        inv_stdg(gpu, cdims, wide),
        dxg(gpu, dims, g.dtype, g.layout),
        dgammag(gpu, dgamma_ref),
        dbetag(gpu, dbeta_ref) {}

  BatchNormTensors gpu_tensors() {
    return {&xg.tensor(),    &gammag.tensor(),   &betag.tensor(), &rmeang.tensor(),  &rvarg.tensor(),
            &meang.tensor(), &inv_stdg.tensor(), &dxg.tensor(),   &dgammag.tensor(), &dbetag.tensor()};
  }
  BatchNormTensors ref_tensors() {
    return {&x_ref.tensor(),      &gamma.tensor(),    &beta.tensor(),        &rmean_ref.tensor(),
            &rvar_ref.tensor(),   &mean_ref.tensor(), &inv_std_ref.tensor(), &dx_ref.tensor(),
            &dgamma_ref.tensor(), &dbeta_ref.tensor()};
  }

  std::vector<int64_t> dims, cdims;
  DType wide;
  HostBuffer x, x_ref, gamma, beta, rmean_ref, rvar_ref, mean_ref, inv_std_ref, dx_ref, dgamma_ref, dbeta_ref;
  DeviceTensor xg, gammag, betag, rmeang, rvarg, meang, inv_stdg, dxg, dgammag, dbetag;
};

// A projection block's shortcut batch norm folded into its closing one, y = relu(bn(x) + bn_s(s)), on the
// GPU against the reference's composition of the single ops: training forward (statistics of both), the
// backward overwriting and accumulating (both inputs' and both parameters' gradients), inference. NHWC
// channels in whole 16-byte vectors take the own folded kernels (the plan folds); 20 channels of 16-bit
// do not (the plan does not fold, and the GPU's composed fallback must give the same).
TEST_F(CudaBatchNormTest, FoldedShortcutMatchesTheReference) {
  Backend& gpu = shared_gpu(false);  // --bn-fold-shortcut on, the default
  for (const BnCase& bc : {BnCase{4, 64, 6, 6}, BnCase{8, 256, 7, 7}, BnCase{4, 20, 5, 5}}) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      SCOPED_TRACE(fmt::format("{}x{}x{}x{} {}", bc.n, bc.c, bc.h, bc.w, dtype_name(dtype)));
      BatchNormGeometry g;
      g.batch = bc.n, g.channels = bc.c, g.h = bc.h, g.w = bc.w, g.layout = Layout::nhwc, g.dtype = dtype;
      g.fusion = BatchNormFusion::add_relu, g.epsilon = 1e-5, g.momentum = 0.1;
      BatchNormGeometry gs = g;
      gs.fusion = BatchNormFusion::none;
      EXPECT_EQ(gpu.fuses(FusionCandidate::shortcut_batchnorm(g, gs)), bc.c % (16 / dtype_size(dtype)) == 0);
      auto plan = gpu.plan_batchnorm(g), shortcut_plan = gpu.plan_batchnorm(gs);
      BatchNormGeometry g_ref = g, gs_ref = gs;
      g_ref.dtype = gs_ref.dtype = reference_dtype(dtype);
      auto ref_plan = ref->plan_batchnorm(g_ref), ref_shortcut_plan = ref->plan_batchnorm(gs_ref);
      auto ws = workspace(gpu, plan->workspace_bytes() + shortcut_plan->workspace_bytes());
      FoldSide main(*ref, gpu, g, 40), shortcut(*ref, gpu, gs, 50);
      const BatchNormTensors mg = main.gpu_tensors(), sg = shortcut.gpu_tensors();
      const BatchNormTensors mr = main.ref_tensors(), sr = shortcut.ref_tensors();
      const double tol = tolerance(dtype), stat_tol = 1e-5;

      DeviceTensor yg(gpu, main.dims, dtype, g.layout);
      HostBuffer y_ref(main.dims, main.wide, g.layout);
      gpu.batchnorm_shortcut_forward_training(*plan, *shortcut_plan, mg, sg, yg.tensor(),
                                              ws->tensor().data());
      ref->batchnorm_shortcut_forward_training(*ref_plan, *ref_shortcut_plan, mr, sr, y_ref.tensor(),
                                               nullptr);
      const HostBuffer y_gpu = download_wide(*ref, yg);
      expect_close("y", y_gpu.tensor(), y_ref.tensor(), tol);
      for (FoldSide* side : {&main, &shortcut}) {
        expect_close("saved mean", side->meang.download().tensor(), side->mean_ref.tensor(), stat_tol);
        expect_close("saved inv std", side->inv_stdg.download().tensor(), side->inv_std_ref.tensor(),
                     stat_tol * 2);
        expect_close("running var", side->rvarg.download().tensor(), side->rvar_ref.tensor(), stat_tol * 2);
      }

      // The same forward with both inputs' statistics from their sums (as their convolutions would hand
      // them over): the same y and saved statistics.
      {
        DeviceTensor main_sums(gpu, converted(*ref, channel_sums(*ref, main.x), DType::f32)),
            shortcut_sums(gpu, converted(*ref, channel_sums(*ref, shortcut.x), DType::f32));
        BatchNormTensors ms = mg, ss = sg;
        ms.input_sums = &main_sums.tensor();
        ss.input_sums = &shortcut_sums.tensor();
        DeviceTensor y_sums(gpu, main.dims, dtype, g.layout);
        gpu.batchnorm_shortcut_forward_training(*plan, *shortcut_plan, ms, ss, y_sums.tensor(),
                                                ws->tensor().data());
        expect_close("y from the inputs' sums", download_wide(*ref, y_sums).tensor(), y_ref.tensor(), tol);
        for (FoldSide* side : {&main, &shortcut}) {
          expect_close("saved mean from the sums", side->meang.download().tensor(), side->mean_ref.tensor(),
                       stat_tol);
          expect_close("saved inv std from the sums", side->inv_stdg.download().tensor(),
                       side->inv_std_ref.tensor(), stat_tol * 2);
        }
        // y back to the first forward's (the backward below masks with it).
        gpu.batchnorm_shortcut_forward_training(*plan, *shortcut_plan, mg, sg, yg.tensor(),
                                                ws->tensor().data());
      }

      // The reference masks the ReLU with the GPU's y (an element rounded to the other side of 0 in
      // f16/bf16 would flip it), as the GPU's backward masks with what its forward wrote.
      const HostBuffer dy = random_host(*ref, main.dims, dtype, 60, g.layout);
      const HostBuffer dy_ref = converted(*ref, dy, main.wide);
      DeviceTensor dyg(gpu, dy);
      for (Accumulate acc : {Accumulate::overwrite, Accumulate::add}) {
        SCOPED_TRACE(acc == Accumulate::add ? "accumulate" : "overwrite");
        gpu.fill(main.dxg.tensor(), std::nan(""));  // overwritten, never read
        gpu.fill(shortcut.dxg.tensor(), std::nan(""));
        gpu.batchnorm_shortcut_backward(*plan, *shortcut_plan, mg, sg, yg.tensor(), dyg.tensor(), acc,
                                        ws->tensor().data());
        ref->batchnorm_shortcut_backward(*ref_plan, *ref_shortcut_plan, mr, sr, y_gpu.tensor(),
                                         dy_ref.tensor(), acc, nullptr);
        const double grad_tol = dtype == DType::f32 ? 5e-5 : tol * 2;
        for (FoldSide* side : {&main, &shortcut}) {
          SCOPED_TRACE(side == &main ? "closing batch norm" : "shortcut's batch norm");
          expect_close("dx", download_wide(*ref, side->dxg).tensor(), side->dx_ref.tensor(), grad_tol);
          expect_close("dgamma", side->dgammag.download().tensor(), side->dgamma_ref.tensor(), grad_tol);
          expect_close("dbeta", side->dbetag.download().tensor(), side->dbeta_ref.tensor(), grad_tol);
        }
      }

      // Inference with the running statistics (the GPU's, given to both).
      for (FoldSide* side : {&main, &shortcut}) {
        side->rmean_ref = side->rmeang.download();
        side->rvar_ref = side->rvarg.download();
      }
      DeviceTensor yig(gpu, main.dims, dtype, g.layout);
      HostBuffer yi_ref(main.dims, main.wide, g.layout);
      gpu.batchnorm_shortcut_forward_inference(*plan, *shortcut_plan, mg, sg, yig.tensor());
      ref->batchnorm_shortcut_forward_inference(*ref_plan, *ref_shortcut_plan, main.ref_tensors(),
                                                shortcut.ref_tensors(), yi_ref.tensor());
      expect_close("inference y", download_wide(*ref, yig).tensor(), yi_ref.tensor(), tol * 2);
    }
  }
}

// The stem's batch norm + ReLU and max pool as one op, y = maxpool3x3/2(relu(bn(x))), on the own fused
// kernels against the composition of the single ops (a backend with --stem-pool-fusion off: the own
// batch-norm kernels, then the own pool kernels, through relu(bn(x)) kept in the saved memory). Both round
// relu(bn(x)) to the data type alike before the pool compares, so the forward's y and saved statistics
// must agree bit for bit (which element of a window wins, ties of the ReLU's zeros included); the backward
// sums in another order (the pool's 2x2 blocks) and does not round a pixel's gradient from two windows to
// the data type: dx, dgamma and dbeta within rounding, overwriting and accumulating; inference (own
// coefficients against cuDNN's inference) within rounding; the forward from the input's sums as from x. Odd
// sizes cut the last blocks; 20 channels of 16-bit do not fit the fused kernels (the backend says so, and
// runs the composition).
TEST_F(CudaBatchNormTest, StemBatchNormMaxPoolMatchesTheComposedOps) {
  Backend& gpu = shared_gpu(false);
  CudaOptions unfused;
  unfused.stem_pool_fusion = false;
  // The backend that runs a path: the default one fuses, the other composes. Plans and buffers are the
  // default one's (both drive GPU 0).
  auto backend = [&](bool fuse) -> Backend& { return fuse ? gpu : shared_gpu(unfused); };
  auto same_bytes = [](const HostBuffer& a, const HostBuffer& b) {
    return a.tensor().bytes() == b.tensor().bytes() &&
           std::memcmp(a.tensor().data(), b.tensor().data(), a.tensor().bytes()) == 0;
  };
  for (const BnCase& bc :
       {BnCase{4, 64, 12, 12}, BnCase{2, 64, 13, 11}, BnCase{3, 128, 8, 6}, BnCase{2, 20, 6, 6}}) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      SCOPED_TRACE(fmt::format("{}x{}x{}x{} {}", bc.n, bc.c, bc.h, bc.w, dtype_name(dtype)));
      BatchNormGeometry g;
      g.batch = bc.n, g.channels = bc.c, g.h = bc.h, g.w = bc.w, g.layout = Layout::nhwc, g.dtype = dtype;
      g.fusion = BatchNormFusion::relu, g.epsilon = 1e-5, g.momentum = 0.1;
      PoolGeometry pg;
      pg.batch = bc.n, pg.channels = bc.c, pg.in_h = bc.h, pg.in_w = bc.w, pg.kernel_h = pg.kernel_w = 3;
      pg.stride_h = pg.stride_w = 2, pg.pad_h = pg.pad_w = 1, pg.kind = PoolKind::max, pg.dtype = dtype;
      pg.layout = Layout::nhwc;
      const bool fits = bc.c % (16 / dtype_size(dtype)) == 0;
      const std::vector<int64_t> ydims{bc.n, bc.c, pg.out_h(), pg.out_w()};
      auto plan = gpu.plan_batchnorm(g);
      auto pool_plan = gpu.plan_pool(pg);
      auto ws = workspace(gpu, plan->workspace_bytes());
      // One copy of the data and parameters for each path (the same seed: the same values), so that the
      // running statistics of each see one forward.
      FoldSide fused(*ref, gpu, g, 70), composed(*ref, gpu, g, 70);
      const double tol = tolerance(dtype);
      auto run = [&](bool fuse, FoldSide& side, DeviceTensor& y, std::unique_ptr<DeviceTensor>& saved) {
        Backend& b = backend(fuse);
        EXPECT_EQ(b.fuses(FusionCandidate::batchnorm_max_pool(g, pg)), fuse && fits);
        saved = workspace(gpu, b.batchnorm_max_pool_saved_bytes(*plan, *pool_plan));
        b.batchnorm_max_pool_forward_training(*plan, *pool_plan, side.gpu_tensors(), y.tensor(),
                                              saved->tensor().data(), ws->tensor().data());
        b.synchronize();  // the other backend runs on its own stream
      };
      DeviceTensor y_fused(gpu, ydims, dtype, g.layout), y_composed(gpu, ydims, dtype, g.layout);
      std::unique_ptr<DeviceTensor> saved_fused, saved_composed;
      gpu.synchronize();  // the uploads, before the other backend reads them
      run(true, fused, y_fused, saved_fused);
      run(false, composed, y_composed, saved_composed);
      EXPECT_TRUE(same_bytes(y_fused.download(), y_composed.download())) << "y";
      EXPECT_TRUE(same_bytes(fused.meang.download(), composed.meang.download())) << "saved mean";
      EXPECT_TRUE(same_bytes(fused.inv_stdg.download(), composed.inv_stdg.download())) << "saved inv std";
      EXPECT_TRUE(same_bytes(fused.rvarg.download(), composed.rvarg.download())) << "running var";

      // An anchor outside the GPU: in f32 (where a near tie or a ReLU flip against the reference's rounding
      // is unlikely) the reference backend's composition, forward and (below) the overwriting backward.
      const bool anchored = dtype == DType::f32;
      BatchNormGeometry g_ref = g;
      PoolGeometry pg_ref = pg;
      g_ref.dtype = pg_ref.dtype = fused.wide;
      auto ref_plan = ref->plan_batchnorm(g_ref);
      auto ref_pool = ref->plan_pool(pg_ref);
      std::vector<double> ref_saved(ref->batchnorm_max_pool_saved_bytes(*ref_plan, *ref_pool) / 8 + 1);
      HostBuffer y_ref(ydims, fused.wide, g.layout);
      if (anchored) {
        ref->batchnorm_max_pool_forward_training(*ref_plan, *ref_pool, fused.ref_tensors(), y_ref.tensor(),
                                                 ref_saved.data(), nullptr);
        expect_close("y against the reference", download_wide(*ref, y_fused).tensor(), y_ref.tensor(), tol);
      }

      const HostBuffer dy = random_host(*ref, ydims, dtype, 80, g.layout);
      const HostBuffer dy_ref = converted(*ref, dy, fused.wide);
      DeviceTensor dyg(gpu, dy);
      for (Accumulate acc : {Accumulate::overwrite, Accumulate::add}) {
        SCOPED_TRACE(acc == Accumulate::add ? "accumulate" : "overwrite");
        for (bool fuse : {true, false}) {
          FoldSide& side = fuse ? fused : composed;
          gpu.fill(side.dxg.tensor(), std::nan(""));  // overwritten, never read
          gpu.synchronize();
          backend(fuse).batchnorm_max_pool_backward(
              *plan, *pool_plan, side.gpu_tensors(), (fuse ? y_fused : y_composed).tensor(), dyg.tensor(),
              (fuse ? saved_fused : saved_composed)->tensor().data(), acc, ws->tensor().data());
          backend(fuse).synchronize();
        }
        const double grad_tol = dtype == DType::f32 ? 5e-5 : tol * 2;
        expect_close("dx", download_wide(*ref, fused.dxg).tensor(),
                     download_wide(*ref, composed.dxg).tensor(), grad_tol);
        if (anchored && acc == Accumulate::overwrite) {
          ref->batchnorm_max_pool_backward(*ref_plan, *ref_pool, fused.ref_tensors(), y_ref.tensor(),
                                           dy_ref.tensor(), ref_saved.data(), acc, nullptr);
          expect_close("dx against the reference", download_wide(*ref, fused.dxg).tensor(),
                       fused.dx_ref.tensor(), 5e-5);
          expect_close("dgamma against the reference", fused.dgammag.download().tensor(),
                       fused.dgamma_ref.tensor(), 5e-5);
        }
        // A pixel that is the maximum of two windows gets their gradients' sum in float where the
        // composition rounds it to the data type first: 16-bit parameter gradients agree to its rounding.
        const double param_tol = dtype == DType::f32 ? 1e-5 : tol;
        expect_close("dgamma", fused.dgammag.download().tensor(), composed.dgammag.download().tensor(),
                     param_tol);
        expect_close("dbeta", fused.dbetag.download().tensor(), composed.dbetag.download().tensor(),
                     param_tol);
      }

      // The forward with x's statistics from its sums (as the convolution before it hands them over).
      {
        DeviceTensor sums(gpu, converted(*ref, channel_sums(*ref, fused.x), DType::f32));
        BatchNormTensors with_sums = fused.gpu_tensors();
        with_sums.input_sums = &sums.tensor();
        DeviceTensor y_sums(gpu, ydims, dtype, g.layout);
        gpu.batchnorm_max_pool_forward_training(*plan, *pool_plan, with_sums, y_sums.tensor(),
                                                saved_fused->tensor().data(), ws->tensor().data());
        expect_close("y from the input's sums", download_wide(*ref, y_sums).tensor(),
                     download_wide(*ref, y_composed).tensor(), tol);
      }

      // Inference with the same running statistics on both paths.
      composed.rmeang.upload(fused.rmeang.download());
      composed.rvarg.upload(fused.rvarg.download());
      gpu.synchronize();
      DeviceTensor yi_fused(gpu, ydims, dtype, g.layout), yi_composed(gpu, ydims, dtype, g.layout);
      for (bool fuse : {true, false}) {
        FoldSide& side = fuse ? fused : composed;
        backend(fuse).batchnorm_max_pool_forward_inference(
            *plan, *pool_plan, side.gpu_tensors(), (fuse ? yi_fused : yi_composed).tensor(),
            (fuse ? saved_fused : saved_composed)->tensor().data());
        backend(fuse).synchronize();
      }
      expect_close("inference y", download_wide(*ref, yi_fused).tensor(),
                   download_wide(*ref, yi_composed).tensor(), tol * 2);
    }
  }
}

// The options decide the fusions the backend offers: the stem's batch norm + max pool, the folded shortcut
// and the convolutions' statistics by default where the kernels fit, none when turned off; FP64 trains on
// cuDNN, which takes none of them.
TEST_F(CudaBatchNormTest, OptionsDecideTheFusions) {
  BatchNormGeometry g;
  g.batch = 2, g.channels = 64, g.h = g.w = 8, g.layout = Layout::nhwc, g.dtype = DType::f16;
  g.fusion = BatchNormFusion::relu;
  PoolGeometry pg;
  pg.batch = 2, pg.channels = 64, pg.in_h = pg.in_w = 8, pg.kernel_h = pg.kernel_w = 3;
  pg.stride_h = pg.stride_w = 2, pg.pad_h = pg.pad_w = 1, pg.layout = Layout::nhwc, pg.dtype = DType::f16;
  BatchNormGeometry closing = g, shortcut = g;
  closing.fusion = BatchNormFusion::add_relu;
  shortcut.fusion = BatchNormFusion::none;
  ConvGeometry conv;
  conv.batch = 2, conv.in_channels = 64, conv.in_h = conv.in_w = 8, conv.out_channels = 64;
  conv.kernel_h = conv.kernel_w = 3, conv.pad_h = conv.pad_w = 1, conv.layout = Layout::nhwc;
  conv.dtype = DType::f16;
  const FusionCandidate pooled = FusionCandidate::batchnorm_max_pool(g, pg),
                        folded = FusionCandidate::shortcut_batchnorm(closing, shortcut),
                        statistics = FusionCandidate::conv_statistics(conv, g);
  EXPECT_TRUE(shared_gpu().fuses(pooled));
  EXPECT_TRUE(shared_gpu().fuses(folded));
  EXPECT_TRUE(shared_gpu().fuses(statistics));
  CudaOptions off;
  off.stem_pool_fusion = false;
  off.fold_shortcut_batchnorm = false;
  off.conv_statistics = KernelChoice::off;
  EXPECT_FALSE(shared_gpu(off).fuses(pooled));
  EXPECT_FALSE(shared_gpu(off).fuses(folded));
  EXPECT_FALSE(shared_gpu(off).fuses(statistics));
  for (FusionCandidate candidate : {pooled, folded, statistics}) {
    candidate.batchnorm.dtype = candidate.shortcut.dtype = candidate.pool.dtype = candidate.conv.dtype =
        DType::f64;
    EXPECT_FALSE(shared_gpu().fuses(candidate));
  }
  EXPECT_NE(describe_cuda_batchnorm_plan(*shared_gpu().plan_batchnorm(g)).find("own"), std::string::npos);
  g.dtype = DType::f64;
  EXPECT_EQ(describe_cuda_batchnorm_plan(*shared_gpu().plan_batchnorm(g)).find("own"), std::string::npos);
}

TEST_F(CudaBatchNormTest, RunningStatsFollowPyTorch) {
  // One channel, known values: batch mean 2.5, biased var 1.25, unbiased var 5/3.
  Backend& gpu = shared_gpu(false);
  for (Layout layout : {Layout::nchw, Layout::nhwc}) {
    BatchNormGeometry g;
    g.batch = 4, g.channels = 1, g.momentum = 0.25, g.layout = layout;
    HostBuffer x({4, 1, 1, 1}, DType::f32, layout);
    for (int i = 0; i < 4; ++i) x.ptr<float>()[i] = static_cast<float>(i + 1);
    HostBuffer one({1}, DType::f32), zero({1}, DType::f32);
    one.ptr<float>()[0] = 1.f;
    DeviceTensor xg(gpu, x), y(gpu, {4, 1, 1, 1}, DType::f32, layout), gamma(gpu, one), beta(gpu, zero),
        rm(gpu, one), rv(gpu, one), sm(gpu, {1}, DType::f32), sis(gpu, {1}, DType::f32);
    auto plan = gpu.plan_batchnorm(g);
    auto ws_buffer = workspace(gpu, plan->workspace_bytes());
    DeviceTensor& ws = *ws_buffer;
    gpu.batchnorm_forward_training(*plan,
                                   BatchNormTensors{.x = &xg.tensor(),
                                                    .gamma = &gamma.tensor(),
                                                    .beta = &beta.tensor(),
                                                    .running_mean = &rm.tensor(),
                                                    .running_var = &rv.tensor(),
                                                    .saved_mean = &sm.tensor(),
                                                    .saved_inv_std = &sis.tensor()},
                                   nullptr, y.tensor(), ws.tensor().data());
    EXPECT_NEAR(sm.download().ptr<float>()[0], 2.5f, 1e-6);
    EXPECT_NEAR(sis.download().ptr<float>()[0], 1.0 / std::sqrt(1.25 + 1e-5), 1e-6);
    EXPECT_NEAR(rm.download().ptr<float>()[0], 0.75 * 1.0 + 0.25 * 2.5, 1e-6);
    EXPECT_NEAR(rv.download().ptr<float>()[0], 0.75 * 1.0 + 0.25 * (5.0 / 3.0), 1e-6)
        << "unbiased running var";
  }
}

TEST_F(CudaBatchNormTest, ReservePersistsPerPlan) {
  // Two layers of the same shape, forward A, forward B, backward B, backward A (a network's order): each
  // backward must see its own layer's forward state.
  Backend& gpu = shared_gpu(false);
  BatchNormGeometry g;
  g.batch = 4, g.channels = 32, g.h = g.w = 6, g.layout = Layout::nhwc, g.dtype = DType::f16;
  g.fusion = BatchNormFusion::add_relu;
  const std::vector<int64_t> dims{4, 32, 6, 6}, cdims{32};
  auto plan_a = gpu.plan_batchnorm(g), plan_b = gpu.plan_batchnorm(g);
  std::printf("  [plan] %s\n", describe_cuda_batchnorm_plan(*plan_a).c_str());
  auto ws_buffer = workspace(gpu, plan_a->workspace_bytes());
  DeviceTensor& ws = *ws_buffer;
  struct Layer {
    HostBuffer x, r, dy;
    std::unique_ptr<DeviceTensor> xg, rg, dyg, yg, mean, inv_std, dx, dr, dgamma, dbeta;
  };
  HostBuffer gamma = random_host(*ref, cdims, DType::f32, 3, Layout::nchw, 0.5, 1.5),
             beta = random_host(*ref, cdims, DType::f32, 4);
  DeviceTensor gammag(gpu, gamma), betag(gpu, beta), rm(gpu, cdims, DType::f32), rv(gpu, cdims, DType::f32);
  gpu.fill(rm.tensor(), 0.0);
  gpu.fill(rv.tensor(), 1.0);
  Layer layers[2];
  for (int i = 0; i < 2; ++i) {
    Layer& l = layers[i];
    l.x = random_host(*ref, dims, DType::f16, 100 + i, Layout::nhwc, -2.0 + i, 2.0 + 3 * i);
    l.r = random_host(*ref, dims, DType::f16, 110 + i, Layout::nhwc);
    l.dy = random_host(*ref, dims, DType::f16, 120 + i, Layout::nhwc);
    l.xg = std::make_unique<DeviceTensor>(gpu, l.x);
    l.rg = std::make_unique<DeviceTensor>(gpu, l.r);
    l.dyg = std::make_unique<DeviceTensor>(gpu, l.dy);
    for (auto* t : {&l.yg, &l.dx, &l.dr})
      *t = std::make_unique<DeviceTensor>(gpu, dims, DType::f16, Layout::nhwc);
    for (auto* t : {&l.mean, &l.inv_std, &l.dgamma, &l.dbeta})
      *t = std::make_unique<DeviceTensor>(gpu, cdims, DType::f32);
  }
  const BatchNormPlan* plans[2] = {plan_a.get(), plan_b.get()};
  for (int i = 0; i < 2; ++i) {
    Layer& l = layers[i];
    gpu.batchnorm_forward_training(*plans[i],
                                   BatchNormTensors{.x = &l.xg->tensor(),
                                                    .gamma = &gammag.tensor(),
                                                    .beta = &betag.tensor(),
                                                    .running_mean = &rm.tensor(),
                                                    .running_var = &rv.tensor(),
                                                    .saved_mean = &l.mean->tensor(),
                                                    .saved_inv_std = &l.inv_std->tensor()},
                                   l.rg->ptr(), l.yg->tensor(), ws.tensor().data());
  }
  for (int i = 1; i >= 0; --i) {
    Layer& l = layers[i];
    gpu.batchnorm_backward(*plans[i],
                           BatchNormTensors{.x = &l.xg->tensor(),
                                            .gamma = &gammag.tensor(),
                                            .saved_mean = &l.mean->tensor(),
                                            .saved_inv_std = &l.inv_std->tensor(),
                                            .dx = &l.dx->tensor(),
                                            .dgamma = &l.dgamma->tensor(),
                                            .dbeta = &l.dbeta->tensor()},
                           l.yg->tensor(), l.dyg->tensor(), l.dr->ptr(), Accumulate::overwrite,
                           ws.tensor().data());
  }
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(fmt::format("layer {}", i));
    Layer& l = layers[i];
    BatchNormGeometry gr = g;
    gr.dtype = DType::f32;
    auto ref_plan = ref->plan_batchnorm(gr);
    HostBuffer x_ref = converted(*ref, l.x, DType::f32), r_ref = converted(*ref, l.r, DType::f32),
               dy_ref = converted(*ref, l.dy, DType::f32), y_gpu = download_wide(*ref, *l.yg);
    HostBuffer y_ref(dims, DType::f32, Layout::nhwc), rm_ref(cdims, DType::f32), rv_ref(cdims, DType::f32),
        mean_ref(cdims, DType::f32), inv_std_ref(cdims, DType::f32), dx_ref(dims, DType::f32, Layout::nhwc),
        dr_ref(dims, DType::f32, Layout::nhwc), dgamma_ref(cdims, DType::f32), dbeta_ref(cdims, DType::f32);
    ref->batchnorm_forward_training(*ref_plan,
                                    BatchNormTensors{.x = &x_ref.tensor(),
                                                     .gamma = &gamma.tensor(),
                                                     .beta = &beta.tensor(),
                                                     .running_mean = &rm_ref.tensor(),
                                                     .running_var = &rv_ref.tensor(),
                                                     .saved_mean = &mean_ref.tensor(),
                                                     .saved_inv_std = &inv_std_ref.tensor()},
                                    &r_ref.tensor(), y_ref.tensor(), nullptr);
    ref->batchnorm_backward(*ref_plan,
                            BatchNormTensors{.x = &x_ref.tensor(),
                                             .gamma = &gamma.tensor(),
                                             .saved_mean = &mean_ref.tensor(),
                                             .saved_inv_std = &inv_std_ref.tensor(),
                                             .dx = &dx_ref.tensor(),
                                             .dgamma = &dgamma_ref.tensor(),
                                             .dbeta = &dbeta_ref.tensor()},
                            y_gpu.tensor(), dy_ref.tensor(), &dr_ref.tensor(), Accumulate::overwrite,
                            nullptr);
    expect_close("y", y_gpu.tensor(), y_ref.tensor(), tolerance(DType::f16));
    expect_close("dx", download_wide(*ref, *l.dx).tensor(), dx_ref.tensor(), tolerance(DType::f16, false, 2));
    expect_close("dgamma", l.dgamma->download().tensor(), dgamma_ref.tensor(),
                 tolerance(DType::f16, false, 2));
    expect_close("dresidual", download_wide(*ref, *l.dr).tensor(), dr_ref.tensor(), 0.0);
  }
}

}  // namespace
}  // namespace dlbench
