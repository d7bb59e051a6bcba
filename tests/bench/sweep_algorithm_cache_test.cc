// Which --algorithm-cache a sweep gives its dlbench points.
#include <gtest/gtest.h>

#include "bench/sweep.h"

namespace dlbench {
namespace {

TEST(SweepAlgorithmCache, AutoKeepsChoicesBesideTheResultsOnAGpu) {
  SweepOptions o;
  o.results = "out/points.jsonl";
  EXPECT_EQ(o.algorithm_cache, "auto");  // the default
  EXPECT_EQ(sweep_algorithm_cache(o, /*on_gpu=*/true), "out/points.jsonl.algorithms.json");
  EXPECT_EQ(sweep_algorithm_cache(o, /*on_gpu=*/false), "");  // the CPU has no choices to keep
}

TEST(SweepAlgorithmCache, NoneAndAFile) {
  SweepOptions o;
  o.results = "points.jsonl";
  o.algorithm_cache = "none";
  EXPECT_EQ(sweep_algorithm_cache(o, true), "");
  o.algorithm_cache = "/tmp/algorithms.json";
  EXPECT_EQ(sweep_algorithm_cache(o, true), "/tmp/algorithms.json");
  EXPECT_EQ(sweep_algorithm_cache(o, false), "/tmp/algorithms.json");  // asked for: given as it is
}

}  // namespace
}  // namespace dlbench
