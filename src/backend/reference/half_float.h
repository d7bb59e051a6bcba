// Conversions between double and the 16-bit float formats (IEEE binary16 and bfloat16), bit-exact with
// round-to-nearest-even. Rounding straight from double avoids the double rounding of going through float.
#pragma once

#include <cstdint>

namespace dlbench {

uint16_t f16_from_double(double value);
double f16_to_double(uint16_t bits);
uint16_t bf16_from_double(double value);
double bf16_to_double(uint16_t bits);

}  // namespace dlbench
