// FP8's host conversions (core/fp8.h): every code decodes to the value its bits define and encodes back to
// itself; the formats' landmarks (largest finite, smallest normal and subnormal, infinity, NaN); rounding to
// the nearest value with ties to the even code; saturation beyond the largest finite value.
#include "core/fp8.h"

#include <gtest/gtest.h>

#include <cmath>

namespace dlbench {
namespace {

TEST(Fp8, EveryCodeRoundTrips) {
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    SCOPED_TRACE(fp8_format_name(f));
    int nans = 0, infinities = 0;
    for (int code = 0; code < 256; ++code) {
      const float v = fp8_to_float(static_cast<uint8_t>(code), f);
      if (std::isnan(v)) {
        ++nans;
        continue;
      }
      if (std::isinf(v)) {
        ++infinities;
        continue;
      }
      EXPECT_EQ(float_to_fp8(v, f), code) << "code " << code << " value " << v;
    }
    EXPECT_EQ(nans, f == Fp8Format::e4m3 ? 2 : 6);
    EXPECT_EQ(infinities, f == Fp8Format::e4m3 ? 0 : 2);
  }
}

TEST(Fp8, Landmarks) {
  EXPECT_EQ(fp8_largest(Fp8Format::e4m3), 448.0);
  EXPECT_EQ(fp8_largest(Fp8Format::e5m2), 57344.0);
  EXPECT_EQ(fp8_to_float(0x7E, Fp8Format::e4m3), 448.f);
  EXPECT_EQ(fp8_to_float(0x08, Fp8Format::e4m3), std::ldexp(1.f, -6));  // smallest normal
  EXPECT_EQ(fp8_to_float(0x01, Fp8Format::e4m3), std::ldexp(1.f, -9));  // smallest subnormal
  EXPECT_EQ(fp8_to_float(0x38, Fp8Format::e4m3), 1.f);
  EXPECT_EQ(fp8_to_float(0xB8, Fp8Format::e4m3), -1.f);
  EXPECT_TRUE(std::isnan(fp8_to_float(0x7F, Fp8Format::e4m3)));
  EXPECT_EQ(fp8_to_float(0x7B, Fp8Format::e5m2), 57344.f);
  EXPECT_EQ(fp8_to_float(0x04, Fp8Format::e5m2), std::ldexp(1.f, -14));  // smallest normal
  EXPECT_EQ(fp8_to_float(0x01, Fp8Format::e5m2), std::ldexp(1.f, -16));  // smallest subnormal
  EXPECT_EQ(fp8_to_float(0x3C, Fp8Format::e5m2), 1.f);
  EXPECT_EQ(fp8_to_float(0x7C, Fp8Format::e5m2), INFINITY);
  EXPECT_EQ(fp8_to_float(0xFC, Fp8Format::e5m2), -INFINITY);
  EXPECT_TRUE(std::isnan(fp8_to_float(0x7E, Fp8Format::e5m2)));
}

TEST(Fp8, RoundsToNearestTiesToEven) {
  // E4M3 near 1: 1, 1.125, 1.25 are codes 0x38, 0x39, 0x3A.
  EXPECT_EQ(float_to_fp8(1.0625f, Fp8Format::e4m3), 0x38);  // the tie: the even code
  EXPECT_EQ(float_to_fp8(1.1875f, Fp8Format::e4m3), 0x3A);  // the tie between 0x39 and 0x3A: 0x3A
  EXPECT_EQ(float_to_fp8(1.07f, Fp8Format::e4m3), 0x39);
  EXPECT_EQ(float_to_fp8(1.05f, Fp8Format::e4m3), 0x38);
  EXPECT_EQ(float_to_fp8(-1.07f, Fp8Format::e4m3), 0xB9);
  // E5M2 near 1: 1, 1.25 are 0x3C, 0x3D.
  EXPECT_EQ(float_to_fp8(1.125f, Fp8Format::e5m2), 0x3C);
  EXPECT_EQ(float_to_fp8(1.13f, Fp8Format::e5m2), 0x3D);
  // Below half the smallest subnormal: zero, keeping the sign; at half of it, a tie: zero (even).
  EXPECT_EQ(float_to_fp8(std::ldexp(1.f, -11), Fp8Format::e4m3), 0x00);
  EXPECT_EQ(float_to_fp8(std::ldexp(1.f, -10), Fp8Format::e4m3), 0x00);
  EXPECT_EQ(float_to_fp8(std::ldexp(1.5f, -10), Fp8Format::e4m3), 0x01);
  EXPECT_EQ(float_to_fp8(-0.f, Fp8Format::e4m3), 0x80);
}

TEST(Fp8, SaturatesBeyondTheLargestAndKeepsNan) {
  EXPECT_EQ(float_to_fp8(449.f, Fp8Format::e4m3), 0x7E);
  EXPECT_EQ(float_to_fp8(1e6f, Fp8Format::e4m3), 0x7E);
  EXPECT_EQ(float_to_fp8(-1e6f, Fp8Format::e4m3), 0xFE);
  EXPECT_EQ(float_to_fp8(INFINITY, Fp8Format::e4m3), 0x7E);
  EXPECT_EQ(float_to_fp8(1e9f, Fp8Format::e5m2), 0x7B);
  EXPECT_EQ(float_to_fp8(-INFINITY, Fp8Format::e5m2), 0xFB);
  EXPECT_TRUE(std::isnan(fp8_to_float(float_to_fp8(std::nanf(""), Fp8Format::e4m3), Fp8Format::e4m3)));
  EXPECT_TRUE(std::isnan(fp8_to_float(float_to_fp8(std::nanf(""), Fp8Format::e5m2), Fp8Format::e5m2)));
}

// Delayed scaling's rule: the largest power of two that keeps the amax within the format's largest value,
// halved `margin` times; nothing seen (amax 0) or an overflowed step (amax not finite) keeps the scale it
// had.
TEST(Fp8, ScaleFromAmax) {
  EXPECT_EQ(fp8_scale_from_amax(224.f, Fp8Format::e4m3, 0, 1.f), 2.f);     // 224 maps onto 448 exactly
  EXPECT_EQ(fp8_scale_from_amax(224.f, Fp8Format::e4m3, 1, 1.f), 1.f);     // with one bit of headroom
  EXPECT_EQ(fp8_scale_from_amax(225.f, Fp8Format::e4m3, 0, 1.f), 1.f);     // 2 would take 225 past 448
  EXPECT_EQ(fp8_scale_from_amax(0.5f, Fp8Format::e5m2, 0, 1.f), 65536.f);  // 114688 rounded down
  EXPECT_EQ(fp8_scale_from_amax(3.f, Fp8Format::e4m3, 0, 1.f), 128.f);     // 149.3 rounded down
  EXPECT_EQ(fp8_scale_from_amax(1e-30f, Fp8Format::e5m2, 0, 1.f), std::ldexp(1.f, 115));  // 5.7e34
  EXPECT_EQ(fp8_scale_from_amax(1e-40f, Fp8Format::e5m2, 0, 7.f), 7.f);  // 57344 / 1e-40 overflows
  EXPECT_EQ(fp8_scale_from_amax(0.f, Fp8Format::e4m3, 0, 7.f), 7.f);
  EXPECT_EQ(fp8_scale_from_amax(INFINITY, Fp8Format::e4m3, 0, 7.f), 7.f);
  EXPECT_EQ(fp8_scale_from_amax(std::nanf(""), Fp8Format::e5m2, 0, 7.f), 7.f);
  // The scaled amax stays within the format and above half of its largest value; the scale is a power
  // of two.
  for (float amax : {1e-3f, 0.37f, 5.f, 1234.5f, 448.f, 3e4f}) {
    for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
      const float scale = fp8_scale_from_amax(amax, f, 0, 1.f);
      int exponent = 0;
      EXPECT_EQ(std::frexp(scale, &exponent), 0.5f) << amax;
      EXPECT_LE(amax * scale, fp8_largest(f)) << amax;
      EXPECT_GT(amax * scale, fp8_largest(f) / 2) << amax;
    }
  }
}

}  // namespace
}  // namespace dlbench
