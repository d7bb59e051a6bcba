// CUDA convolutions (cuDNN) against the reference backend: forward, backward data and backward filter,
// overwriting and accumulating (also on plans made for an accumulating input gradient), in f32 (TF32 off
// and on), f16, bf16 and f64, NCHW and NHWC, on odd sizes, strides 2, 1x1 and 7x7 kernels. Also: the
// per-shape algorithm search is cached, and the paths CudaOptions force (2x2-block input, cuDNN's graph-API
// engines, cuBLAS's GEMM, the output's statistics) give the same results.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <regex>
#include <tuple>

#include "backend/cuda/cuda_backend.h"
#include "backend/tuning/algorithm_cache.h"
#include "cuda_test_util.h"
#include "temp_dir.h"

namespace dlbench {
namespace {

using namespace cuda_testing;

class CudaConvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU: cuda_device_count() == 0";
  }
  std::unique_ptr<Backend> ref = make_reference_backend();
};

struct ConvCase {
  int64_t n, c, h, w, k, r, s, stride_h, stride_w, pad_h, pad_w;
};

const ConvCase kConvCases[] = {
    {2, 3, 9, 11, 5, 3, 3, 1, 1, 1, 1},     // odd sizes, first-layer-like C
    {2, 12, 9, 9, 20, 3, 3, 2, 2, 1, 1},    // stride 2, channels not a multiple of 8
    {3, 16, 10, 10, 24, 1, 1, 1, 1, 0, 0},  // 1x1
    {2, 16, 11, 11, 32, 1, 1, 2, 2, 0, 0},  // 1x1 stride 2 on odd size (projection shortcut)
    {2, 8, 13, 7, 8, 1, 3, 1, 2, 0, 1},     // non-square kernel and strides
    {1, 3, 17, 17, 8, 7, 7, 2, 2, 3, 3},    // stem-like 7x7 stride 2
    {4, 32, 7, 7, 16, 3, 3, 1, 1, 1, 1},    // small spatial, more channels
    {2, 64, 14, 14, 64, 3, 3, 1, 1, 1, 1},  // a ResNet shape (tensor-core friendly channels)
};

struct Precision {
  DType dtype;
  bool tf32;
};

class ConvTest : public CudaConvTest,
                 public ::testing::WithParamInterface<std::tuple<ConvCase, Layout, Precision>> {};

ConvGeometry geometry_of(const ConvCase& cc, Layout layout, DType dtype) {
  ConvGeometry g;
  g.batch = cc.n, g.in_channels = cc.c, g.in_h = cc.h, g.in_w = cc.w, g.out_channels = cc.k;
  g.kernel_h = cc.r, g.kernel_w = cc.s, g.stride_h = cc.stride_h, g.stride_w = cc.stride_w;
  g.pad_h = cc.pad_h, g.pad_w = cc.pad_w, g.layout = layout, g.dtype = dtype;
  return g;
}

