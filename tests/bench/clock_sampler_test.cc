// The clock summary of a measured window: median and range of the SM clock, mean power, and the share of
// samples each reason held the clocks back; without NVML (no GPU here) the sampler reads nothing.
#include "bench/clock_sampler.h"

#include <gtest/gtest.h>

#include "core/status.h"

namespace dlbench {
namespace {

TEST(ClockSummary, MedianRangePowerAndReasons) {
  const std::vector<GpuSample> samples = {
      {1980, 650, 0},
      {1920, 700, kClockReasonPowerCap},
      {1665, 702, kClockReasonPowerCap},
      {1950, 690, kClockReasonPowerCap | 0x20},  // power cap and software thermal slowdown at once
  };
  const ClockSummary s = summarize_clock_samples(samples);
  EXPECT_EQ(s.samples, 4);
  EXPECT_DOUBLE_EQ(s.sm_clock_median_mhz, 0.5 * (1920 + 1950));
  EXPECT_DOUBLE_EQ(s.sm_clock_min_mhz, 1665);
  EXPECT_DOUBLE_EQ(s.sm_clock_max_mhz, 1980);
  EXPECT_DOUBLE_EQ(s.power_mean_watts, (650.0 + 700 + 702 + 690) / 4);
  EXPECT_DOUBLE_EQ(s.power_capped, 0.75);
  EXPECT_DOUBLE_EQ(s.thermal, 0.25);
  EXPECT_DOUBLE_EQ(s.hardware_slowdown, 0.0);
}

TEST(ClockSummary, OddCountTakesTheMiddleSample) {
  const ClockSummary s = summarize_clock_samples({{1800, 1, 0x80}, {1500, 1, 0}, {1900, 1, 0}});
  EXPECT_DOUBLE_EQ(s.sm_clock_median_mhz, 1800);
  EXPECT_NEAR(s.hardware_slowdown, 1.0 / 3, 1e-12);
}

TEST(ClockSummary, NoSamplesIsACallersBug) { EXPECT_THROW(summarize_clock_samples({}), Error); }

TEST(ClockSampler, AGpuNvmlCannotReadGivesNoSummary) {
  // No such bus id anywhere (and no NVML on a machine without a driver): nothing is sampled.
  ClockSampler sampler("ffff:ff:ff.f", std::chrono::milliseconds(1));
  EXPECT_FALSE(sampler.stop().has_value());
  EXPECT_FALSE(sampler.stop().has_value());  // a second stop is harmless
}

}  // namespace
}  // namespace dlbench
