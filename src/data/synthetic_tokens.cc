#include "data/synthetic_tokens.h"

#include <algorithm>
#include <limits>
#include <random>

#include "core/status.h"
#include "data/random.h"

namespace dlbench {

SyntheticTokens::SyntheticTokens(int64_t size, int64_t vocab_size, uint64_t seed) : vocab_size_(vocab_size) {
  DLB_REQUIRE(size >= 2, "synthetic tokens: {} tokens; one window needs at least 2", size);
  DLB_REQUIRE(vocab_size >= 1 && vocab_size <= int64_t{std::numeric_limits<int32_t>::max()} + 1,
              "synthetic tokens: vocabulary of {}; choose 1 to 2^31", vocab_size);
  DLB_REQUIRE(size <= max_bytes / static_cast<int64_t>(sizeof(int32_t)),
              "synthetic tokens: {} tokens would need {:.1f} GiB, more than the {} GiB allowed; use fewer",
              size, static_cast<double>(size) * sizeof(int32_t) / (1 << 30), max_bytes >> 30);
  tokens_.resize(static_cast<size_t>(size));
  std::mt19937_64 rng(data_rng::derive_seed(seed, 0));  // nearby seeds, unrelated tokens
  for (int32_t& token : tokens_)
    token = static_cast<int32_t>(data_rng::uniform_below(rng, static_cast<uint64_t>(vocab_size)));
}

void SyntheticTokens::read(int64_t first, std::span<int32_t> out) const {
  DLB_CHECK(first >= 0 && first + static_cast<int64_t>(out.size()) <= size(), "tokens [{}, {}) of {}", first,
            first + static_cast<int64_t>(out.size()), size());
  std::copy_n(tokens_.begin() + first, out.size(), out.begin());
}

}  // namespace dlbench
