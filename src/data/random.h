// Portable random helpers for the data pipeline.
//
// The standard distributions (uniform_int_distribution, normal_distribution, std::shuffle) are
// implementation-defined, so the same seed gives different samples under libstdc++ and libc++. Everything
// the data pipeline draws goes through these helpers instead, built only on std::mt19937_64's raw output,
// whose sequence the standard fixes: a seed means the same data and order on every platform.
#pragma once

#include <cstdint>
#include <random>

namespace dlbench::data_rng {

// SplitMix64 finaliser: spreads nearby inputs (seed 1, seed 2; epoch 7, epoch 8) over unrelated states.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The seed of an independent stream `stream` (an epoch, a purpose) derived from a user seed.
inline uint64_t derive_seed(uint64_t seed, uint64_t stream) { return mix64(mix64(seed) ^ mix64(~stream)); }

// Uniform integer in [0, n), n > 0, without modulo bias: draws that fall in the short last block of
// 2^64 mod n values are rejected.
inline uint64_t uniform_below(std::mt19937_64& rng, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;  // = 2^64 mod n
  for (;;) {
    uint64_t r = rng();
    if (r >= threshold) return r % n;
  }
}

}  // namespace dlbench::data_rng
