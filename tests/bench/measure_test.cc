#include "bench/measure.h"

#include <gtest/gtest.h>

namespace dlbench {
namespace {

TEST(Statistics, PercentilesInterpolateLikeNumpy) {
  std::vector<double> v{10, 1, 4, 3, 2, 9, 8, 7, 6, 5};  // 1..10 shuffled
  EXPECT_DOUBLE_EQ(percentile(v, 50), 5.5);
  EXPECT_DOUBLE_EQ(percentile(v, 5), 1.45);  // numpy.percentile(range(1, 11), 5)
  EXPECT_DOUBLE_EQ(percentile(v, 95), 9.55);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 10);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
}

TEST(Statistics, SummaryMatchesKnownValues) {
  // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, sample stddev sqrt(32/7) = 2.13809
  Distribution d = summarize({2, 4, 4, 4, 5, 5, 7, 9});
  EXPECT_EQ(d.count, 8);
  EXPECT_DOUBLE_EQ(d.mean, 5);
  EXPECT_DOUBLE_EQ(d.median, 4.5);
  EXPECT_NEAR(d.stddev, 2.1380899, 1e-6);
  // t(0.975, 7) = 2.365: 2.365 * 2.13809 / sqrt(8) = 1.78777
  EXPECT_NEAR(d.ci95, 1.78777, 1e-4);
  EXPECT_NEAR(d.jitter, 2.1380899 / 5, 1e-6);
  EXPECT_DOUBLE_EQ(d.min, 2);
  EXPECT_DOUBLE_EQ(d.max, 9);
}

TEST(Statistics, SingleValueHasNoSpread) {
  Distribution d = summarize({3.5});
  EXPECT_DOUBLE_EQ(d.median, 3.5);
  EXPECT_DOUBLE_EQ(d.stddev, 0);
  EXPECT_DOUBLE_EQ(d.ci95, 0);
}

// Steps of 150 ms and 2,000 ms (a machine busy with other work) are flagged; a steady window is not, nor
// one of two steps, whose spread says nothing.
TEST(Statistics, ABusyMachineIsFlagged) {
  const auto note = busy_machine_note(summarize({150, 160, 2000, 150, 1900}));
  ASSERT_TRUE(note.has_value());
  EXPECT_NE(note->find("the machine may be busy"), std::string::npos) << *note;
  EXPECT_FALSE(busy_machine_note(summarize({150, 152, 149, 151, 150})).has_value());
  EXPECT_FALSE(busy_machine_note(summarize({150, 2000})).has_value());
}

TEST(MeasuredWindow, ThroughputIsImagesOverWallTimeNotMeanOfRates) {
  MeasuredWindow w;
  w.add_step(100, 10);  // 100 img/s
  w.add_step(900, 10);  // 11.1 img/s
  w.set_wall_seconds(1.0);
  EXPECT_DOUBLE_EQ(w.images_per_second(), 20.0);  // a mean of rates would say 55.6
  EXPECT_EQ(w.images(), 20);
}

}  // namespace
}  // namespace dlbench
