#include "backend/reference/half_float.h"

#include <cmath>

namespace dlbench {
namespace {

// A binary float format with 1 sign bit, `exponent_bits` and `mantissa_bits` (IEEE-style: biased
// exponent, implicit leading 1, subnormals, all-ones exponent for Inf/NaN).
struct Format {
  int exponent_bits;
  int mantissa_bits;
  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  int min_exponent() const { return 1 - bias(); }  // of the smallest normal number
  int max_exponent() const { return bias(); }
  uint32_t all_ones_exponent() const { return (1u << exponent_bits) - 1; }
};

constexpr Format kF16{5, 10};
constexpr Format kBf16{8, 7};

uint16_t encode(double value, Format f) {
  const uint32_t sign = std::signbit(value) ? 1u << (f.exponent_bits + f.mantissa_bits) : 0u;
  const uint32_t inf = f.all_ones_exponent() << f.mantissa_bits;
  if (std::isnan(value))
    return static_cast<uint16_t>(sign | inf | (1u << (f.mantissa_bits - 1)));  // quiet NaN
  const double a = std::fabs(value);
  if (std::isinf(a)) return static_cast<uint16_t>(sign | inf);

  int e2 = 0;
  std::frexp(a, &e2);     // a = fraction * 2^e2, fraction in [0.5, 1)
  int exponent = e2 - 1;  // a = m * 2^exponent, m in [1, 2)
  if (a == 0 || exponent < f.min_exponent()) {
    // Subnormal: an integer count of the smallest step 2^(min_exponent - mantissa_bits). nearbyint rounds
    // half to even in the default rounding mode. A count of 2^mantissa_bits is the smallest normal number,
    // and its bit pattern is exactly that count, so no special case is needed.
    const double steps = std::nearbyint(std::ldexp(a, f.mantissa_bits - f.min_exponent()));
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(steps));
  }
  // Normal: the significand scaled to an integer in [2^mantissa_bits, 2^(mantissa_bits+1)], rounded to even.
  double significand = std::nearbyint(std::ldexp(a, f.mantissa_bits - exponent));
  if (significand == std::ldexp(1.0, f.mantissa_bits + 1)) {  // rounded up into the next binade
    significand /= 2;
    ++exponent;
  }
  if (exponent > f.max_exponent()) return static_cast<uint16_t>(sign | inf);
  const uint32_t biased = static_cast<uint32_t>(exponent + f.bias());
  const uint32_t fraction = static_cast<uint32_t>(significand) - (1u << f.mantissa_bits);
  return static_cast<uint16_t>(sign | (biased << f.mantissa_bits) | fraction);
}

double decode(uint16_t bits, Format f) {
  const uint32_t fraction = bits & ((1u << f.mantissa_bits) - 1);
  const uint32_t biased = (bits >> f.mantissa_bits) & f.all_ones_exponent();
  const bool negative = (bits >> (f.exponent_bits + f.mantissa_bits)) & 1u;
  double magnitude;
  if (biased == f.all_ones_exponent()) {
    magnitude = fraction == 0 ? INFINITY : NAN;
  } else if (biased == 0) {
    magnitude = std::ldexp(static_cast<double>(fraction), f.min_exponent() - f.mantissa_bits);
  } else {
    magnitude = std::ldexp(static_cast<double>(fraction + (1u << f.mantissa_bits)),
                           static_cast<int>(biased) - f.bias() - f.mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

}  // namespace

uint16_t f16_from_double(double value) { return encode(value, kF16); }
double f16_to_double(uint16_t bits) { return decode(bits, kF16); }
uint16_t bf16_from_double(double value) { return encode(value, kBf16); }
double bf16_to_double(uint16_t bits) { return decode(bits, kBf16); }

}  // namespace dlbench
