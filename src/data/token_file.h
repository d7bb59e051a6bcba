// One file of tokens for language-model training, as llm.c and nanoGPT write them, and dlbench tokenize.
//
// Formats read (all little endian):
// - llm.c (dev/data/data_common.py, write_datafile): a header of 256 int32, header[0] the magic,
//   header[1] the version, header[2] the token count, the rest zero; then the tokens. Magic 20240520
//   version 1: uint16 tokens (GPT-2); magic 20240801 version 7: uint32 tokens (LLaMA-3). `dlbench tokenize`
//   writes the first (token_writer.h).
// - nanoGPT (data/*/prepare.py): the uint16 tokens alone, no header (train.bin, val.bin).
//
// A file is read through mmap: a corpus of billions of tokens costs address space, not memory, and windows
// are read from the page cache. Every problem (missing, empty, odd length, wrong magic or version, a count
// that disagrees with the size, a token outside the vocabulary) is a UserError whose one line names the file
// and says what is wrong.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace dlbench {

namespace llmc {
inline constexpr int kHeaderInts = 256;
inline constexpr int64_t kHeaderBytes = kHeaderInts * 4;
inline constexpr int32_t kMagicGpt2 = 20240520;  // version 1: uint16 tokens
inline constexpr int32_t kVersionGpt2 = 1;
inline constexpr int32_t kMagicLlama3 = 20240801;  // version 7: uint32 tokens
inline constexpr int32_t kVersionLlama3 = 7;
}  // namespace llmc

enum class TokenFileFormat {
  automatic,  // llm.c when the file starts with one of its headers, else nanoGPT's raw uint16
  llmc,       // an llm.c header is required (its shards, *_train_*.bin)
  raw_uint16  // nanoGPT's headerless uint16 tokens
};

class TokenFile {
 public:
  // Opens and checks `path`: every token must lie in [0, vocab_size). UserError naming the file otherwise.
  static TokenFile open(const std::string& path, int64_t vocab_size,
                        TokenFileFormat format = TokenFileFormat::automatic);
  // The same checks over bytes already in memory (tests, the fuzz target); `name` stands for the path.
  static TokenFile from_bytes(std::string name, std::vector<uint8_t> bytes, int64_t vocab_size,
                              TokenFileFormat format = TokenFileFormat::automatic);

  const std::string& path() const { return path_; }
  // The format found: llmc or raw_uint16, never automatic.
  TokenFileFormat format() const { return format_; }
  int token_bytes() const { return token_bytes_; }  // 2 (uint16) or 4 (uint32)
  int64_t size() const { return count_; }           // tokens, at least 1
  std::string describe() const;                     // "llm.c v1, uint16" | "nanoGPT, uint16" ...

  int32_t token(int64_t i) const;
  // Tokens [first, first + out.size()) as int32; the range must lie within the file (a caller bug if not).
  void read(int64_t first, std::span<int32_t> out) const;

 private:
  TokenFile(std::string path, std::shared_ptr<const void> owner, std::span<const uint8_t> bytes,
            int64_t vocab_size, TokenFileFormat format);
  void check_vocabulary(int64_t vocab_size) const;

  std::string path_;
  std::shared_ptr<const void> owner_;  // keeps the mapping or the buffer alive; copies share it
  const uint8_t* tokens_ = nullptr;    // the first token, after any header
  int64_t count_ = 0;
  int token_bytes_ = 2;
  TokenFileFormat format_ = TokenFileFormat::raw_uint16;
};

}  // namespace dlbench
