// Synthetic tokens: a token sequence (token_source.h) of random tokens, for `bench` on a language model
// without a corpus.
//
// As SyntheticDataset (synthetic.h), the tokens are drawn once, at construction, and then only copied, so
// a batch costs what it costs from a corpus in memory; uniform in [0, vocab_size) through data_rng
// (random.h), so a seed gives the same tokens on every platform.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/token_source.h"

namespace dlbench {

class SyntheticTokens : public TokenSource {
 public:
  // UserError if size < 2 (one window needs two tokens), vocab_size is outside [1, 2^31], or the tokens
  // would need more than max_bytes of memory.
  SyntheticTokens(int64_t size, int64_t vocab_size, uint64_t seed);

  std::string name() const override { return "synthetic-tokens"; }
  int64_t size() const override { return static_cast<int64_t>(tokens_.size()); }
  int64_t vocab_size() const override { return vocab_size_; }
  void read(int64_t first, std::span<int32_t> out) const override;

  // Memory cap, to fail with a message instead of std::bad_alloc when a size is mistyped.
  static constexpr int64_t max_bytes = int64_t{16} << 30;

 private:
  int64_t vocab_size_;
  std::vector<int32_t> tokens_;
};

}  // namespace dlbench
