#include "data/token_file.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/token_test_util.h"
#include "temp_dir.h"

namespace dlbench::testing {
namespace {

constexpr int64_t kGpt2Vocab = 50257;

std::vector<int32_t> all_tokens(const TokenFile& file) {
  std::vector<int32_t> out(static_cast<size_t>(file.size()));
  file.read(0, out);
  return out;
}

std::vector<int32_t> as_int32(const std::vector<uint32_t>& tokens) {
  return std::vector<int32_t>(tokens.begin(), tokens.end());
}

// The message of opening `bytes` as the file NAME in a fresh directory, which must fail; checks that it
// is one line naming the file.
std::string open_error(const std::string& bytes, int64_t vocab = kGpt2Vocab,
                       TokenFileFormat format = TokenFileFormat::automatic,
                       const std::string& name = "data.bin") {
  TempDir dir;
  const std::string path = dir.file(name);
  write_file(path, bytes);
  const std::string message = user_error_message([&] { TokenFile::open(path, vocab, format); });
  EXPECT_CONTAINS(message, path);
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  return message;
}

TEST(TokenFile, ReadsLlmcGpt2File) {
  TempDir dir;
  const std::vector<uint32_t> tokens = {50256, 0, 1, 65535 % kGpt2Vocab, 464, 2068, 7586, 50256};
  write_file(dir.file("shard_train_000000.bin"), llmc_bytes(tokens));
  const TokenFile file = TokenFile::open(dir.file("shard_train_000000.bin"), kGpt2Vocab);
  EXPECT_EQ(file.format(), TokenFileFormat::llmc);
  EXPECT_EQ(file.token_bytes(), 2);
  EXPECT_EQ(file.size(), 8);
  EXPECT_EQ(all_tokens(file), as_int32(tokens));
  EXPECT_EQ(file.token(4), 464);
  EXPECT_EQ(file.describe(), "llm.c v1, uint16");
}

TEST(TokenFile, ReadsLlmcLlama3FileOfUint32Tokens) {
  const std::vector<uint32_t> tokens = {128000, 70000, 5, 128255};
  const TokenFile file =
      TokenFile::from_bytes("llama.bin", to_vector(llmc_bytes(tokens, 20240801, 7, 4)), 128256);
  EXPECT_EQ(file.token_bytes(), 4);
  EXPECT_EQ(all_tokens(file), as_int32(tokens));
}

TEST(TokenFile, ReadsNanoGptRawUint16File) {
  TempDir dir;
  const std::vector<uint32_t> tokens = counting_tokens(1000, kGpt2Vocab);
  write_file(dir.file("train.bin"), nanogpt_bytes(tokens));
  const TokenFile file = TokenFile::open(dir.file("train.bin"), kGpt2Vocab);
  EXPECT_EQ(file.format(), TokenFileFormat::raw_uint16);
  EXPECT_EQ(file.size(), 1000);
  EXPECT_EQ(all_tokens(file), as_int32(tokens));
  std::vector<int32_t> middle(3);
  file.read(500, middle);
  EXPECT_EQ(middle, (std::vector<int32_t>(tokens.begin() + 500, tokens.begin() + 503)));
}

// A raw file is read as raw when told, even one whose first tokens spell llm.c's magic.
TEST(TokenFile, RawFormatWhenToldIgnoresAHeaderLookalike) {
  const std::string bytes = llmc_bytes({1, 2});
  const TokenFile file = TokenFile::from_bytes("x.bin", to_vector(bytes), 65536, TokenFileFormat::raw_uint16);
  EXPECT_EQ(file.size(), static_cast<int64_t>(bytes.size() / 2));
  EXPECT_EQ(file.token(0), 20240520 & 0xffff);
}

TEST(TokenFile, OddLengthIsRefused) {
  EXPECT_CONTAINS(open_error(nanogpt_bytes({1, 2, 3}) + "x"), "odd length (7 bytes)");
}

TEST(TokenFile, EmptyFileIsRefused) {
  EXPECT_CONTAINS(open_error(""), "is empty");
  EXPECT_CONTAINS(open_error("", kGpt2Vocab, TokenFileFormat::llmc), "is empty");
}

TEST(TokenFile, LlmcHeaderWithNoTokensIsRefused) {
  EXPECT_CONTAINS(open_error(llmc_bytes({})), "holds no tokens");
}

TEST(TokenFile, WrongMagicIsRefused) {
  // A header-shaped start (zeros after the count) with another magic: an llm.c file of another kind.
  EXPECT_CONTAINS(open_error(llmc_bytes({1, 2, 3}, 20240522)), "wrong magic number 20240522");
  // An llm.c shard must start with a header; raw tokens there are a wrong magic too.
  EXPECT_CONTAINS(open_error(nanogpt_bytes(counting_tokens(600, 1000)), kGpt2Vocab, TokenFileFormat::llmc,
                             "fineweb_train_000001.bin"),
                  "wrong magic number");
}

TEST(TokenFile, WrongVersionIsRefused) {
  EXPECT_CONTAINS(open_error(llmc_bytes({1, 2, 3}, 20240520, 2)), "version 2");
  EXPECT_CONTAINS(open_error(llmc_bytes({1, 2, 3}, 20240801, 1, 4)), "version 1");
}

TEST(TokenFile, HeaderCountDisagreeingWithTheSizeIsRefused) {
  EXPECT_CONTAINS(open_error(llmc_bytes({1, 2, 3}, 20240520, 1, 2, 4)), "says 4 tokens (1032 bytes");
  EXPECT_CONTAINS(open_error(llmc_bytes({1, 2, 3}, 20240520, 1, 2, 4)), "truncated");
  EXPECT_CONTAINS(open_error(llmc_bytes({1, 2, 3}, 20240520, 1, 2, 2)), "data beyond");
  EXPECT_CONTAINS(open_error(llmc_bytes({1, 2, 3}, 20240520, 1, 2, 0xffffffff)), "negative");
}

TEST(TokenFile, TruncatedHeaderIsRefused) {
  EXPECT_CONTAINS(open_error(llmc_bytes({}).substr(0, 100), kGpt2Vocab, TokenFileFormat::llmc),
                  "shorter than llm.c's 1024-byte header");
}

TEST(TokenFile, TokenPastTheVocabularyIsRefused) {
  std::vector<uint32_t> tokens = counting_tokens(300, 256);
  tokens[123] = 256;
  const std::string raw = open_error(nanogpt_bytes(tokens), 256);
  EXPECT_CONTAINS(raw, "token 256 at position 123");
  EXPECT_CONTAINS(raw, "vocabulary of 256");
  EXPECT_CONTAINS(open_error(llmc_bytes({5, 50257}), kGpt2Vocab), "token 50257 at position 1");
  EXPECT_CONTAINS(open_error(llmc_bytes({5, 4000000000u}, 20240801, 7, 4), 128256),
                  "token 4000000000 at position 1");
}

TEST(TokenFile, MissingFileAndDirectoryAreRefused) {
  TempDir dir;
  EXPECT_CONTAINS(user_error_message([&] { TokenFile::open(dir.file("none.bin"), 256); }),
                  "none.bin not found");
  EXPECT_CONTAINS(user_error_message([&] { TokenFile::open(dir.path().string(), 256); }), "is a directory");
}

}  // namespace
}  // namespace dlbench::testing