// How many times `what` occurs in `text`.
int occurrences(const std::string& text, const std::string& what) {
  int count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

void run_conv_case(Backend& ref, const ConvCase& cc, Layout layout, DType dtype, bool tf32,
                   const CudaOptions& options = {}) {
  Backend* gpu = &shared_gpu(with_tf32(options, tf32));
  const ConvGeometry g = geometry_of(cc, layout, dtype);
  const DType wide = reference_dtype(dtype);
  const std::vector<int64_t> xd{cc.n, cc.c, cc.h, cc.w}, wd{cc.k, cc.c, cc.r, cc.s},
      yd{cc.n, cc.k, g.out_h(), g.out_w()};
  HostBuffer x = random_host(ref, xd, dtype, 1, layout), w = random_host(ref, wd, dtype, 2, layout),
             dy = random_host(ref, yd, dtype, 3, layout);
  HostBuffer x_ref = converted(ref, x, wide), w_ref = converted(ref, w, wide),
             dy_ref = converted(ref, dy, wide);

  auto plan = gpu->plan_conv(g);
  std::printf("  [plan] %s\n", describe_cuda_conv_plan(*plan).c_str());
  auto ws_buffer = workspace(*gpu, plan->workspace_bytes());
  DeviceTensor& ws = *ws_buffer;
  ConvGeometry g_ref = g;
  g_ref.dtype = wide;
  auto ref_plan = ref.plan_conv(g_ref);
  const double tol = tolerance(dtype, tf32, dtype == DType::f32 && !tf32 ? 2.0 : 1.0);
  // Accumulating rounds twice in the data's dtype (the convolution's result, then its sum with the old
  // gradient); in bf16 that alone can reach 2 ulps of the largest value (2^-6 relative) in the worst element.
  const double acc_tol = dtype == DType::bf16 ? tol * 1.5 : tol;

  DeviceTensor xg(*gpu, x), wg(*gpu, w), dyg(*gpu, dy), yg(*gpu, yd, dtype, layout);
  HostBuffer y_ref(yd, wide, layout);
  gpu->conv_forward(*plan, xg.tensor(), wg.tensor(), yg.tensor(), ws.tensor().data());
  ref.conv_forward(*ref_plan, x_ref.tensor(), w_ref.tensor(), y_ref.tensor(), nullptr);
  expect_close("forward", download_wide(ref, yg).tensor(), y_ref.tensor(), tol);

  for (Accumulate acc : {Accumulate::overwrite, Accumulate::add}) {
    SCOPED_TRACE(acc == Accumulate::add ? "accumulate" : "overwrite");
    HostBuffer dx0 = random_host(ref, xd, dtype, 4, layout), dw0 = random_host(ref, wd, dtype, 5, layout);
    HostBuffer dx_ref = converted(ref, dx0, wide), dw_ref = converted(ref, dw0, wide);
    DeviceTensor dxg(*gpu, dx0), dwg(*gpu, dw0);
    gpu->conv_backward_data(*plan, dyg.tensor(), wg.tensor(), dxg.tensor(), acc, ws.tensor().data());
    ref.conv_backward_data(*ref_plan, dy_ref.tensor(), w_ref.tensor(), dx_ref.tensor(), acc, nullptr);
    expect_close(acc == Accumulate::add ? "backward data (+=)" : "backward data",
                 download_wide(ref, dxg).tensor(), dx_ref.tensor(), acc == Accumulate::add ? acc_tol : tol);
    gpu->conv_backward_filter(*plan, xg.tensor(), dyg.tensor(), dwg.tensor(), acc, ws.tensor().data());
    ref.conv_backward_filter(*ref_plan, x_ref.tensor(), dy_ref.tensor(), dw_ref.tensor(), acc, nullptr);
    expect_close(acc == Accumulate::add ? "backward filter (+=)" : "backward filter",
                 download_wide(ref, dwg).tensor(), dw_ref.tensor(), acc == Accumulate::add ? acc_tol : tol);
  }

  // A plan made for an input gradient that accumulates (a residual block's first convolution): its
  // backward data adds in the engine where one was chosen; called the other way it takes the legacy
  // algorithm. Both match the reference.
  ConvGeometry g_add = g;
  g_add.accumulates_input_grad = true;
  auto plan_add = gpu->plan_conv(g_add);
  std::printf("  [plan, dx accumulates] %s\n", describe_cuda_conv_plan(*plan_add).c_str());
  auto ws_add_buffer = workspace(*gpu, plan_add->workspace_bytes());
  for (Accumulate acc : {Accumulate::add, Accumulate::overwrite}) {
    SCOPED_TRACE(acc == Accumulate::add ? "planned to accumulate, accumulating"
                                        : "planned to accumulate, overwriting");
    HostBuffer dx0 = random_host(ref, xd, dtype, 6, layout);
    HostBuffer dx_ref = converted(ref, dx0, wide);
    DeviceTensor dxg(*gpu, dx0);
    gpu->conv_backward_data(*plan_add, dyg.tensor(), wg.tensor(), dxg.tensor(), acc,
                            ws_add_buffer->tensor().data());
    ref.conv_backward_data(*ref_plan, dy_ref.tensor(), w_ref.tensor(), dx_ref.tensor(), acc, nullptr);
    expect_close(acc == Accumulate::add ? "backward data (+=)" : "backward data",
                 download_wide(ref, dxg).tensor(), dx_ref.tensor(), acc == Accumulate::add ? acc_tol : tol);
  }
}

TEST_P(ConvTest, MatchesReference) {
  const auto [cc, layout, precision] = GetParam();
  run_conv_case(*ref, cc, layout, precision.dtype, precision.tf32);
}

std::string precision_name(const Precision& p) {
  return p.tf32 ? std::string("tf32") : std::string(dtype_name(p.dtype));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvTest,
    ::testing::Combine(::testing::ValuesIn(kConvCases), ::testing::Values(Layout::nchw, Layout::nhwc),
                       ::testing::Values(Precision{DType::f32, false}, Precision{DType::f32, true},
                                         Precision{DType::f16, false}, Precision{DType::bf16, false})),
    [](const auto& info) {
      return fmt::format("case{}_{}_{}", info.index / 8, layout_name(std::get<1>(info.param)),
                         precision_name(std::get<2>(info.param)));
    });

TEST_F(CudaConvTest, Float64) {
  run_conv_case(*ref, kConvCases[1], Layout::nchw, DType::f64, false);
  run_conv_case(*ref, kConvCases[0], Layout::nchw, DType::f64, false);
  // cuDNN has no FP64 NHWC backward-data algorithm: the plan says so up front.
  ConvGeometry g;
  g.batch = 1, g.in_channels = 4, g.in_h = g.in_w = 5, g.out_channels = 4, g.kernel_h = g.kernel_w = 3;
  g.layout = Layout::nhwc, g.dtype = DType::f64;
  EXPECT_THROW(shared_gpu().plan_conv(g), Error);
}

// ResNet-sized layers, where cuDNN picks its tensor-core and multi-block algorithms.
TEST_F(CudaConvTest, LargerShapes) {
  const ConvCase cases[] = {
      {4, 64, 28, 28, 64, 3, 3, 1, 1, 1, 1},    // a ResNet-50 stage-2-like 3x3
      {8, 128, 14, 14, 256, 1, 1, 2, 2, 0, 0},  // a projection shortcut
      {4, 3, 56, 56, 64, 7, 7, 2, 2, 3, 3},     // the stem
  };
  for (const ConvCase& cc : cases) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      SCOPED_TRACE(fmt::format("{}x{}x{}x{} -> {} {}x{} {}", cc.n, cc.c, cc.h, cc.w, cc.k, cc.r, cc.s,
                               dtype_name(dtype)));
      std::printf("  %s\n", fmt::format("{}x{}x{}x{} -> {} {}x{} {}", cc.n, cc.c, cc.h, cc.w, cc.k, cc.r,
                                        cc.s, dtype_name(dtype))
                                .c_str());
      run_conv_case(*ref, cc, Layout::nhwc, dtype, false);
    }
  }
  run_conv_case(*ref, cases[0], Layout::nhwc, DType::f32, true);
  run_conv_case(*ref, cases[1], Layout::nchw, DType::f16, false);
}

