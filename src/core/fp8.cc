#include "core/fp8.h"

#include <array>
#include <cmath>

namespace dlbench {
namespace {

struct Layout8 {
  int exponent_bits, mantissa_bits, bias;
};

Layout8 layout_of(Fp8Format f) { return f == Fp8Format::e4m3 ? Layout8{4, 3, 7} : Layout8{5, 2, 15}; }

// The largest finite code's magnitude bits: E4M3's S.1111.110 (S.1111.111 is NaN), E5M2's S.11110.11
// (exponent 11111 holds the infinities and NaNs).
uint8_t largest_code(Fp8Format f) { return f == Fp8Format::e4m3 ? 0x7E : 0x7B; }

bool is_nan_code(uint8_t magnitude, Fp8Format f) {
  return f == Fp8Format::e4m3 ? magnitude == 0x7F : magnitude > 0x7C;
}

// The magnitudes of the codes 0 .. largest_code (increasing with the code), for the rounding search.
const std::array<double, 128>& magnitudes(Fp8Format f) {
  static const auto make = [](Fp8Format format) {
    std::array<double, 128> m{};
    const Layout8 l = layout_of(format);
    for (int code = 0; code < 128; ++code) {
      const int exponent = code >> l.mantissa_bits, mantissa = code & ((1 << l.mantissa_bits) - 1);
      const double fraction = double(mantissa) / double(1 << l.mantissa_bits);
      m[static_cast<size_t>(code)] =
          exponent == 0 ? std::ldexp(fraction, 1 - l.bias) : std::ldexp(1.0 + fraction, exponent - l.bias);
    }
    return m;
  };
  static const std::array<double, 128> e4m3 = make(Fp8Format::e4m3), e5m2 = make(Fp8Format::e5m2);
  return f == Fp8Format::e4m3 ? e4m3 : e5m2;
}

}  // namespace

const char* fp8_format_name(Fp8Format f) { return f == Fp8Format::e4m3 ? "e4m3" : "e5m2"; }

double fp8_largest(Fp8Format f) { return magnitudes(f)[largest_code(f)]; }

float fp8_to_float(uint8_t bits, Fp8Format f) {
  const uint8_t magnitude = bits & 0x7F;
  const float sign = (bits & 0x80) ? -1.f : 1.f;
  if (is_nan_code(magnitude, f)) return std::nanf("");
  if (f == Fp8Format::e5m2 && magnitude == 0x7C) return sign * INFINITY;
  return sign * static_cast<float>(magnitudes(f)[magnitude]);
}

uint8_t float_to_fp8(float value, Fp8Format f) {
  if (std::isnan(value)) return 0x7F;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  const double v = std::fabs(double(value));
  const uint8_t top = largest_code(f);
  const std::array<double, 128>& m = magnitudes(f);
  if (v >= m[top]) return sign | top;  // saturates (infinities too)
  // The codes below and above v (v < the largest, so `above` exists), then the nearer, ties to even.
  int below = 0, above = top;
  while (above - below > 1) {
    const int middle = (below + above) / 2;
    (m[static_cast<size_t>(middle)] <= v ? below : above) = middle;
  }
  const double to_below = v - m[static_cast<size_t>(below)], to_above = m[static_cast<size_t>(above)] - v;
  const int code = to_below < to_above   ? below
                   : to_above < to_below ? above
                                         : (below % 2 == 0 ? below : above);
  return sign | static_cast<uint8_t>(code);
}

float fp8_scale_from_amax(float amax, Fp8Format f, int margin, float previous) {
  if (!(amax > 0.f) || !std::isfinite(amax)) return previous;
  const float ratio = static_cast<float>(fp8_largest(f)) / amax;
  if (!std::isfinite(ratio)) return previous;
  int exponent = 0;
  std::frexp(ratio, &exponent);  // ratio = m 2^exponent, m in [0.5, 1): the power below is 2^(exponent - 1)
  const float scale = std::ldexp(1.f, exponent - 1 - margin);
  return std::isnormal(scale) ? scale : previous;
}

}  // namespace dlbench
