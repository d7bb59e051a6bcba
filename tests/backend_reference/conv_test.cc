#include <gtest/gtest.h>

#include <cmath>
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

struct ConvCase {
  const char* name;
  int64_t n, c, h, w, k, r, s, stride_h, stride_w, pad_h, pad_w;
};

void PrintTo(const ConvCase& cc, std::ostream* os) { *os << cc.name; }

ConvGeometry geometry_of(const ConvCase& cc, DType dtype, Layout layout) {
  ConvGeometry g;
  g.batch = cc.n;
  g.in_channels = cc.c;
  g.in_h = cc.h;
  g.in_w = cc.w;
  g.out_channels = cc.k;
  g.kernel_h = cc.r;
  g.kernel_w = cc.s;
  g.stride_h = cc.stride_h;
  g.stride_w = cc.stride_w;
  g.pad_h = cc.pad_h;
  g.pad_w = cc.pad_w;
  g.dtype = dtype;
  g.layout = layout;
  return g;
}

// Host buffers for one convolution: inputs random, outputs zero.
struct ConvBuffers {
  ConvBuffers(const ConvGeometry& g, uint64_t seed)
      : x(random_buffer({g.batch, g.in_channels, g.in_h, g.in_w}, g.dtype, g.layout, seed)),
        w(random_buffer({g.out_channels, g.in_channels, g.kernel_h, g.kernel_w}, g.dtype, g.layout,
                        seed + 1)),
        y(zeros({g.batch, g.out_channels, g.out_h(), g.out_w()}, g.dtype, g.layout)),
        dy(random_buffer({g.batch, g.out_channels, g.out_h(), g.out_w()}, g.dtype, g.layout, seed + 2)),
        dx(zeros({g.batch, g.in_channels, g.in_h, g.in_w}, g.dtype, g.layout)),
        dw(zeros({g.out_channels, g.in_channels, g.kernel_h, g.kernel_w}, g.dtype, g.layout)) {}
  HostBuffer x, w, y, dy, dx, dw;
};

const ConvCase kCases[] = {
    {"pointwise_1x1", 2, 3, 5, 5, 4, 1, 1, 1, 1, 0, 0},
    {"k3_pad1", 2, 3, 6, 6, 4, 3, 3, 1, 1, 1, 1},
    {"k7_stride2_pad3", 1, 2, 11, 11, 3, 7, 7, 2, 2, 3, 3},
    {"odd_sizes_k3_stride2_pad1", 2, 3, 7, 9, 2, 3, 3, 2, 2, 1, 1},
    {"stride2_no_pad_partial_window", 1, 2, 8, 7, 3, 3, 3, 2, 2, 0, 0},
    {"non_square_k3x1_stride1x2", 1, 2, 6, 7, 3, 3, 1, 1, 2, 1, 0},
    {"non_square_k1x5_pad0x2", 2, 2, 4, 6, 2, 1, 5, 1, 1, 0, 2},
};

class ConvGradient : public ::testing::TestWithParam<std::tuple<ConvCase, Layout>> {};

// loss = sum(conv(x, w) * r): the analytic gradients are the two backward ops applied to dy = r.
TEST_P(ConvGradient, MatchesCentralDifferences) {
  const auto& [cc, layout] = GetParam();
  ReferenceBackend backend;
  const ConvGeometry g = geometry_of(cc, DType::f64, layout);
  auto plan = backend.plan_conv(g);
  ConvBuffers b(g, 11);
  Tensor &x = b.x.tensor(), &w = b.w.tensor(), &y = b.y.tensor(), &r = b.dy.tensor();
  backend.conv_backward_data(*plan, r, w, b.dx.tensor(), Accumulate::overwrite, nullptr);
  backend.conv_backward_filter(*plan, x, r, b.dw.tensor(), Accumulate::overwrite, nullptr);

  auto loss = [&] {
    backend.conv_forward(*plan, x, w, y, nullptr);
    return weighted_sum(y, r);
  };
  EXPECT_TRUE(gradient_matches(loss, x, b.dx.tensor(), testing::kGradientTolerance)) << "dx";
  EXPECT_TRUE(gradient_matches(loss, w, b.dw.tensor(), testing::kGradientTolerance)) << "dw";
}