TEST_F(CudaConvTest, SearchIsCachedPerShape) {
  Backend* gpu = &shared_gpu(false);
  ConvGeometry g;
  g.batch = 3, g.in_channels = 24, g.in_h = g.in_w = 6, g.out_channels = 40, g.kernel_h = g.kernel_w = 3;
  g.pad_h = g.pad_w = 1, g.layout = Layout::nhwc, g.dtype = DType::f16;
  auto first = gpu->plan_conv(g);
  auto second = gpu->plan_conv(g);
  const std::string a = describe_cuda_conv_plan(*first), b = describe_cuda_conv_plan(*second);
  EXPECT_EQ(b.find("[cached search]") != std::string::npos, true) << b;
  EXPECT_EQ(first->workspace_bytes(), second->workspace_bytes());
  // Same algorithms (the part before the cache note).
  EXPECT_EQ(a.substr(0, a.find(" [")), b.substr(0, b.find(" [")));
  // Another math setting is another search.
  Backend* tf32 = &shared_gpu(true);
  ConvGeometry f = g;
  f.dtype = DType::f32;
  auto p32 = gpu->plan_conv(f);
  auto p32_tf32 = tf32->plan_conv(f);
  EXPECT_EQ(describe_cuda_conv_plan(*p32_tf32).find("[cached search]"), std::string::npos)
      << describe_cuda_conv_plan(*p32_tf32);
  EXPECT_EQ(describe_cuda_conv_plan(*p32).find("tensor op"), std::string::npos)
      << "fp32 without TF32 must not use tensor cores: " << describe_cuda_conv_plan(*p32);
}

