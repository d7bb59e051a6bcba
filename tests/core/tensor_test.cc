#include "core/tensor.h"

#include <gtest/gtest.h>

#include "core/status.h"

namespace dlbench {
namespace {

TEST(Tensor, OffsetsFollowLayout) {
  Tensor nchw(nullptr, {2, 3, 4, 5}, DType::f32, Layout::nchw);
  Tensor nhwc(nullptr, {2, 3, 4, 5}, DType::f32, Layout::nhwc);
  EXPECT_EQ(nchw.offset(1, 2, 3, 4), 1 * 60 + 2 * 20 + 3 * 5 + 4);
  EXPECT_EQ(nhwc.offset(1, 2, 3, 4), 1 * 60 + 3 * 15 + 4 * 3 + 2);
  EXPECT_EQ(nchw.numel(), 120);
  EXPECT_EQ(nchw.bytes(), 480u);
}

TEST(Tensor, ReshapeChecksElementCount) {
  HostBuffer buffer({4, 6}, DType::f64);
  EXPECT_EQ(buffer.tensor().reshaped({24}).numel(), 24);
  EXPECT_THROW(buffer.tensor().reshaped({5, 5}), Error);
  EXPECT_EQ(buffer.tensor().describe(), "f64[4, 6] nchw cpu");
}

TEST(Status, RequireThrowsUserErrorWithMessage) {
  try {
    DLB_REQUIRE(1 + 1 == 3, "batch size must be positive, got {}", -1);
    FAIL() << "no throw";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "batch size must be positive, got -1");
  }
}

}  // namespace
}  // namespace dlbench
