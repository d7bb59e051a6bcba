#include "data/token_dataset.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/synthetic_tokens.h"
#include "data/token_test_util.h"
#include "temp_dir.h"

namespace dlbench::testing {
namespace {

// Tokens 0, 1, 2, ... (mod 256) split over files of the given sizes: position p holds p % 256.
TokenDataset counting_dataset(const std::vector<int64_t>& sizes) {
  std::vector<TokenFile> files;
  int64_t next = 0;
  for (int64_t size : sizes) {
    std::vector<uint32_t> tokens(static_cast<size_t>(size));
    for (uint32_t& t : tokens) t = static_cast<uint32_t>(next++ % 256);
    files.push_back(
        TokenFile::from_bytes("part" + std::to_string(files.size()), to_vector(nanogpt_bytes(tokens)), 256));
  }
  return TokenDataset("counting", std::move(files), 256);
}

struct Batch {
  std::vector<int32_t> inputs, targets;
};

Batch gather(const TokenSource& source, const std::vector<int64_t>& starts, int64_t seq_len) {
  const auto n = static_cast<int64_t>(starts.size());
  Batch b{std::vector<int32_t>(static_cast<size_t>(n * seq_len)),
          std::vector<int32_t>(static_cast<size_t>(n * seq_len))};
  Tensor inputs(b.inputs.data(), {n, seq_len}, DType::i32),
      targets(b.targets.data(), {n, seq_len}, DType::i32);
  source.gather(starts, inputs, targets);
  return b;
}

TEST(TokenDataset, FilesReadAsOneSequence) {
  const TokenDataset data = counting_dataset({5, 3, 700});
  EXPECT_EQ(data.size(), 708);
  std::vector<int32_t> all(708);
  data.read(0, all);
  for (int64_t p = 0; p < 708; ++p) EXPECT_EQ(all[static_cast<size_t>(p)], p % 256) << p;
  std::vector<int32_t> across(6);  // from the first file through the second into the third
  data.read(3, across);
  EXPECT_EQ(across, (std::vector<int32_t>{3, 4, 5, 6, 7, 8}));
}

TEST(TokenDataset, WindowsAreNonOverlappingAndNeedOneTokenMore) {
  const TokenDataset data = counting_dataset({100});
  EXPECT_EQ(data.windows(10), 9);  // 9 * 10 + 1 = 91 tokens used, 9 over
  EXPECT_EQ(data.windows(99), 1);  // exactly 100 tokens
  EXPECT_EQ(data.windows(1), 99);
}

TEST(TokenDataset, WindowLongerThanTheDataIsRefused) {
  const TokenDataset data = counting_dataset({100});
  const std::string message = user_error_message([&] { data.windows(100); });
  EXPECT_CONTAINS(message, "counting");
  EXPECT_CONTAINS(message, "a window of 100 + 1 tokens is longer than the data's 100 tokens");
  EXPECT_CONTAINS(user_error_message([&] { data.windows(0); }), "at least 1");
}

TEST(TokenDataset, TargetsAreTheInputsShiftedByOne) {
  const TokenDataset data = counting_dataset({7, 50, 300});  // windows cross both file ends
  const std::vector<int64_t> starts = {0, 4, 55, 300};
  const int64_t seq_len = 8;
  const Batch b = gather(data, starts, seq_len);
  for (size_t i = 0; i < starts.size(); ++i) {
    for (int64_t t = 0; t < seq_len; ++t) {
      const size_t at = i * seq_len + static_cast<size_t>(t);
      EXPECT_EQ(b.inputs[at], (starts[i] + t) % 256) << "window " << i << " position " << t;
      EXPECT_EQ(b.targets[at], (starts[i] + t + 1) % 256) << "window " << i << " position " << t;
    }
  }
}

TEST(TokenDataset, FindsTrainAndValBinOfEitherFormat) {
  TempDir dir;
  write_file(dir.file("train.bin"), nanogpt_bytes(counting_tokens(64, 256)));
  write_file(dir.file("val.bin"), llmc_bytes(counting_tokens(16, 256)));
  write_file(dir.file("meta.pkl"), "not tokens");
  const TokenData data = open_token_data(dir.path().string(), 256);
  EXPECT_EQ(data.train.size(), 64);
  EXPECT_EQ(data.train.files()[0].format(), TokenFileFormat::raw_uint16);
  ASSERT_TRUE(data.val.has_value());
  EXPECT_EQ(data.val->size(), 16);
  EXPECT_EQ(data.val->files()[0].format(), TokenFileFormat::llmc);
}

TEST(TokenDataset, FindsLlmcShardsInNameOrder) {
  TempDir dir;
  write_file(dir.file("fineweb_train_000002.bin"), llmc_bytes({2, 2}));
  write_file(dir.file("fineweb_train_000001.bin"), llmc_bytes({1}));
  write_file(dir.file("fineweb_val_000000.bin"), llmc_bytes({9, 9, 9}));
  const TokenFiles files = find_token_files(dir.path().string());
  EXPECT_EQ(files.format, TokenFileFormat::llmc);
  EXPECT_EQ(files.train, (std::vector<std::string>{dir.file("fineweb_train_000001.bin"),
                                                   dir.file("fineweb_train_000002.bin")}));
  EXPECT_EQ(files.val, (std::vector<std::string>{dir.file("fineweb_val_000000.bin")}));
  const TokenData data = open_token_data(dir.path().string(), 50257);
  std::vector<int32_t> train(3);
  data.train.read(0, train);
  EXPECT_EQ(train, (std::vector<int32_t>{1, 2, 2}));
  EXPECT_CONTAINS(data.train.name(), "2 train shards");
}

TEST(TokenDataset, FindsTinyShakespeareStyleNamesAndNoVal) {
  TempDir dir;
  write_file(dir.file("tiny_shakespeare_train.bin"), llmc_bytes({1, 2, 3}));
  const TokenData data = open_token_data(dir.path().string(), 50257);
  EXPECT_EQ(data.train.size(), 3);
  EXPECT_FALSE(data.val.has_value());
}

TEST(TokenDataset, ResolverRefusesMissingEmptyAndAmbiguousDirectories) {
  TempDir dir;
  EXPECT_CONTAINS(user_error_message([&] { find_token_files(dir.file("none")); }), "no such directory");
  EXPECT_CONTAINS(user_error_message([&] { find_token_files(dir.path().string()); }), "no training tokens");
  write_file(dir.file("val.bin"), nanogpt_bytes({1}));
  EXPECT_CONTAINS(user_error_message([&] { find_token_files(dir.path().string()); }), "no training tokens");
  write_file(dir.file("train.bin"), nanogpt_bytes({1}));
  write_file(dir.file("web_train_000001.bin"), llmc_bytes({1}));
  EXPECT_CONTAINS(user_error_message([&] { find_token_files(dir.path().string()); }), "holds both");
}

// A shard (which must carry llm.c's header) with raw tokens: the wrong magic, named by the file.
TEST(TokenDataset, ShardWithoutHeaderIsRefusedNamingIt) {
  TempDir dir;
  write_file(dir.file("web_train_000001.bin"), nanogpt_bytes(counting_tokens(600, 256)));
  const std::string message = user_error_message([&] { open_token_data(dir.path().string(), 256); });
  EXPECT_CONTAINS(message, "web_train_000001.bin: wrong magic number");
}

TEST(SyntheticTokens, DeterministicForASeedAndWithinTheVocabulary) {
  const SyntheticTokens a(10000, 50257, 7), b(10000, 50257, 7), c(10000, 50257, 8);
  std::vector<int32_t> ta(10000), tb(10000), tc(10000);
  a.read(0, ta);
  b.read(0, tb);
  c.read(0, tc);
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
  int32_t max = 0;
  for (int32_t t : ta) {
    ASSERT_GE(t, 0);
    max = std::max(max, t);
  }
  EXPECT_LT(max, 50257);
  EXPECT_GT(max, 50000);  // the whole range is drawn
  const Batch batch = gather(a, {0, 100}, 16);
  EXPECT_EQ(batch.inputs[1], batch.targets[0]);
  EXPECT_CONTAINS(user_error_message([] { SyntheticTokens(1, 256, 0); }), "at least 2");
  EXPECT_CONTAINS(user_error_message([] { SyntheticTokens(100, 0, 0); }), "vocabulary of 0");
}

}  // namespace
}  // namespace dlbench::testing