// A choice saved in a cache file serves a backend given the file later, as a second process would: the
// same algorithms, no search, and the file names the machine.
TEST_F(CudaConvTest, ChoicesSurviveInTheCacheFile) {
  const dlbench::testing::TempDir dir;
  const std::string path = dir.file("algorithms.json");
  ConvGeometry g;
  g.batch = 2, g.in_channels = 32, g.in_h = g.in_w = 7, g.out_channels = 32, g.kernel_h = g.kernel_w = 3;
  g.pad_h = g.pad_w = 1, g.layout = Layout::nhwc, g.dtype = DType::f16;
  std::string searched;
  {
    auto cache = std::make_shared<tuning::AlgorithmCache>(path);
    auto gpu = make_cuda_backend(0, {}, cache);
    searched = describe_cuda_conv_plan(*gpu->plan_conv(g));
    EXPECT_EQ(searched.find("[cached search]"), std::string::npos) << searched;
    cache->save();
  }
  auto cache = std::make_shared<tuning::AlgorithmCache>(path);
  auto gpu = make_cuda_backend(0, {}, cache);
  EXPECT_GT(cache->read_from_file(), 0u) << cache->load_note();
  const std::string read = describe_cuda_conv_plan(*gpu->plan_conv(g));
  EXPECT_NE(read.find("[cached search]"), std::string::npos) << read;
  EXPECT_EQ(searched.substr(0, searched.find(" [")), read.substr(0, read.find(" [")));
}

TEST_F(CudaConvTest, GpusOfOneModelShareTheSearch) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "one GPU: nothing to share";
  // One algorithm cache, as a launch hands its backends.
  auto algorithms = std::make_shared<tuning::AlgorithmCache>();
  auto gpu0 = make_backend("cuda", Device{DeviceKind::cuda, 0}, 0, {}, algorithms);
  auto gpu1 = make_backend("cuda", Device{DeviceKind::cuda, 1}, 0, {}, algorithms);
  if (gpu0->device_memory()->name != gpu1->device_memory()->name) GTEST_SKIP() << "GPUs of two models";
  ConvGeometry g;
  g.batch = 5, g.in_channels = 16, g.in_h = g.in_w = 7, g.out_channels = 24, g.kernel_h = g.kernel_w = 3;
  g.pad_h = g.pad_w = 1, g.layout = Layout::nhwc, g.dtype = DType::f16;
  auto on0 = gpu0->plan_conv(g);
  auto on1 = gpu1->plan_conv(g);  // the search made for GPU 0
  const std::string a = describe_cuda_conv_plan(*on0), b = describe_cuda_conv_plan(*on1);
  EXPECT_NE(b.find("[cached search]"), std::string::npos) << b;
  EXPECT_EQ(a.substr(0, a.find(" [")), b.substr(0, b.find(" [")));
}

