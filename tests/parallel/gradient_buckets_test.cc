// The bucket plan of the gradient exchange, without ranks: sizes, the tail cut in halves, launch order.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "models/resnet.h"
#include "nn/memory_plan.h"
#include "parallel/gradient_exchange.h"

namespace dlbench::parallel {
namespace {

size_t bucket_bytes_of(const GradientBucket& b) { return static_cast<size_t>(b.count) * sizeof(float); }

// 32 layers of one 256 KiB parameter each (8 MiB, FP32), in buckets of 2 MiB: full buckets while two or
// more buckets' worth is left, then halves down to the 1 MiB floor.
TEST(GradientBuckets, TheTailIsCutInHalves) {
  auto backend = make_reference_backend();
  MemoryPlan memory(*backend, DType::f32, DType::f32);
  constexpr int kLayers = 32;
  constexpr int64_t kElements = int64_t{1} << 16;
  std::vector<Tensor> values, grads;
  values.reserve(kLayers);
  grads.reserve(kLayers);
  for (int layer = 0; layer < kLayers; ++layer) {
    values.emplace_back(nullptr, std::vector<int64_t>{kElements}, DType::f32, Layout::nchw,
                        backend->device());
    grads.emplace_back(nullptr, std::vector<int64_t>{kElements}, DType::f32, Layout::nchw, backend->device());
    memory.set_current_layer(layer);
    memory.add_parameter("w" + std::to_string(layer), values.back(), grads.back(), ParamInit::zeros, 1, false,
                         ParamUse::compute);
  }
  memory.place();
  const auto buckets = plan_gradient_buckets(memory, size_t{2} << 20, /*reduce_in_compute_dtype=*/false);
  std::vector<size_t> mib;
  for (const GradientBucket& b : buckets) mib.push_back(bucket_bytes_of(b) >> 20);
  EXPECT_EQ(mib, (std::vector<size_t>{2, 2, 2, 1, 1}));
  // The bucket launched last holds the first layers and is no larger than the floor.
  EXPECT_EQ(buckets.back().ready_after_layer, 0);
  EXPECT_LE(bucket_bytes_of(buckets.back()), kTailBucketBytes);
  // Without a size: one bucket. At a size larger than everything, the whole region is the tail: halves.
  EXPECT_EQ(plan_gradient_buckets(memory, 0, false).size(), 1u);
  mib.clear();
  for (const GradientBucket& b : plan_gradient_buckets(memory, size_t{1} << 30, false))
    mib.push_back(bucket_bytes_of(b) >> 20);
  EXPECT_EQ(mib, (std::vector<size_t>{4, 2, 1, 1}));
}

// ResNet-50 at the default 25 MiB: what is left to send once the first convolution's backward has run (the
// bucket launched last in the compute region) is at most the floor, where cutting only at 25 MiB would
// leave about 20 MB there; and the halving adds only a few buckets.
TEST(GradientBuckets, Resnet50LeavesLittleForTheEndOfBackward) {
  auto backend = make_reference_backend();
  NetworkOptions options;
  options.batch = 1;
  options.dtype = DType::f16;
  ModelOptions model_options;
  model_options.input = {3, 224, 224};
  model_options.num_classes = 1000;
  Model model = build_model("resnet50", *backend, options, model_options);
  model.net->plan_memory_only();
  const MemoryPlan& memory = model.net->memory();
  for (bool in_compute_dtype : {false, true}) {
    SCOPED_TRACE(in_compute_dtype ? "sums in fp16" : "sums in fp32");
    const size_t element = in_compute_dtype ? 2 : 4;
    const auto buckets = plan_gradient_buckets(memory, size_t{25} << 20, in_compute_dtype);
    EXPECT_LE(buckets.size(), 12u);
    const GradientBucket* last_compute = nullptr;
    for (const GradientBucket& b : buckets)
      if (b.compute_region) last_compute = &b;
    ASSERT_NE(last_compute, nullptr);
    EXPECT_EQ(last_compute->offset, 0);
    EXPECT_LE(static_cast<size_t>(last_compute->count) * element, kTailBucketBytes);
  }
}

}  // namespace
}  // namespace dlbench::parallel
