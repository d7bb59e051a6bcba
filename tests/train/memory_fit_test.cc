// The largest batch that fits, on the CPU with a made-up device: a batch that fits passes, one over the
// limit is refused with one line naming the largest that fits, and that largest is exactly the last batch
// whose plan fits.
#include "train/memory_fit.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "core/status.h"

namespace dlbench {
namespace {

RunConfig config_for(const std::string& model, int64_t batch, Precision precision = Precision::fp32) {
  RunConfig config;
  config.model.name = model;
  config.batch_size = batch;
  config.model.precision = precision;
  config.model.layout = Layout::nhwc;
  return config;
}

ModelOptions options_for(const std::string& model) {
  ModelOptions options;
  options.input = default_input_shape(model);
  options.num_classes = default_num_classes(model);
  return options;
}

DeviceMemory device_with_free(size_t free_bytes) {
  DeviceMemory memory;
  memory.free_bytes = free_bytes;
  memory.total_bytes = free_bytes + (size_t{1} << 30);
  memory.description = "cuda:0 (test device)";
  return memory;
}

// AdamW keeps a second moment beside the momentum, 4 bytes a parameter more than SGD: the estimate counts it
// (it did not, and so under-counted GPT-2 runs by 4 bytes a parameter).
TEST(MemoryFit, AdamWPlansItsSecondMoment) {
  auto backend = make_reference_backend();
  ModelOptions options;
  options.seq_len = 32;
  RunConfig sgd = config_for("gpt-mini", 2), adamw = sgd;
  sgd.optimizer.kind = OptimizerKind::sgd;
  adamw.optimizer.kind = OptimizerKind::adamw;
  NetworkOptions net_options;
  net_options.batch = 2;
  Model model = build_model("gpt-mini", *backend, net_options, options);
  model.net->plan_memory_only();
  const auto parameters = static_cast<size_t>(model.net->memory().parameter_count());
  EXPECT_EQ(planned_run_bytes(adamw, *backend, options, 2) - planned_run_bytes(sgd, *backend, options, 2),
            parameters * sizeof(float));
}

TEST(MemoryFit, BatchThatFitsPassesAndOneMoreIsRefused) {
  auto backend = make_reference_backend();
  const ModelOptions options = options_for("resnet50");
  const size_t at_8 = planned_run_bytes(config_for("resnet50", 8), *backend, options, 8);
  const size_t at_9 = planned_run_bytes(config_for("resnet50", 9), *backend, options, 9);
  ASSERT_LT(at_8, at_9);
  const DeviceMemory device = device_with_free(at_8 + kDeviceMemoryMargin);

  MemoryFit fit = largest_batch_that_fits(config_for("resnet50", 8), *backend, options, device);
  EXPECT_TRUE(fit.fits());
  EXPECT_EQ(fit.planned_bytes, at_8);
  ASSERT_TRUE(fit.largest_batch.has_value());
  EXPECT_EQ(*fit.largest_batch, 8);
  EXPECT_NO_THROW(require_fit(fit));

  fit = largest_batch_that_fits(config_for("resnet50", 9), *backend, options, device);
  EXPECT_FALSE(fit.fits());
  EXPECT_EQ(fit.largest_batch.value_or(-1), 8);
  try {
    require_fit(fit);
    ADD_FAILURE() << "batch 9 was not refused";
  } catch (const UserError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--batch-size 9 needs "), std::string::npos) << message;
    EXPECT_NE(message.find("is free on cuda:0 (test device); the largest batch that fits is 8"),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// A batch so large that one activation would pass 2^31 elements (cuDNN's limit for one tensor) cannot even be
// planned: refused with one line, whatever the memory, naming the largest batch that can run.
TEST(MemoryFit, BatchPastTheElementLimitIsRefusedBeforePlanning) {
  auto backend = make_reference_backend();
  const ModelOptions options = options_for("resnet20");  // largest activation: 16 x 28 x 28 per image
  const int64_t limit = INT32_MAX / (16 * 28 * 28);
  MemoryFit fit = largest_batch_that_fits(config_for("resnet20", 200000), *backend, options,
                                          device_with_free(size_t{1} << 50));
  EXPECT_EQ(fit.element_limit_batch, limit);
  EXPECT_FALSE(fit.fits());
  EXPECT_EQ(fit.largest_batch.value_or(-1), limit);
  try {
    require_fit(fit);
    ADD_FAILURE() << "batch 200000 was not refused";
  } catch (const UserError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--batch-size 200000: one activation would hold more than 2^31 elements"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find(fmt::format("the largest batch that fits is {}", limit)), std::string::npos)
        << message;
  }
}

// GPT-2's logits (1,024 x 50,304 a sequence) meet only GEMMs and the loss's 64-bit kernels: the limit comes
// from the largest tensor cuDNN could take, the MLP's [T, 4C], so that batch 64 of gpt2-medium is planned.
TEST(MemoryFit, LogitsDoNotSetTheElementLimit) {
  auto backend = make_reference_backend();
  ModelOptions options;
  MemoryFit fit = largest_batch_that_fits(config_for("gpt2-medium", 64, Precision::bf16), *backend, options,
                                          device_with_free(size_t{1} << 40));
  EXPECT_EQ(fit.element_limit_batch, INT32_MAX / (1024 * 4 * 1024));
  EXPECT_TRUE(fit.fits());
  EXPECT_NO_THROW(require_fit(fit));
}

TEST(MemoryFit, LargestFitsAndOneMoreDoesNot) {
  auto backend = make_reference_backend();
  for (Precision precision : {Precision::fp32, Precision::fp16}) {
    for (const char* model : {"resnet50", "resnet20"}) {
      const RunConfig config = config_for(model, 16, precision);
      const ModelOptions options = options_for(model);
      // Room for somewhere between a few hundred (resnet50) and tens of thousands (resnet20) of images.
      const DeviceMemory device = device_with_free((size_t{6} << 30) + kDeviceMemoryMargin + 12345);
      const MemoryFit fit = largest_batch_that_fits(config, *backend, options, device);
      ASSERT_TRUE(fit.largest_batch.has_value());
      const int64_t largest = *fit.largest_batch;
      EXPECT_GT(largest, 16) << model;
      EXPECT_LE(planned_run_bytes(config, *backend, options, largest), fit.usable_bytes) << model;
      EXPECT_GT(planned_run_bytes(config, *backend, options, largest + 1), fit.usable_bytes) << model;
      EXPECT_EQ(fit.usable_bytes, device.free_bytes - kDeviceMemoryMargin);
    }
  }
}

TEST(MemoryFit, NotEvenOneImage) {
  auto backend = make_reference_backend();
  const MemoryFit fit = largest_batch_that_fits(config_for("resnet50", 4), *backend, options_for("resnet50"),
                                                device_with_free(size_t{100} << 20));
  EXPECT_EQ(fit.largest_batch.value_or(-1), 0);
  try {
    require_fit(fit);
    ADD_FAILURE() << "not refused";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("not even a batch of 1 fits"), std::string::npos) << e.what();
  }
}

TEST(MemoryFit, CpuBackendsAreNeverRefused) {
  auto backend = make_reference_backend();
  EXPECT_FALSE(backend->device_memory().has_value());
  const MemoryFit fit =
      largest_batch_that_fits(config_for("resnet50", 100000), *backend, options_for("resnet50"));
  EXPECT_TRUE(fit.fits());
  EXPECT_FALSE(fit.largest_batch.has_value());
  EXPECT_NO_THROW(require_fit(fit));
}

}  // namespace
}  // namespace dlbench