INSTANTIATE_TEST_SUITE_P(Geometries, ConvGradient,
                         ::testing::Combine(::testing::ValuesIn(kCases),
                                            ::testing::Values(Layout::nchw, Layout::nhwc)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_" +
                                  testing::layout_label(std::get<1>(info.param));
                         });

// x = [[1 2 3] [4 5 6] [7 8 9]] (channel 0) and 10 * x (channel 1); two filters of 2x2.
TEST(Conv, HandComputedTinyCase) {
  ReferenceBackend backend;
  const std::vector<double> x_values = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 30, 40, 50, 60, 70, 80, 90};
  // Filter 0 reads channel 0 with [[1 2] [3 4]] and ignores channel 1; filter 1 takes channel 1 at its
  // top-left tap minus channel 0 at its bottom-right tap.
  const std::vector<double> w_values = {1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, -1, 1, 0, 0, 0};
  HostBuffer x_nchw = from_values({1, 2, 3, 3}, DType::f64, x_values);
  HostBuffer w_nchw = from_values({2, 2, 2, 2}, DType::f64, w_values);

  for (Layout layout : {Layout::nchw, Layout::nhwc}) {
    SCOPED_TRACE(testing::layout_label(layout));
    HostBuffer x = converted(x_nchw.tensor(), DType::f64, layout);
    HostBuffer w = converted(w_nchw.tensor(), DType::f64, layout);
    {  // stride 1, no padding: 2x2 output
      ConvGeometry g = geometry_of({"", 1, 2, 3, 3, 2, 2, 2, 1, 1, 0, 0}, DType::f64, layout);
      HostBuffer y = zeros({1, 2, 2, 2}, DType::f64, layout);
      backend.conv_forward(*backend.plan_conv(g), x.tensor(), w.tensor(), y.tensor(), nullptr);
      // filter 0: 1*1 + 2*2 + 4*3 + 5*4 = 37, then 47, 67, 77.
      EXPECT_EQ(at(y.tensor(), 0, 0, 0, 0), 37);
      EXPECT_EQ(at(y.tensor(), 0, 0, 0, 1), 47);
      EXPECT_EQ(at(y.tensor(), 0, 0, 1, 0), 67);
      EXPECT_EQ(at(y.tensor(), 0, 0, 1, 1), 77);
      // filter 1: 10 * x[p][q] - x[p+1][q+1]: 10 - 5, 20 - 6, 40 - 8, 50 - 9.
      EXPECT_EQ(at(y.tensor(), 0, 1, 0, 0), 5);
      EXPECT_EQ(at(y.tensor(), 0, 1, 0, 1), 14);
      EXPECT_EQ(at(y.tensor(), 0, 1, 1, 0), 32);
      EXPECT_EQ(at(y.tensor(), 0, 1, 1, 1), 41);
    }
    {  // stride 2, pad 1: windows start at -1 and 1, so padding zeros replace the missing taps
      ConvGeometry g = geometry_of({"", 1, 2, 3, 3, 2, 2, 2, 2, 2, 1, 1}, DType::f64, layout);
      ASSERT_EQ(g.out_h(), 2);
      HostBuffer y = zeros({1, 2, 2, 2}, DType::f64, layout);
      backend.conv_forward(*backend.plan_conv(g), x.tensor(), w.tensor(), y.tensor(), nullptr);
      EXPECT_EQ(at(y.tensor(), 0, 0, 0, 0), 1 * 4);          // only x[0][0] under tap (1,1)
      EXPECT_EQ(at(y.tensor(), 0, 0, 0, 1), 2 * 3 + 3 * 4);  // x[0][1], x[0][2] under taps (1,0), (1,1)
      EXPECT_EQ(at(y.tensor(), 0, 0, 1, 0), 4 * 2 + 7 * 4);  // x[1][0], x[2][0] under taps (0,1), (1,1)
      EXPECT_EQ(at(y.tensor(), 0, 0, 1, 1), 5 * 1 + 6 * 2 + 8 * 3 + 9 * 4);
      EXPECT_EQ(at(y.tensor(), 0, 1, 0, 0), -1);  // tap (0,0) in the padding, -x[0][0]
      EXPECT_EQ(at(y.tensor(), 0, 1, 1, 1), 50 - 9);
    }
  }
}

