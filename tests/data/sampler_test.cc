#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "core/status.h"
#include "data/epoch_sampler.h"

namespace dlbench {
namespace {

std::vector<int64_t> iota_vector(int64_t first, int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

bool is_permutation_of_range(std::vector<int64_t> order, int64_t n) {
  std::sort(order.begin(), order.end());
  return order == iota_vector(0, n);
}

TEST(EpochSampler, ShuffledOrderIsAPermutation) {
  EpochSampler sampler(1000, 42, /*shuffle=*/true);
  const auto order = sampler.epoch_order(0);
  EXPECT_EQ(order.size(), 1000u);
  EXPECT_TRUE(is_permutation_of_range(order, 1000));
  EXPECT_NE(order, iota_vector(0, 1000));
}

TEST(EpochSampler, ReproducibleFromSeedAndDistinctAcrossEpochsAndSeeds) {
  EpochSampler a(1000, 42, true), b(1000, 42, true), other_seed(1000, 43, true);
  EXPECT_EQ(a.epoch_order(3), b.epoch_order(3));
  EXPECT_NE(a.epoch_order(0), a.epoch_order(1));
  EXPECT_NE(a.epoch_order(0), other_seed.epoch_order(0));
  EXPECT_EQ(a.epoch_order(0), a.epoch_order(0));  // no hidden state: an epoch can be replayed (resume)
}

// The order is part of what a seed means across machines and standard libraries: pin it. A change here
// changes every shuffled run; make it only on purpose.
TEST(EpochSampler, OrderIsPinned) {
  EpochSampler sampler(10, 42, true);
  EXPECT_EQ(sampler.epoch_order(0), (std::vector<int64_t>{7, 0, 9, 8, 1, 2, 3, 6, 5, 4}));
  EXPECT_EQ(sampler.epoch_order(1), (std::vector<int64_t>{9, 3, 1, 6, 2, 4, 5, 7, 0, 8}));
}

TEST(EpochSampler, WithoutShuffleIsTheIdentityEveryEpoch) {
  EpochSampler sampler(10, 42, false);
  EXPECT_EQ(sampler.epoch_order(0), iota_vector(0, 10));
  EXPECT_EQ(sampler.epoch_order(5), iota_vector(0, 10));
  EpochSampler rank1(10, 42, false, /*rank=*/1, /*world_size=*/2);
  EXPECT_EQ(rank1.epoch_order(0), iota_vector(5, 5));
}

TEST(EpochSampler, ShardsAreEqualDisjointAndCovering) {
  for (bool shuffle : {true, false}) {
    for (int64_t epoch : {0, 1}) {
      std::vector<int64_t> all;
      for (int rank = 0; rank < 4; ++rank) {
        EpochSampler sampler(1000, 7, shuffle, rank, 4);
        EXPECT_EQ(sampler.shard_size(), 250);
        const auto shard = sampler.epoch_order(epoch);
        EXPECT_EQ(shard.size(), 250u);
        all.insert(all.end(), shard.begin(), shard.end());
      }
      EXPECT_TRUE(is_permutation_of_range(all, 1000)) << "shuffle " << shuffle << " epoch " << epoch;
    }
  }
}

TEST(EpochSampler, UnevenDatasetDropsTheRemainderEqually) {
  // 1003 samples on 4 ranks: 250 each, 3 left out per epoch, different ones across epochs.
  std::vector<std::set<int64_t>> seen_per_epoch;
  for (int64_t epoch : {0, 1, 2}) {
    std::set<int64_t> seen;
    for (int rank = 0; rank < 4; ++rank) {
      EpochSampler sampler(1003, 7, true, rank, 4);
      const auto shard = sampler.epoch_order(epoch);
      EXPECT_EQ(shard.size(), 250u);
      for (int64_t s : shard) {
        EXPECT_TRUE(s >= 0 && s < 1003);
        EXPECT_TRUE(seen.insert(s).second) << "sample " << s << " on two ranks";
      }
    }
    EXPECT_EQ(seen.size(), 1000u);
    seen_per_epoch.push_back(seen);
  }
  EXPECT_FALSE(seen_per_epoch[0] == seen_per_epoch[1] && seen_per_epoch[1] == seen_per_epoch[2]);
}

TEST(EpochSampler, BatchesDropTheLastPartialBatch) {
  EpochSampler sampler(1000, 1, true);
  EXPECT_EQ(sampler.batches_per_epoch(64), 15);
  EXPECT_EQ(sampler.batches_per_epoch(1000), 1);
  EXPECT_EQ(EpochSampler(1000, 1, true, 0, 4).batches_per_epoch(64), 3);  // 250 per rank

  const auto order = sampler.epoch_order(0);
  const auto b2 = EpochSampler::batch(order, 2, 64);
  ASSERT_EQ(b2.size(), 64u);
  EXPECT_EQ(b2.front(), order[128]);
  EXPECT_EQ(b2.back(), order[191]);
  EXPECT_THROW(EpochSampler::batch(order, 15, 64), Error);  // the dropped partial batch
}

TEST(EpochSampler, BadSizesAreUserErrors) {
  EpochSampler sampler(100, 1, true);
  EXPECT_THROW(sampler.batches_per_epoch(0), UserError);
  try {
    sampler.batches_per_epoch(101);
    FAIL() << "no throw";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("batch size 101"), std::string::npos) << e.what();
  }
  EXPECT_THROW(EpochSampler(0, 1, true), UserError);
  EXPECT_THROW(EpochSampler(3, 1, true, 0, 4), UserError);
}

TEST(EvaluationBatches, VisitAllSamplesInOrderWithAPartialLastBatch) {
  EvaluationBatches batches(10, 4);
  ASSERT_EQ(batches.count(), 3);
  EXPECT_EQ(batches.indices(0), iota_vector(0, 4));
  EXPECT_EQ(batches.indices(1), iota_vector(4, 4));
  EXPECT_EQ(batches.indices(2), iota_vector(8, 2));
  EXPECT_EQ(EvaluationBatches(8, 4).count(), 2);
  EXPECT_EQ(EvaluationBatches(3, 100).indices(0), iota_vector(0, 3));
  EXPECT_EQ(EvaluationBatches(0, 4).count(), 0);
  EXPECT_THROW(EvaluationBatches(10, 0), UserError);
}

}  // namespace
}  // namespace dlbench