// --conv-space-to-depth force: NHWC convolutions of stride 2 whose input channels do not fill a
// tensor-core vector run as stride-1 convolutions over 2x2 blocks of their input (odd and even padding,
// 3x3 to 7x7 kernels, odd sizes), and still match the reference in every direction, overwriting and
// accumulating, in every precision. "off" converts nothing.
TEST_F(CudaConvTest, BlockInputMatchesTheReference) {
  CudaOptions force;
  force.conv_space_to_depth = KernelChoice::force;
  const ConvCase stem = kConvCases[5], odd_pad{2, 3, 12, 10, 16, 3, 3, 2, 2, 1, 1},
                 even_pad{2, 3, 11, 9, 8, 5, 5, 2, 2, 2, 2};
  for (const ConvCase& cc : {stem, odd_pad, even_pad}) {
    for (Precision precision : {Precision{DType::f16, false}, Precision{DType::bf16, false},
                                Precision{DType::f32, true}, Precision{DType::f32, false}}) {
      SCOPED_TRACE(fmt::format("{}x{}x{} kernel {} pad {}, {}", cc.c, cc.h, cc.w, cc.r, cc.pad_h,
                               precision_name(precision)));
      run_conv_case(*ref, cc, Layout::nhwc, precision.dtype, precision.tf32, force);
      const ConvGeometry g = geometry_of(cc, Layout::nhwc, precision.dtype);
      const std::string plan =
          describe_cuda_conv_plan(*shared_gpu(with_tf32(force, precision.tf32)).plan_conv(g));
      EXPECT_NE(plan.find(fmt::format("input as 2x2 blocks {}x{}x{} -> ", cc.c, cc.h, cc.w)),
                std::string::npos)
          << plan;
    }
  }
  // Stride 1, or channels that fill a vector: no blocks.
  EXPECT_EQ(describe_cuda_conv_plan(
                *shared_gpu(force).plan_conv(geometry_of(kConvCases[0], Layout::nhwc, DType::f16)))
                .find("blocks"),
            std::string::npos);
  EXPECT_EQ(describe_cuda_conv_plan(
                *shared_gpu(force).plan_conv(geometry_of(kConvCases[1], Layout::nhwc, DType::f16)))
                .find("blocks"),
            std::string::npos);
  CudaOptions off;
  off.conv_space_to_depth = KernelChoice::off;
  EXPECT_EQ(describe_cuda_conv_plan(*shared_gpu(off).plan_conv(geometry_of(stem, Layout::nhwc, DType::f16)))
                .find("blocks"),
            std::string::npos);
}

// --conv-graph force: every direction cuDNN's graph API has an engine for runs on the fastest one,
// whatever the legacy algorithm's time, and still matches the reference in every direction, also the
// backward data of plans made for an accumulating input gradient (graphs with beta 1). "off" keeps the
// legacy API.
TEST_F(CudaConvTest, GraphEnginesMatchTheReference) {
  CudaOptions force;
  force.conv_graph = KernelChoice::force;
  int graph_directions = 0, adding_graph_directions = 0;
  for (const ConvCase& cc : kConvCases) {
    for (Precision precision : {Precision{DType::f16, false}, Precision{DType::bf16, false},
                                Precision{DType::f32, true}, Precision{DType::f32, false}}) {
      for (Layout layout : {Layout::nhwc, Layout::nchw}) {
        SCOPED_TRACE(fmt::format("{}x{}x{}x{} -> {} {}x{}, {} {}", cc.n, cc.c, cc.h, cc.w, cc.k, cc.r, cc.s,
                                 precision_name(precision), layout_name(layout)));
        run_conv_case(*ref, cc, layout, precision.dtype, precision.tf32, force);
        const ConvGeometry g = geometry_of(cc, layout, precision.dtype);
        Backend& gpu = shared_gpu(with_tf32(force, precision.tf32));
        const std::string plan = describe_cuda_conv_plan(*gpu.plan_conv(g));
        graph_directions += occurrences(plan, "graph engine");
        if (precision.dtype == DType::f32 && !precision.tf32) {
          EXPECT_EQ(plan.find("tensor op"), std::string::npos)
              << "FP32 without TF32 on tensor cores: " << plan;
        }
        ConvGeometry g_add = g;
        g_add.accumulates_input_grad = true;
        const std::string plan_add = describe_cuda_conv_plan(*gpu.plan_conv(g_add));
        const size_t data = plan_add.find("bwd_data (adds to dx): "), filter = plan_add.find("| bwd_filter");
        ASSERT_NE(data, std::string::npos) << plan_add;
        if (plan_add.substr(data, filter - data).find("graph engine") != std::string::npos) {
          ++adding_graph_directions;
        }
      }
    }
  }
  // 8 shapes x 4 precisions x 2 layouts x 3 directions: most have engines (a test that would pass with
  // the graph path never taken is no test of it).
  EXPECT_GE(graph_directions, 96) << "graph engines ran in only " << graph_directions << " directions";
  // 64 backward-data directions planned to accumulate: engines that add in their epilogue.
  std::printf("  graph engines adding to dx: %d of 64 directions\n", adding_graph_directions);
  EXPECT_GE(adding_graph_directions, 16)
      << "engines added to dx in only " << adding_graph_directions << " directions";
  ConvGeometry g;
  g.batch = 2, g.in_channels = 16, g.in_h = g.in_w = 8, g.out_channels = 16, g.kernel_h = g.kernel_w = 1;
  g.layout = Layout::nhwc, g.dtype = DType::f16;
  CudaOptions off;
  off.conv_graph = KernelChoice::off;
  EXPECT_EQ(describe_cuda_conv_plan(*shared_gpu(off).plan_conv(g)).find("graph"), std::string::npos);
}