// Backward data on a hand case: one 1x3x3 input, one 2x2 filter of ones, stride 1: every input pixel
// receives dy from each output whose window covers it, so dx counts the windows over each pixel.
TEST(Conv, BackwardDataCountsOverlappingWindows) {
  ReferenceBackend backend;
  ConvGeometry g = geometry_of({"", 1, 1, 3, 3, 1, 2, 2, 1, 1, 0, 0}, DType::f64, Layout::nchw);
  HostBuffer dy = testing::filled({1, 1, 2, 2}, DType::f64, 1.0);
  HostBuffer w = testing::filled({1, 1, 2, 2}, DType::f64, 1.0);
  HostBuffer dx = zeros({1, 1, 3, 3}, DType::f64);
  backend.conv_backward_data(*backend.plan_conv(g), dy.tensor(), w.tensor(), dx.tensor(),
                             Accumulate::overwrite, nullptr);
  const double expected[9] = {1, 2, 1, 2, 4, 2, 1, 2, 1};
  for (int i = 0; i < 9; ++i) EXPECT_EQ(dx.ptr<double>()[i], expected[i]) << i;
}

TEST(Conv, AccumulateAddsAndOverwriteIgnoresOldContents) {
  ReferenceBackend backend;
  const ConvGeometry g = geometry_of(kCases[1], DType::f64, Layout::nhwc);
  auto plan = backend.plan_conv(g);
  ConvBuffers b(g, 5);
  // Overwrite into memory holding NaN: nothing of it may survive.
  testing::fill_value(b.dx.tensor(), NAN);
  testing::fill_value(b.dw.tensor(), NAN);
  backend.conv_backward_data(*plan, b.dy.tensor(), b.w.tensor(), b.dx.tensor(), Accumulate::overwrite,
                             nullptr);
  backend.conv_backward_filter(*plan, b.x.tensor(), b.dy.tensor(), b.dw.tensor(), Accumulate::overwrite,
                               nullptr);
  ASSERT_TRUE(testing::all_finite(b.dx.tensor()));
  ASSERT_TRUE(testing::all_finite(b.dw.tensor()));

  HostBuffer dx_sum = random_buffer(b.dx.tensor().dims(), DType::f64, g.layout, 77);
  HostBuffer dw_sum = random_buffer(b.dw.tensor().dims(), DType::f64, g.layout, 78);
  HostBuffer dx_before = converted(dx_sum.tensor(), DType::f64, g.layout);
  HostBuffer dw_before = converted(dw_sum.tensor(), DType::f64, g.layout);
  backend.conv_backward_data(*plan, b.dy.tensor(), b.w.tensor(), dx_sum.tensor(), Accumulate::add, nullptr);
  backend.conv_backward_filter(*plan, b.x.tensor(), b.dy.tensor(), dw_sum.tensor(), Accumulate::add, nullptr);
  for (int64_t i = 0; i < dx_sum.numel(); ++i)
    EXPECT_NEAR(dx_sum.ptr<double>()[i], dx_before.ptr<double>()[i] + b.dx.ptr<double>()[i], 1e-14) << i;
  for (int64_t i = 0; i < dw_sum.numel(); ++i)
    EXPECT_NEAR(dw_sum.ptr<double>()[i], dw_before.ptr<double>()[i] + b.dw.ptr<double>()[i], 1e-14) << i;
}

