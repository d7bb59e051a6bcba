#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "backend/reference/reference_backend.h"
#include "core/status.h"
#include "gradient_check.h"
#include "reference_test_util.h"

namespace dlbench {
namespace {

using testing::at;
using testing::converted;
using testing::from_values;
using testing::gradient_matches;
using testing::random_buffer;
using testing::weighted_sum;
using testing::zeros;

struct PoolCase {
  const char* name;
  int64_t n, c, h, w, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
};
void PrintTo(const PoolCase& pc, std::ostream* os) { *os << pc.name; }

PoolGeometry geometry_of(const PoolCase& pc, PoolKind kind, DType dtype, Layout layout) {
  PoolGeometry g;
  g.batch = pc.n;
  g.channels = pc.c;
  g.in_h = pc.h;
  g.in_w = pc.w;
  g.kernel_h = pc.kernel_h;
  g.kernel_w = pc.kernel_w;
  g.stride_h = pc.stride_h;
  g.stride_w = pc.stride_w;
  g.pad_h = pc.pad_h;
  g.pad_w = pc.pad_w;
  g.kind = kind;
  g.dtype = dtype;
  g.layout = layout;
  return g;
}

std::vector<int64_t> x_dims(const PoolGeometry& g) { return {g.batch, g.channels, g.in_h, g.in_w}; }
std::vector<int64_t> y_dims(const PoolGeometry& g) { return {g.batch, g.channels, g.out_h(), g.out_w()}; }

const PoolCase kCases[] = {
    {"k3_stride2_pad1_even", 2, 3, 8, 8, 3, 3, 2, 2, 1, 1},  // ResNet's stem pool
    {"k3_stride2_pad1_odd", 1, 2, 7, 9, 3, 3, 2, 2, 1, 1},
    {"global_non_square", 2, 3, 5, 6, 5, 6, 1, 1, 0, 0},  // ResNet's head pool
};

class PoolGradient : public ::testing::TestWithParam<std::tuple<PoolCase, PoolKind, Layout>> {};

TEST_P(PoolGradient, MatchesCentralDifferences) {
  const auto& [pc, kind, layout] = GetParam();
  ReferenceBackend backend;
  const PoolGeometry g = geometry_of(pc, kind, DType::f64, layout);
  auto plan = backend.plan_pool(g);
  // Distinct values 0.01 apart: the max of every window is unique and stays so under a 1e-6 step.
  HostBuffer x = testing::distinct_buffer(x_dims(g), layout, 31);
  HostBuffer y = zeros(y_dims(g), DType::f64, layout);
  HostBuffer r = random_buffer(y_dims(g), DType::f64, layout, 32);
  HostBuffer dx = zeros(x_dims(g), DType::f64, layout);
  backend.pool_forward(*plan, x.tensor(), y.tensor(), nullptr);
  backend.pool_backward(*plan, x.tensor(), y.tensor(), r.tensor(), nullptr, dx.tensor());
  auto loss = [&] {
    backend.pool_forward(*plan, x.tensor(), y.tensor(), nullptr);
    return weighted_sum(y.tensor(), r.tensor());
  };
  EXPECT_TRUE(gradient_matches(loss, x.tensor(), dx.tensor(), testing::kGradientTolerance));
}

INSTANTIATE_TEST_SUITE_P(Geometries, PoolGradient,
                         ::testing::Combine(::testing::ValuesIn(kCases),
                                            ::testing::Values(PoolKind::max, PoolKind::average),
                                            ::testing::Values(Layout::nchw, Layout::nhwc)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) +
                                  (std::get<1>(info.param) == PoolKind::max ? "_max_" : "_average_") +
                                  testing::layout_label(std::get<2>(info.param));
                         });

// 4x4 input 0..15 row by row, 3x3 windows, stride 2, pad 1: 2x2 outputs. Window (0,0) covers rows/cols
// -1..1 (a 2x2 real corner), window (1,1) covers rows/cols 1..3 (3x3 real).
TEST(Pool, HandComputedWindowsAndPaddingDivisor) {
  ReferenceBackend backend;
  std::vector<double> values(16);
  for (int i = 0; i < 16; ++i) values[static_cast<size_t>(i)] = i;
  HostBuffer x_nchw = from_values({1, 1, 4, 4}, DType::f64, values);
  for (Layout layout : {Layout::nchw, Layout::nhwc}) {
    SCOPED_TRACE(testing::layout_label(layout));
    HostBuffer x = converted(x_nchw.tensor(), DType::f64, layout);
    const PoolCase pc{"", 1, 1, 4, 4, 3, 3, 2, 2, 1, 1};
    HostBuffer y = zeros({1, 1, 2, 2}, DType::f64, layout);

    backend.pool_forward(*backend.plan_pool(geometry_of(pc, PoolKind::max, DType::f64, layout)), x.tensor(),
                         y.tensor(), nullptr);
    EXPECT_EQ(at(y.tensor(), 0, 0, 0, 0), 5);   // max of {0, 1, 4, 5}
    EXPECT_EQ(at(y.tensor(), 0, 0, 0, 1), 7);   // rows 0..1, cols 1..3
    EXPECT_EQ(at(y.tensor(), 0, 0, 1, 1), 15);  // rows 1..3, cols 1..3

    backend.pool_forward(*backend.plan_pool(geometry_of(pc, PoolKind::average, DType::f64, layout)),
                         x.tensor(), y.tensor(), nullptr);
    EXPECT_DOUBLE_EQ(at(y.tensor(), 0, 0, 0, 0), (0 + 1 + 4 + 5) / 4.0);  // padding not in the divisor
    EXPECT_DOUBLE_EQ(at(y.tensor(), 0, 0, 0, 1), (1 + 2 + 3 + 5 + 6 + 7) / 6.0);
    EXPECT_DOUBLE_EQ(at(y.tensor(), 0, 0, 1, 1), (5 + 6 + 7 + 9 + 10 + 11 + 13 + 14 + 15) / 9.0);

    // Average backward: each output shares its gradient equally among its real pixels.
    HostBuffer dy =
        converted(from_values({1, 1, 2, 2}, DType::f64, {4, 6, 0, 0}).tensor(), DType::f64, layout);
    HostBuffer dx = zeros({1, 1, 4, 4}, DType::f64, layout);
    backend.pool_backward(*backend.plan_pool(geometry_of(pc, PoolKind::average, DType::f64, layout)),
                          x.tensor(), y.tensor(), dy.tensor(), nullptr, dx.tensor());
    EXPECT_DOUBLE_EQ(at(dx.tensor(), 0, 0, 0, 0), 4 / 4.0);
    EXPECT_DOUBLE_EQ(at(dx.tensor(), 0, 0, 0, 1), 4 / 4.0 + 6 / 6.0);  // in both windows
    EXPECT_DOUBLE_EQ(at(dx.tensor(), 0, 0, 0, 3), 6 / 6.0);
    EXPECT_DOUBLE_EQ(at(dx.tensor(), 0, 0, 2, 0), 0);
  }
}

// Ties: the whole gradient goes to the first maximum in scan order (row by row), never split.
TEST(Pool, MaxBackwardRoutesToFirstMaximum) {
  ReferenceBackend backend;
  for (Layout layout : {Layout::nchw, Layout::nhwc}) {
    SCOPED_TRACE(testing::layout_label(layout));
    const PoolGeometry g = geometry_of({"", 1, 1, 3, 3, 3, 3, 1, 1, 1, 1}, PoolKind::max, DType::f64, layout);
    HostBuffer x = converted(from_values({1, 1, 3, 3}, DType::f64, {0, 2, 2, 2, 1, 0, 2, 0, 0}).tensor(),
                             DType::f64, layout);
    HostBuffer y = zeros(y_dims(g), DType::f64, layout);
    HostBuffer dy = testing::filled(y_dims(g), DType::f64, 1.0, layout);
    HostBuffer dx = zeros(x_dims(g), DType::f64, layout);
    auto plan = backend.plan_pool(g);
    backend.pool_forward(*plan, x.tensor(), y.tensor(), nullptr);
    backend.pool_backward(*plan, x.tensor(), y.tensor(), dy.tensor(), nullptr, dx.tensor());
    // x = [[0 2 2] [2 1 0] [2 0 0]]. The six windows that include row 0 find the 2 at (0,1) first; the two
    // bottom-left windows (rows 1..2, cols 0..1 and 0..2) find the 2 at (1,0); the bottom-right window
    // (rows 1..2, cols 1..2) holds {1, 0, 0, 0}: its max is at (1,1).
    EXPECT_EQ(at(dx.tensor(), 0, 0, 0, 1), 6);
    EXPECT_EQ(at(dx.tensor(), 0, 0, 1, 0), 2);
    EXPECT_EQ(at(dx.tensor(), 0, 0, 1, 1), 1);
    EXPECT_EQ(at(dx.tensor(), 0, 0, 0, 2), 0);
    EXPECT_EQ(at(dx.tensor(), 0, 0, 2, 0), 0);
    double total = 0;
    for (int64_t i = 0; i < dx.numel(); ++i) total += dx.ptr<double>()[i];
    EXPECT_EQ(total, 9);  // one unit per output, none lost, none duplicated
  }
}

// Padding is -inf for max: an all-negative window keeps a negative maximum (a zero pad would win).
TEST(Pool, MaxPaddingNeverWins) {
  ReferenceBackend backend;
  const PoolGeometry g =
      geometry_of({"", 1, 1, 2, 2, 3, 3, 2, 2, 1, 1}, PoolKind::max, DType::f64, Layout::nchw);
  HostBuffer x = from_values({1, 1, 2, 2}, DType::f64, {-4, -3, -2, -1});
  HostBuffer y = zeros(y_dims(g), DType::f64);
  backend.pool_forward(*backend.plan_pool(g), x.tensor(), y.tensor(), nullptr);
  EXPECT_EQ(y.ptr<double>()[0], -1);
}

TEST(Pool, LayoutsAgreeAndF32MatchesF64) {
  ReferenceBackend backend;
  for (const PoolCase& pc : kCases)
    for (PoolKind kind : {PoolKind::max, PoolKind::average}) {
      SCOPED_TRACE(pc.name);
      std::vector<HostBuffer> ys, dxs;
      const PoolGeometry g0 = geometry_of(pc, kind, DType::f32, Layout::nchw);
      HostBuffer x0 = testing::distinct_buffer(x_dims(g0), Layout::nchw, 5, 0.125);  // exact in f32
      HostBuffer dy0 = random_buffer(y_dims(g0), DType::f32, Layout::nchw, 6);
      for (DType dtype : {DType::f32, DType::f64})
        for (Layout layout : {Layout::nchw, Layout::nhwc}) {
          const PoolGeometry g = geometry_of(pc, kind, dtype, layout);
          HostBuffer x = converted(x0.tensor(), dtype, layout), dy = converted(dy0.tensor(), dtype, layout);
          ys.push_back(zeros(y_dims(g), dtype, layout));
          dxs.push_back(zeros(x_dims(g), dtype, layout));
          auto plan = backend.plan_pool(g);
          backend.pool_forward(*plan, x.tensor(), ys.back().tensor(), nullptr);
          backend.pool_backward(*plan, x.tensor(), ys.back().tensor(), dy.tensor(), nullptr,
                                dxs.back().tensor());
        }
      // [0] f32 NCHW, [1] f32 NHWC, [2] f64 NCHW, [3] f64 NHWC.
      for (size_t i : {1, 3}) {
        EXPECT_EQ(testing::logical_relative_error(ys[i].tensor(), ys[i - 1].tensor()), 0);
        EXPECT_EQ(testing::logical_relative_error(dxs[i].tensor(), dxs[i - 1].tensor()), 0);
      }
      EXPECT_LT(testing::logical_relative_error(ys[0].tensor(), ys[2].tensor()), testing::kF32VsF64Tolerance);
      EXPECT_LT(testing::logical_relative_error(dxs[0].tensor(), dxs[2].tensor()),
                testing::kF32VsF64Tolerance);
    }
}

TEST(Pool, RejectsBadGeometryAndShapes) {
  ReferenceBackend backend;
  PoolGeometry g = geometry_of(kCases[0], PoolKind::max, DType::f32, Layout::nchw);
  g.pad_h = 3;  // as large as the kernel: a window could lie entirely in the padding
  EXPECT_THROW(backend.plan_pool(g), Error);
  g = geometry_of(kCases[0], PoolKind::max, DType::f32, Layout::nchw);
  auto plan = backend.plan_pool(g);
  HostBuffer x = zeros(x_dims(g), DType::f32), y = zeros({2, 3, 5, 4}, DType::f32);
  EXPECT_THROW(backend.pool_forward(*plan, x.tensor(), y.tensor(), nullptr), Error);
}

}  // namespace
}  // namespace dlbench
