// A sequence of tokens for language-model training, and the windows cut from it.
//
// A window is seq_len + 1 contiguous tokens: the model reads the first seq_len (inputs) and predicts each
// one's successor (targets, the same tokens shifted by one). The sources are token files (token_dataset.h)
// and random tokens for `bench` (synthetic_tokens.h); token_sampler.h decides which windows a rank visits.
// A source is immutable once built, so gather() may be called from several threads at once.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/tensor.h"

namespace dlbench {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual std::string name() const = 0;
  virtual int64_t size() const = 0;  // tokens
  // Every token lies in [0, vocab_size()).
  virtual int64_t vocab_size() const = 0;
  // Tokens [first, first + out.size()), within [0, size()) (a caller bug otherwise).
  virtual void read(int64_t first, std::span<int32_t> out) const = 0;

  // Non-overlapping windows of seq_len + 1 tokens that fit: (size() - 1) / seq_len, each window's last
  // token the next one's first (a token is a target once and an input once). UserError, naming the
  // source, if seq_len < 1 or one window is longer than the data.
  int64_t windows(int64_t seq_len) const;

  // The windows starting at the token positions `starts`: inputs[i] = tokens [s, s + seq_len) and
  // targets[i] = tokens [s + 1, s + seq_len + 1), s = starts[i]. Both host i32 [starts.size(), seq_len];
  // another shape or dtype, or a window past the end, is a caller bug (dlbench::Error).
  void gather(std::span<const int64_t> starts, Tensor& inputs, Tensor& targets) const;
};

}  // namespace dlbench