// A convolution planned with output_statistics (--conv-statistics force: the fastest engine whatever
// it costs) writes y as the reference computes it and, per output channel, the sum and the sum of squares
// of y, written or before its rounding to the dtype: overwritten, not added to (the sums start as NaN, and
// a second call gives the same).
// In FP16, BF16 and TF32, NHWC, on ResNet-like shapes (1x1, 3x3 strided); most must have an engine (a test
// that would pass with none is no test). "off" plans none; a plan without the request has none either.
TEST_F(CudaConvTest, OutputStatisticsMatchTheOutput) {
  CudaOptions force;
  force.conv_statistics = KernelChoice::force;
  const ConvCase cases[] = {{8, 64, 14, 14, 256, 1, 1, 1, 1, 0, 0},
                            {4, 32, 9, 9, 64, 3, 3, 2, 2, 1, 1},
                            {2, 128, 7, 7, 32, 3, 3, 1, 1, 1, 1}};
  int with_engine = 0, tried = 0;
  for (const ConvCase& cc : cases) {
    for (Precision precision :
         {Precision{DType::f16, false}, Precision{DType::bf16, false}, Precision{DType::f32, true}}) {
      SCOPED_TRACE(fmt::format("{}x{}x{}x{} -> {} {}x{}, {}", cc.n, cc.c, cc.h, cc.w, cc.k, cc.r, cc.s,
                               precision_name(precision)));
      Backend& gpu = shared_gpu(with_tf32(force, precision.tf32));
      ConvGeometry g = geometry_of(cc, Layout::nhwc, precision.dtype);
      g.output_statistics = true;
      auto plan = gpu.plan_conv(g);
      std::printf("  [plan] %s\n", describe_cuda_conv_plan(*plan).c_str());
      ++tried;
      if (!plan->emits_statistics()) continue;
      ++with_engine;
      const DType wide = reference_dtype(g.dtype);
      const std::vector<int64_t> xd{cc.n, cc.c, cc.h, cc.w}, wd{cc.k, cc.c, cc.r, cc.s},
          yd{cc.n, cc.k, g.out_h(), g.out_w()};
      HostBuffer x = random_host(*ref, xd, g.dtype, 1, g.layout),
                 w = random_host(*ref, wd, g.dtype, 2, g.layout);
      ConvGeometry g_ref = g;
      g_ref.dtype = wide;
      HostBuffer y_ref(yd, wide, g.layout);
      ref->conv_forward(*ref->plan_conv(g_ref), converted(*ref, x, wide).tensor(),
                        converted(*ref, w, wide).tensor(), y_ref.tensor(), nullptr);
      auto ws = workspace(gpu, plan->workspace_bytes());
      DeviceTensor xg(gpu, x), wg(gpu, w), yg(gpu, yd, g.dtype, g.layout), sums(gpu, {2, cc.k}, DType::f32);
      gpu.fill(sums.tensor(), std::nan(""));
      for (int call = 0; call < 2; ++call) {
        SCOPED_TRACE(call == 0 ? "first call" : "second call");
        gpu.conv_forward_with_statistics(*plan, xg.tensor(), wg.tensor(), yg.tensor(), sums.tensor(),
                                         ws->tensor().data());
        const HostBuffer y = download_wide(*ref, yg);
        expect_close("forward", y.tensor(), y_ref.tensor(), tolerance(g.dtype, precision.tf32));
        // The sums in double of the y the GPU wrote, and of the exact y (the reference's): an engine may sum
        // its output before rounding it to the dtype (in FP16 that differs from the written y's sums by
        // ~5e-5 of the largest), and must match one of the two closely.
        const HostBuffer gpu_sums = converted(*ref, sums.download(), DType::f64);
        double best = INFINITY;
        for (const HostBuffer* of : {&y, static_cast<const HostBuffer*>(&y_ref)})
          best = std::min(best, relative_error(gpu_sums.tensor(), channel_sums(*ref, *of).tensor()));
        std::printf("    sums and sums of squares: rel err %.3g against the nearer of the two\n", best);
        EXPECT_LE(best, 1e-5) << "sums and sums of squares";
      }
    }
  }
  std::printf("  output statistics engines: %d of %d plans\n", with_engine, tried);
  EXPECT_GE(with_engine, tried / 2) << "statistics engines in only " << with_engine << " of " << tried;
  ConvGeometry g = geometry_of(cases[0], Layout::nhwc, DType::f16);
  EXPECT_FALSE(shared_gpu(force).plan_conv(g)->emits_statistics());  // not asked
  g.output_statistics = true;
  CudaOptions off;
  off.conv_statistics = KernelChoice::off;
  EXPECT_FALSE(shared_gpu(off).plan_conv(g)->emits_statistics());
}

