// FP8 numbers, the two formats Hopper's tensor cores multiply (OCP 8-bit floating point):
//   E4M3  sign, 4 exponent bits (bias 7), 3 mantissa bits: largest finite 448, smallest subnormal 2^-9;
//         no infinities, S.1111.111 is NaN (the format forward activations and weights take);
//   E5M2  sign, 5 exponent bits (bias 15), 2 mantissa bits: IEEE-like, largest finite 57344, smallest
//         subnormal 2^-16, infinities and NaNs (gradients' wider range).
// The host's conversions, exact: the reference the GPU's FP8 casts and GEMMs are checked against. A float
// rounds to the nearest FP8 value, ties to the even code; beyond the largest finite value (infinities
// included) it saturates to it, as the GPU's saturating casts do (an overflowing value becomes the
// largest, not NaN); NaN stays NaN.
#pragma once

#include <cstdint>

namespace dlbench {

enum class Fp8Format : uint8_t { e4m3, e5m2 };

const char* fp8_format_name(Fp8Format format);  // "e4m3", "e5m2"
double fp8_largest(Fp8Format format);           // 448, 57344
float fp8_to_float(uint8_t bits, Fp8Format format);
uint8_t float_to_fp8(float value, Fp8Format format);

// Delayed scaling: the scale an operand is multiplied by before its FP8 cast, made from the largest |x| it
// held over the last steps (the maximum of its amax history): the largest power of two that keeps that
// amax within the format's largest finite value, halved `margin` times for headroom, so that the next
// step's values fill the format's range (to within a factor of two) without saturating. A power of two,
// so that scaling and unscaling round nothing: an FP8 value times the inverse scale is exact in BF16.
// An amax of 0 or one not finite (nothing seen yet, an overflowed step), or a scale that would not be a
// normal float, keeps `previous`. In float arithmetic, exactly as the GPU's update kernel computes it
// (update_fp8_scales).
float fp8_scale_from_amax(float amax, Fp8Format format, int margin, float previous);

}  // namespace dlbench
