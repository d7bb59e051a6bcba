// Initial parameter values from a counter-based generator: element i of parameter k under seed s is a
// pure function of (s, k, i), so the values can be computed by any number of threads in any order, a
// chunk at a time, and are the same on every machine (the arithmetic is written out: no standard
// library distribution, whose algorithms differ between libraries). A sequential generator made the
// host spend about a minute on gpt2-xl's 1.56 billion weights before the first step.
#pragma once

#include <cstdint>
#include <span>

namespace dlbench {

// How a parameter starts.
enum class ParamInit : uint8_t {
  he_normal_fan_out,  // N(0, 2 / fan_out): torchvision's conv init (kaiming_normal_, mode fan_out, relu)
  uniform_fan_in,     // U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's default for Linear weight and bias
  normal,             // N(0, init_std^2): GPT-2's weights
  ones,
  zeros,
};

// The stream of parameter number `ordinal` (its place in the plan) under `seed`.
uint64_t param_stream_key(uint64_t seed, uint64_t ordinal);

// Elements [first, first + out.size()) of a parameter drawn under `init`: N(0, stddev^2) for the normal
// rules (Box-Muller on pairs of elements 2j, 2j + 1), U(-bound, bound) for the uniform one (`scale` is
// the stddev or the bound), 1 and 0 for ones and zeros. Values are rounded to FP32.
void initial_values(ParamInit init, double scale, uint64_t key, int64_t first, std::span<float> out);

}  // namespace dlbench
