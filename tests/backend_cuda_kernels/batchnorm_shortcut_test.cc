// The own batch-norm kernels with a projection shortcut folded in (own_batchnorm_shortcut_*) against the
// same kernels composed: the shortcut's batch norm (fusion none) into a buffer, then the closing one
// (add_relu) with that buffer as its residual; backward, the closing one's gradient to its residual fed
// to the shortcut's. NHWC, f32/f16/bf16, ResNet-like shapes and one of several tiles and splits. The folded
// forward adds bn_s(s) unrounded where the composition rounds it to the dtype first, so y and what
// follows from it agree to the dtype's rounding (the backward given one ReLU mask); the statistics to
// f32's.
#include <gtest/gtest.h>

#ifndef DLBENCH_WITH_CUDA
TEST(CudaKernels, Skipped) { GTEST_SKIP() << "no CUDA GPU: dlbench was built without CUDA"; }
#else

#include <fmt/format.h>

#include <vector>

#include "backend/cuda/batchnorm_launch.h"
#include "backend/cuda/kernels.h"
#include "cuda_kernels_test_util.h"

namespace dlbench::testing {
namespace {

using cuda::OwnBatchNormLaunch;
using cuda::OwnBatchNormSide;

class BatchNormShortcutTest : public CudaKernelTest {};

// One batch norm's device state: parameters, statistics, gradients, held memory, input and its gradient.
struct Norm {
  Norm(const BatchNormGeometry& g, uint64_t seed)
      : launch(cuda::own_batchnorm_launch(g)),
        c(g.channels),
        elements(g.batch * g.channels * g.h * g.w),
        gamma(c * 4),
        beta(c * 4),
        running_mean(c * 4),
        running_var(c * 4),
        saved_mean(c * 4),
        saved_inv_std(c * 4),
        dgamma(c * 4),
        dbeta(c * 4),
        held(cuda::own_batchnorm_held_bytes(launch)),
        x(size_t(elements) * dtype_size(g.dtype)),
        dx(size_t(elements) * dtype_size(g.dtype)) {
    gamma.upload(random_values(c, DType::f32, seed, 0.5, 1.5));
    beta.upload(random_values(c, DType::f32, seed + 1));
    running_mean.upload(random_values(c, DType::f32, seed + 2));
    running_var.upload(random_values(c, DType::f32, seed + 3, 0.5, 2.0));
    x.upload(random_values(elements, g.dtype, seed + 4, -1.0, 3.0));
  }
  OwnBatchNormSide side(bool backward) {
    OwnBatchNormSide s;
    s.launch = &launch;
    s.x = x.get();
    s.gamma = gamma.as<float>();
    s.beta = beta.as<float>();
    s.saved_mean = saved_mean.as<float>();
    s.saved_inv_std = saved_inv_std.as<float>();
    if (backward) {
      s.dx = dx.get();
      s.dgamma = dgamma.as<float>();
      s.dbeta = dbeta.as<float>();
    } else {
      s.running_mean = running_mean.as<float>();
      s.running_var = running_var.as<float>();
    }
    s.held = held.get();
    return s;
  }
  OwnBatchNormLaunch launch;
  int64_t c, elements;
  DeviceBuffer gamma, beta, running_mean, running_var, saved_mean, saved_inv_std, dgamma, dbeta, held, x, dx;
};

std::vector<double> read(const DeviceBuffer& b, int64_t n, DType dtype) {
  HostBuffer h({n}, dtype);
  b.download(h);
  return values(h);
}

TEST_F(BatchNormShortcutTest, FoldedMatchesTheComposedKernels) {
  struct Shape {
    int64_t n, c, h, w;
  };
  for (const Shape& shape : {Shape{8, 64, 14, 14}, Shape{4, 256, 7, 7}, Shape{2, 520, 3, 5}})
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      SCOPED_TRACE(fmt::format("{}x{}x{}x{} {}", shape.n, shape.c, shape.h, shape.w, dtype_name(dtype)));
      BatchNormGeometry closing;
      closing.batch = shape.n, closing.channels = shape.c, closing.h = shape.h, closing.w = shape.w;
      closing.layout = Layout::nhwc, closing.dtype = dtype, closing.fusion = BatchNormFusion::add_relu;
      BatchNormGeometry shortcut_g = closing;
      shortcut_g.fusion = BatchNormFusion::none;
      const int64_t n = shape.n * shape.c * shape.h * shape.w, c = shape.c;
      const size_t bytes = size_t(n) * dtype_size(dtype);
      // Two copies of the same state: folded (f) and composed (k).
      Norm f_main(closing, 10), f_short(shortcut_g, 20), k_main(closing, 10), k_short(shortcut_g, 20);
      const size_t ws_bytes = cuda::own_batchnorm_workspace_bytes(f_main.launch) +
                              cuda::own_batchnorm_workspace_bytes(f_short.launch);
      DeviceBuffer workspace(ws_bytes), y_f(bytes), y_k(bytes), normalised(bytes), between(bytes), dy(bytes);
      dy.upload(random_values(n, dtype, 30));

      ASSERT_TRUE(cuda::own_batchnorm_shortcut_forward_training(f_main.side(false), f_short.side(false),
                                                                y_f.get(), workspace.get(), stream_));
      const OwnBatchNormSide ks = k_short.side(false), km = k_main.side(false);
      cuda::own_batchnorm_forward_training(k_short.launch, ks.x, nullptr, ks.gamma, ks.beta, normalised.get(),
                                           ks.running_mean, ks.running_var, ks.saved_mean, ks.saved_inv_std,
                                           workspace.get(), ks.held, stream_);
      cuda::own_batchnorm_forward_training(k_main.launch, km.x, normalised.get(), km.gamma, km.beta,
                                           y_k.get(), km.running_mean, km.running_var, km.saved_mean,
                                           km.saved_inv_std, workspace.get(), km.held, stream_);
      sync();
      const double tol = tolerance(dtype) * 4;
      EXPECT_LE(max_relative_error(read(y_f, n, dtype), read(y_k, n, dtype)), tol) << "y";
      for (auto [f, k] : {std::pair{&f_main, &k_main}, std::pair{&f_short, &k_short}}) {
        EXPECT_LE(max_relative_error(read(f->saved_mean, c, DType::f32), read(k->saved_mean, c, DType::f32)),
                  1e-6);
        EXPECT_LE(
            max_relative_error(read(f->saved_inv_std, c, DType::f32), read(k->saved_inv_std, c, DType::f32)),
            1e-6);
        EXPECT_LE(
            max_relative_error(read(f->running_var, c, DType::f32), read(k->running_var, c, DType::f32)),
            1e-6);
      }

      // Where y is within a rounding of zero, the two ys may fall on either side of it; the backward is
      // a step function there. So the composition's backward masks where the folded forward's ReLU passed:
      // its mask copied over the composed forward's, then both backwards must agree to the rounding.
      const size_t mask_bytes = cuda::bn::relu_mask_bytes(closing);
      ASSERT_GT(mask_bytes, 0u);
      const size_t mask_at = cuda::own_batchnorm_held_bytes(k_main.launch) - mask_bytes;
      ASSERT_EQ(cudaMemcpy(static_cast<char*>(k_main.held.get()) + mask_at,
                           static_cast<const char*>(f_main.held.get()) + mask_at, mask_bytes,
                           cudaMemcpyDeviceToDevice),
                cudaSuccess);
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
        ASSERT_TRUE(cuda::own_batchnorm_shortcut_backward(f_main.side(true), f_short.side(true), dy.get(),
                                                          accumulate, workspace.get(), stream_));
        const OwnBatchNormSide bm = k_main.side(true), bs = k_short.side(true);
        cuda::own_batchnorm_backward(k_main.launch, bm.x, y_k.get(), dy.get(), bm.gamma, bm.saved_mean,
                                     bm.saved_inv_std, bm.dx, between.get(), bm.dgamma, bm.dbeta, accumulate,
                                     workspace.get(), bm.held, stream_);
        cuda::own_batchnorm_backward(k_short.launch, bs.x, nullptr, between.get(), bs.gamma, bs.saved_mean,
                                     bs.saved_inv_std, bs.dx, nullptr, bs.dgamma, bs.dbeta, accumulate,
                                     workspace.get(), bs.held, stream_);
        sync();
        for (auto [f, k] : {std::pair{&f_main, &k_main}, std::pair{&f_short, &k_short}}) {
          EXPECT_LE(max_relative_error(read(f->dx, n, dtype), read(k->dx, n, dtype)), tol) << "dx";
          EXPECT_LE(max_relative_error(read(f->dgamma, c, DType::f32), read(k->dgamma, c, DType::f32)), tol)
              << "dgamma";
          EXPECT_LE(max_relative_error(read(f->dbeta, c, DType::f32), read(k->dbeta, c, DType::f32)), tol)
              << "dbeta";
        }
      }
    }
}

// Channels not in whole 16-byte vectors: the folded kernels decline, launching nothing.
TEST_F(BatchNormShortcutTest, DeclinesChannelsNotInWholeVectors) {
  BatchNormGeometry closing;
  closing.batch = 2, closing.channels = 20, closing.h = closing.w = 3;
  closing.layout = Layout::nhwc, closing.dtype = DType::f16, closing.fusion = BatchNormFusion::add_relu;
  BatchNormGeometry shortcut_g = closing;
  shortcut_g.fusion = BatchNormFusion::none;
  Norm main(closing, 1), shortcut(shortcut_g, 2);
  DeviceBuffer workspace(cuda::own_batchnorm_workspace_bytes(main.launch) * 2), y(2 * 20 * 9 * 2);
  EXPECT_FALSE(cuda::own_batchnorm_shortcut_forward_training(main.side(false), shortcut.side(false), y.get(),
                                                             workspace.get(), stream_));
}

}  // namespace
}  // namespace dlbench::testing

#endif