// ResNet-50's own shapes at batch 256 in FP16, with the engines the default search takes (auto; they are
// not the ones the small shapes above get): y as the plain forward writes it, and sums that stay those of
// y call after call (three calls: an engine that added to its sums instead of writing them would double
// them). Against the sums of the written y, to 1e-3 of the largest: an engine summing its accumulator
// before the rounding to FP16 differs by less. Whether repeated calls give the same sums bit for bit is
// printed (an engine may reduce in no fixed order).
TEST_F(CudaConvTest, OutputStatisticsAtResNetSizes) {
  Backend& gpu = shared_gpu(false);  // --conv-statistics auto, the default
  int with_engine = 0;
  for (const ConvCase& cc : {ConvCase{256, 64, 56, 56, 256, 1, 1, 1, 1, 0, 0},
                             ConvCase{256, 256, 14, 14, 256, 3, 3, 1, 1, 1, 1}}) {
    SCOPED_TRACE(fmt::format("{}x{}x{}x{} -> {} {}x{}", cc.n, cc.c, cc.h, cc.w, cc.k, cc.r, cc.s));
    ConvGeometry g = geometry_of(cc, Layout::nhwc, DType::f16);
    g.output_statistics = true;
    auto plan = gpu.plan_conv(g);
    std::printf("  [plan] %s\n", describe_cuda_conv_plan(*plan).c_str());
    if (!plan->emits_statistics()) continue;
    ++with_engine;
    const std::vector<int64_t> xd{cc.n, cc.c, cc.h, cc.w}, wd{cc.k, cc.c, cc.r, cc.s},
        yd{cc.n, cc.k, g.out_h(), g.out_w()};
    auto ws = workspace(gpu, plan->workspace_bytes());
    DeviceTensor xg(gpu, random_host(*ref, xd, g.dtype, 1, g.layout)),
        wg(gpu, random_host(*ref, wd, g.dtype, 2, g.layout, -0.1, 0.1)), y_plain(gpu, yd, g.dtype, g.layout),
        yg(gpu, yd, g.dtype, g.layout), sums(gpu, {2, cc.k}, DType::f32);
    gpu.conv_forward(*plan, xg.tensor(), wg.tensor(), y_plain.tensor(), ws->tensor().data());
    gpu.fill(sums.tensor(), std::nan(""));
    std::vector<float> first;
    bool repeatable = true;
    for (int call = 0; call < 3; ++call) {
      SCOPED_TRACE(fmt::format("call {}", call + 1));
      gpu.conv_forward_with_statistics(*plan, xg.tensor(), wg.tensor(), yg.tensor(), sums.tensor(),
                                       ws->tensor().data());
      const HostBuffer got = sums.download();
      const float* s = got.tensor().ptr<float>();
      if (call == 0) first.assign(s, s + 2 * cc.k);
      repeatable = repeatable && std::equal(first.begin(), first.end(), s);
    }
    const HostBuffer y = download_wide(*ref, yg);
    expect_close("forward against the plain forward", y.tensor(), download_wide(*ref, y_plain).tensor(),
                 tolerance(g.dtype));
    expect_close("sums after three calls", converted(*ref, sums.download(), DType::f64).tensor(),
                 channel_sums(*ref, y).tensor(), 1e-3);
    std::printf("  sums of repeated calls %s\n", repeatable ? "identical" : "differ in their last bits");
  }
  EXPECT_EQ(with_engine, 2) << "the default search took no statistics engine for a ResNet-50 shape";
}

