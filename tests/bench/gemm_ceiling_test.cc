// The GEMM ceiling measurement (bench/gemm_ceiling.h) on the CPU backends: a rate from real calls, stated
// with its shape and dtype; on the GPU the GPT benchmarks run it (its figure is in their results).
#include "bench/gemm_ceiling.h"

#include <gtest/gtest.h>

#include <cmath>

#include "backend/backend_factory.h"

namespace dlbench {
namespace {

TEST(GemmCeiling, MeasuresARateOnEachCpuBackend) {
  for (const char* name : {"reference", "onednn"}) {
    auto backend = make_backend(name, Device{}, 1);
    std::string why_not;
    const std::optional<GemmCeiling> c = measure_gemm_ceiling(*backend, DType::f32, 64, 3, &why_not);
    ASSERT_TRUE(c) << name << ": " << why_not;
    EXPECT_EQ(c->n, 64);
    EXPECT_EQ(c->dtype, "f32");
    EXPECT_GT(c->call_ms, 0) << name;
    EXPECT_TRUE(std::isfinite(c->tflops) && c->tflops > 0) << name;
    EXPECT_NEAR(c->tflops, 2.0 * 64 * 64 * 64 / (c->call_ms * 1e-3) / 1e12, 1e-9 * c->tflops);
  }
}

}  // namespace
}  // namespace dlbench