// The same logical data in NCHW and NHWC gives the same logical results, forward and backward.
TEST(Conv, LayoutsAgree) {
  ReferenceBackend backend;
  for (const ConvCase& cc : kCases) {
    SCOPED_TRACE(cc.name);
    const ConvGeometry gc = geometry_of(cc, DType::f64, Layout::nchw);
    const ConvGeometry gh = geometry_of(cc, DType::f64, Layout::nhwc);
    ConvBuffers c(gc, 21), h(gh, 0);
    h.x = converted(c.x.tensor(), DType::f64, Layout::nhwc);
    h.w = converted(c.w.tensor(), DType::f64, Layout::nhwc);
    h.dy = converted(c.dy.tensor(), DType::f64, Layout::nhwc);
    for (auto* b : {&c, &h}) {
      const ConvGeometry& g = b == &c ? gc : gh;
      auto plan = backend.plan_conv(g);
      backend.conv_forward(*plan, b->x.tensor(), b->w.tensor(), b->y.tensor(), nullptr);
      backend.conv_backward_data(*plan, b->dy.tensor(), b->w.tensor(), b->dx.tensor(), Accumulate::overwrite,
                                 nullptr);
      backend.conv_backward_filter(*plan, b->x.tensor(), b->dy.tensor(), b->dw.tensor(),
                                   Accumulate::overwrite, nullptr);
    }
    // Same loops over logical indices, so the same sums in the same order: equal to the last bit.
    EXPECT_EQ(testing::logical_relative_error(h.y.tensor(), c.y.tensor()), 0);
    EXPECT_EQ(testing::logical_relative_error(h.dx.tensor(), c.dx.tensor()), 0);
    EXPECT_EQ(testing::logical_relative_error(h.dw.tensor(), c.dw.tensor()), 0);
  }
}

// f32 runs the same loops as f64: on f32-representable data both agree to f32 rounding.
TEST(Conv, F32MatchesF64) {
  ReferenceBackend backend;
  for (Layout layout : {Layout::nchw, Layout::nhwc}) {
    const ConvGeometry g32 = geometry_of(kCases[2], DType::f32, layout);
    const ConvGeometry g64 = geometry_of(kCases[2], DType::f64, layout);
    ConvBuffers s(g32, 3), d(g64, 0);
    d.x = converted(s.x.tensor(), DType::f64, layout);
    d.w = converted(s.w.tensor(), DType::f64, layout);
    d.dy = converted(s.dy.tensor(), DType::f64, layout);
    for (auto* b : {&s, &d}) {
      auto plan = backend.plan_conv(b == &s ? g32 : g64);
      backend.conv_forward(*plan, b->x.tensor(), b->w.tensor(), b->y.tensor(), nullptr);
      backend.conv_backward_data(*plan, b->dy.tensor(), b->w.tensor(), b->dx.tensor(), Accumulate::overwrite,
                                 nullptr);
      backend.conv_backward_filter(*plan, b->x.tensor(), b->dy.tensor(), b->dw.tensor(),
                                   Accumulate::overwrite, nullptr);
    }
    EXPECT_LT(testing::logical_relative_error(s.y.tensor(), d.y.tensor()), testing::kF32VsF64Tolerance);
    EXPECT_LT(testing::logical_relative_error(s.dx.tensor(), d.dx.tensor()), testing::kF32VsF64Tolerance);
    EXPECT_LT(testing::logical_relative_error(s.dw.tensor(), d.dw.tensor()), testing::kF32VsF64Tolerance);
  }
}

TEST(Conv, ShapeMismatchThrowsWithShapes) {
  ReferenceBackend backend;
  const ConvGeometry g = geometry_of(kCases[1], DType::f32, Layout::nchw);
  auto plan = backend.plan_conv(g);
  ConvBuffers b(g, 1);
  HostBuffer wrong_y = zeros({2, 4, 5, 6}, DType::f32);
  try {
    backend.conv_forward(*plan, b.x.tensor(), b.w.tensor(), wrong_y.tensor(), nullptr);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "conv_forward: y is f32[2, 4, 5, 6] nchw cpu, expected f32[2, 4, 6, 6] nchw"),
              std::string::npos)
        << e.what();
  }
  HostBuffer nhwc_x = zeros(b.x.tensor().dims(), DType::f32, Layout::nhwc);
  EXPECT_THROW(backend.conv_forward(*plan, nhwc_x.tensor(), b.w.tensor(), b.y.tensor(), nullptr), Error);
  HostBuffer f64_w = zeros(b.w.tensor().dims(), DType::f64);
  EXPECT_THROW(backend.conv_forward(*plan, b.x.tensor(), f64_w.tensor(), b.y.tensor(), nullptr), Error);
  ConvGeometry bad = g;
  bad.kernel_h = 9;  // larger than the padded input (6 + 2)
  EXPECT_THROW(backend.plan_conv(bad), Error);
}

}  // namespace
}  // namespace dlbench