// --conv-gemm force: a 1x1 convolution without padding in NHWC (stride 1, or 2 on odd sizes: its
// pixels gathered and its input gradient scattered) runs all three directions on cuBLAS's GEMM and matches
// the reference, overwriting and accumulating, also planned for an accumulating input gradient; other
// shapes and NCHW stay on cuDNN.
TEST_F(CudaConvTest, GemmMatchesTheReference) {
  CudaOptions force;
  force.conv_gemm = KernelChoice::force;
  const ConvCase one_by_one{3, 16, 10, 10, 24, 1, 1, 1, 1, 0, 0},
      odd_sizes{2, 24, 7, 9, 40, 1, 1, 1, 1, 0, 0};
  for (const ConvCase& cc : {one_by_one, odd_sizes, kConvCases[3]}) {
    for (Precision precision : {Precision{DType::f32, false}, Precision{DType::f32, true},
                                Precision{DType::f16, false}, Precision{DType::bf16, false}}) {
      SCOPED_TRACE(
          fmt::format("{}x{}x{}x{} -> {}, {}", cc.n, cc.c, cc.h, cc.w, cc.k, precision_name(precision)));
      run_conv_case(*ref, cc, Layout::nhwc, precision.dtype, precision.tf32, force);
      ConvGeometry g = geometry_of(cc, Layout::nhwc, precision.dtype);
      Backend& gpu = shared_gpu(with_tf32(force, precision.tf32));
      const std::string plan = describe_cuda_conv_plan(*gpu.plan_conv(g));
      EXPECT_EQ(occurrences(plan, "cuBLAS GEMM"), 3) << plan;
      EXPECT_EQ(plan.find("tensor op") != std::string::npos, precision.dtype != DType::f32) << plan;
      // The legacy algorithms of a GEMM shape are ranked by their own back-to-back times: each direction
      // states a positive one.
      const std::regex legacy_time("legacy [A-Z_0-9]+ ([0-9.]+) ms");
      int timed = 0;
      for (auto it = std::sregex_iterator(plan.begin(), plan.end(), legacy_time);
           it != std::sregex_iterator(); ++it, ++timed)
        EXPECT_GT(std::stod((*it)[1].str()), 0.0) << plan;
      EXPECT_EQ(timed, 3) << plan;
      g.accumulates_input_grad = true;
      EXPECT_EQ(occurrences(describe_cuda_conv_plan(*gpu.plan_conv(g)), "cuBLAS GEMM"), 3);
    }
  }
  // A 3x3 convolution and NCHW are no matrix products of the pixels.
  EXPECT_EQ(describe_cuda_conv_plan(
                *shared_gpu(force).plan_conv(geometry_of(kConvCases[7], Layout::nhwc, DType::f16)))
                .find("cuBLAS"),
            std::string::npos);
  EXPECT_EQ(
      describe_cuda_conv_plan(*shared_gpu(force).plan_conv(geometry_of(one_by_one, Layout::nchw, DType::f32)))
          .find("cuBLAS"),
      std::string::npos);
}

TEST_F(CudaConvTest, RejectsMismatchedTensors) {
  Backend* gpu = &shared_gpu(false);
  ConvGeometry g;
  g.batch = 1, g.in_channels = 4, g.in_h = g.in_w = 5, g.out_channels = 4, g.kernel_h = g.kernel_w = 3;
  g.layout = Layout::nhwc;
  auto plan = gpu->plan_conv(g);
  DeviceTensor x(*gpu, {1, 4, 5, 5}, DType::f32, Layout::nchw),
      w(*gpu, {4, 4, 3, 3}, DType::f32, Layout::nhwc), y(*gpu, {1, 4, 3, 3}, DType::f32, Layout::nhwc);
  auto ws_buffer = workspace(*gpu, plan->workspace_bytes());
  DeviceTensor& ws = *ws_buffer;
  EXPECT_THROW(gpu->conv_forward(*plan, x.tensor(), w.tensor(), y.tensor(), ws.tensor().data()), Error);
}

}  // namespace
}  // namespace dlbench
