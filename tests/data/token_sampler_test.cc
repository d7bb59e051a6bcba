#include "data/token_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "data/synthetic_tokens.h"
#include "temp_dir.h"

namespace dlbench::testing {
namespace {

// 1000 tokens, windows of 16 + 1: 62 windows (62 * 16 + 1 = 993 tokens), 7 tokens of slack.
const SyntheticTokens kData(1000, 256, 1);
constexpr int64_t kSeqLen = 16;

std::vector<int64_t> union_of_ranks(int world, int64_t epoch, uint64_t seed = 42) {
  std::vector<int64_t> all;
  for (int r = 0; r < world; ++r) {
    const TokenWindowSampler sampler(kData, kSeqLen, seed, true, r, world);
    const std::vector<int64_t> starts = sampler.epoch_starts(epoch);
    EXPECT_EQ(static_cast<int64_t>(starts.size()), sampler.windows_per_rank());
    all.insert(all.end(), starts.begin(), starts.end());
  }
  return all;
}

TEST(TokenSampler, EveryWindowOncePerEpochOverAllRanks) {
  const TokenWindowSampler one(kData, kSeqLen, 42, true);
  EXPECT_EQ(one.windows(), 62);
  EXPECT_EQ(one.slack(), 7);
  for (int64_t epoch : {0, 1, 5}) {
    const int64_t offset = one.offset(epoch);
    std::vector<int64_t> all = union_of_ranks(2, epoch);  // 62 = 2 * 31: none left over
    std::sort(all.begin(), all.end());
    ASSERT_EQ(all.size(), 62u);
    for (int64_t k = 0; k < 62; ++k) EXPECT_EQ(all[static_cast<size_t>(k)], offset + k * kSeqLen);
    EXPECT_LE(all.back() + kSeqLen + 1, kData.size());  // the last window fits
  }
}

TEST(TokenSampler, RanksAreDisjointWithEqualShares) {
  for (int world : {3, 4, 8}) {
    const std::vector<int64_t> all = union_of_ranks(world, 2);
    const std::set<int64_t> distinct(all.begin(), all.end());
    EXPECT_EQ(distinct.size(), all.size()) << world << " ranks";
    EXPECT_EQ(static_cast<int64_t>(all.size()), (62 / world) * world);  // 62 % world windows skipped
  }
}

TEST(TokenSampler, DeterministicForASeedAndDifferentAcrossEpochs) {
  const TokenWindowSampler a(kData, kSeqLen, 42, true, 1, 2), b(kData, kSeqLen, 42, true, 1, 2);
  const TokenWindowSampler other(kData, kSeqLen, 43, true, 1, 2);
  EXPECT_EQ(a.epoch_starts(3), b.epoch_starts(3));
  EXPECT_EQ(a.epoch_starts(3), a.epoch_starts(3));  // no hidden state: resume at any (epoch, step)
  EXPECT_NE(a.epoch_starts(0), a.epoch_starts(1));
  EXPECT_NE(a.epoch_starts(0), other.epoch_starts(0));
}

// The offset moves over the slack, so that over epochs every token is used, the tail ones too.
TEST(TokenSampler, OffsetsCoverTheSlackSoEveryTokenIsSeenOverEpochs) {
  const TokenWindowSampler sampler(kData, kSeqLen, 42, true);
  std::set<int64_t> offsets;
  std::vector<bool> seen(static_cast<size_t>(kData.size()), false);
  for (int64_t epoch = 0; epoch < 64; ++epoch) {
    const int64_t offset = sampler.offset(epoch);
    ASSERT_GE(offset, 0);
    ASSERT_LE(offset, sampler.slack());
    offsets.insert(offset);
    for (int64_t s : sampler.epoch_starts(epoch))
      for (int64_t t = s; t <= s + kSeqLen; ++t) seen[static_cast<size_t>(t)] = true;
  }
  EXPECT_EQ(static_cast<int64_t>(offsets.size()), sampler.slack() + 1);
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](bool b) { return b; }));
}

TEST(TokenSampler, WithoutShuffleTheWindowsInOrderFromZero) {
  const TokenWindowSampler sampler(kData, kSeqLen, 42, false, 1, 2);
  std::vector<int64_t> expected;
  for (int64_t k = 31; k < 62; ++k) expected.push_back(k * kSeqLen);
  EXPECT_EQ(sampler.epoch_starts(0), expected);
  EXPECT_EQ(sampler.epoch_starts(4), expected);
}

TEST(TokenSampler, BatchesPerEpochAndTooFewWindowsForTheRanks) {
  const TokenWindowSampler sampler(kData, kSeqLen, 42, true, 0, 2);
  EXPECT_EQ(sampler.batches_per_epoch(8), 3);  // 31 windows per rank
  const SyntheticTokens small(40, 256, 1);     // 2 windows of 16 + 1
  EXPECT_CONTAINS(user_error_message([&] { TokenWindowSampler(small, kSeqLen, 42, true, 0, 4); }),
                  "2 windows of 16 + 1, fewer than the 4 ranks");
  EXPECT_CONTAINS(user_error_message([&] { TokenWindowSampler(small, 40, 42, true); }),
                  "longer than the data");
}

}  // namespace
}  // namespace dlbench::testing
