// The algorithm digest of a network (bench/layer_profile.h): a fingerprint of the plans its backend chose,
// the same for the same choices, different for different ones, empty where the backend says nothing.
#include <gtest/gtest.h>

#include <string>

#include "backend/backend.h"
#include "backend/backend_factory.h"
#include "bench/layer_profile.h"
#include "models/resnet.h"

namespace dlbench {
namespace {

std::string digest_of(const std::string& model_name, Backend& backend, int64_t batch) {
  NetworkOptions options;
  options.batch = batch;
  ModelOptions model_options;
  model_options.input = default_input_shape(model_name);
  model_options.num_classes = default_num_classes(model_name);
  Model model = build_model(model_name, backend, options, model_options);
  model.net->finalize(1);
  return algorithm_digest(*model.net);
}

TEST(AlgorithmDigest, SamePlansSameDigestOtherPlansAnother) {
  auto backend = make_backend("onednn", Device{}, 1);
  const std::string a = digest_of("resnet20", *backend, 2);
  ASSERT_EQ(a.size(), 16u) << a;
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_EQ(digest_of("resnet20", *backend, 2), a);  // built again: the same choices
  EXPECT_NE(digest_of("resnet18", *backend, 2), a);  // other layers, other plans
}

TEST(AlgorithmDigest, PlansLoseTheirTimesNotTheirChoices) {
  // The CUDA backend's descriptions: a legacy direction, one on a graph engine (its time and the legacy
  // algorithm's), a plan from the cache.
  const std::string legacy =
      "fwd: IMPLICIT_PRECOMP_GEMM (tensor op, 1024 B, 0.157 ms) | bwd_data: ALGO_1 "
      "(tensor op, 0 B, 0.231 ms) [cached search]";
  EXPECT_EQ(plan_without_timings(legacy),
            "fwd: IMPLICIT_PRECOMP_GEMM (tensor op, 1024 B) | bwd_data: ALGO_1 (tensor op, 0 B)");
  const std::string engine =
      "fwd: graph engine 58 (knobs 25=0) (tensor op, 0 B, 0.039 ms; legacy "
      "IMPLICIT_PRECOMP_GEMM 0.041 ms) | bwd_filter: ALGO_1 (tensor op, 12 B, 0.204 ms)";
  EXPECT_EQ(plan_without_timings(engine),
            "fwd: graph engine 58 (knobs 25=0) (tensor op, 0 B, legacy IMPLICIT_PRECOMP_GEMM) | bwd_filter: "
            "ALGO_1 (tensor op, 12 B)");
  // Another engine or another knob is another choice.
  EXPECT_NE(
      plan_without_timings(engine),
      plan_without_timings("fwd: graph engine 58 (knobs 25=1) (tensor op, 0 B, 0.039 ms; legacy "
                           "IMPLICIT_PRECOMP_GEMM 0.041 ms) | bwd_filter: ALGO_1 (tensor op, 12 B, 0.2 ms)"));
}

TEST(AlgorithmDigest, EmptyWhereTheBackendDescribesNoPlan) {
  auto backend = make_reference_backend();
  EXPECT_EQ(digest_of("resnet20", *backend, 2), "");
}

}  // namespace
}  // namespace dlbench
