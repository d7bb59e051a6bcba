// Token files as one sequence (token_source.h), and where a `--data DIR` for a token run finds them.
//
// A split (train or val) may be one file (nanoGPT's train.bin) or many shards (llm.c's
// fineweb_train_000001.bin, ...): the shards, in name order, are concatenated, as their writers meant
// (each document ends with an end-of-text token, so a window crossing a shard's end crosses a document's).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/token_file.h"
#include "data/token_source.h"

namespace dlbench {

class TokenDataset : public TokenSource {
 public:
  // `files` is not empty (a caller bug otherwise); each was checked against vocab_size when opened.
  TokenDataset(std::string name, std::vector<TokenFile> files, int64_t vocab_size);
  // Opens every file of `paths` (token_file.h's checks) as one sequence.
  static TokenDataset open(std::string name, const std::vector<std::string>& paths, int64_t vocab_size,
                           TokenFileFormat format = TokenFileFormat::automatic);

  std::string name() const override { return name_; }
  int64_t size() const override { return ends_.back(); }
  int64_t vocab_size() const override { return vocab_size_; }
  void read(int64_t first, std::span<int32_t> out) const override;

  const std::vector<TokenFile>& files() const { return files_; }

 private:
  std::string name_;
  std::vector<TokenFile> files_;
  std::vector<int64_t> ends_;  // ends_[f]: the position after file f's last token
  int64_t vocab_size_ = 0;
};

// The token files of a data directory:
// - DIR/train.bin and DIR/val.bin (nanoGPT's names; either format, told by its header), or
// - llm.c's shards: DIR/*_train_*.bin and DIR/*_val_*.bin (fineweb_train_000001.bin), or the single-file
//   DIR/*_train.bin and DIR/*_val.bin (tiny_shakespeare_train.bin), which must have llm.c's header.
// The val split may be missing (val empty). UserError naming DIR if it is not a directory, holds no train
// file, or holds both kinds (which would be ambiguous).
struct TokenFiles {
  std::vector<std::string> train, val;  // name order
  TokenFileFormat format = TokenFileFormat::automatic;
};
TokenFiles find_token_files(const std::string& dir);

struct TokenData {
  TokenDataset train;
  std::optional<TokenDataset> val;
};
// find_token_files, then every file opened and checked against the vocabulary.
TokenData open_token_data(const std::string& dir, int64_t vocab_size);

}  // namespace dlbench
