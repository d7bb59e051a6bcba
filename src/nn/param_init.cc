#include "nn/param_init.h"

#include <cmath>

namespace dlbench {
namespace {

// SplitMix64's finaliser (Steele, Lea, Flood; Vigna's constants): a bijection of 64 bits whose outputs
// for consecutive inputs pass BigCrush, the core of the counter-based generator.
uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The counter's 53 high bits as a double in [0, 1), and shifted by half a step into (0, 1) for log().
double unit_interval(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }
double open_unit_interval(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }

// Elements 2j and 2j + 1 of a normal stream: the cosine and sine halves of one Box-Muller draw.
void normal_pair(uint64_t key, uint64_t j, double& even, double& odd) {
  const double radius = std::sqrt(-2.0 * std::log(open_unit_interval(mix64(key + 2 * j))));
  const double angle = 2.0 * M_PI * unit_interval(mix64(key + 2 * j + 1));
  even = radius * std::cos(angle);
  odd = radius * std::sin(angle);
}

}  // namespace

uint64_t param_stream_key(uint64_t seed, uint64_t ordinal) { return mix64(mix64(seed) ^ mix64(~ordinal)); }

void initial_values(ParamInit init, double scale, uint64_t key, int64_t first, std::span<float> out) {
  const auto count = static_cast<int64_t>(out.size());
  switch (init) {
    case ParamInit::he_normal_fan_out:
    case ParamInit::normal:
      for (int64_t i = 0; i < count; ++i) {
        const int64_t element = first + i;
        double even = 0, odd = 0;
        normal_pair(key, static_cast<uint64_t>(element / 2), even, odd);
        out[static_cast<size_t>(i)] = static_cast<float>(scale * (element % 2 ? odd : even));
        // Both halves of the pair when both are in range: one draw, two elements.
        if (element % 2 == 0 && i + 1 < count)
          out[static_cast<size_t>(++i)] = static_cast<float>(scale * odd);
      }
      return;
    case ParamInit::uniform_fan_in:
      for (int64_t i = 0; i < count; ++i)
        out[static_cast<size_t>(i)] = static_cast<float>(
            scale * (2.0 * unit_interval(mix64(key + static_cast<uint64_t>(first + i))) - 1.0));
      return;
    case ParamInit::ones:
      for (float& v : out) v = 1.f;
      return;
    case ParamInit::zeros:
      for (float& v : out) v = 0.f;
      return;
  }
}

}  // namespace dlbench
