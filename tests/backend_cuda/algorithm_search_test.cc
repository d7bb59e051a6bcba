// The convolution algorithm choice over repeated timed searches (backend/cuda/algorithm_search.h), on
// made-up search results: it needs no GPU.
#include "backend/cuda/algorithm_search.h"

#include <gtest/gtest.h>

#include <vector>

namespace dlbench::cuda {
namespace {

// The fields of cuDNN's cudnnConvolution*AlgoPerf_t that the choice reads.
struct FakePerf {
  int algo;
  int mathType;
  size_t memory;
  float time;
  bool ran = true;
};

const auto kAcceptAll = [](const FakePerf& r) { return r.ran; };

TEST(AlgorithmSearch, MedianBeatsOneLuckyRound) {
  // Algorithm 1 is fastest in round 0 only (a lucky timing); algorithm 2 is faster in the median.
  const std::vector<std::vector<FakePerf>> rounds = {
      {{1, 0, 0, 0.90f}, {2, 0, 0, 1.00f}},
      {{2, 0, 0, 1.00f}, {1, 0, 0, 1.10f}},
      {{2, 0, 0, 1.01f}, {1, 0, 0, 1.12f}},
  };
  const auto best = pick_by_median(rounds, kAcceptAll);
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->algo, 2);
  EXPECT_FLOAT_EQ(best->median_ms, 1.00f);
}

TEST(AlgorithmSearch, RanksEveryCandidateOfEveryRoundByMedian) {
  // 5 is refused once: out. 6 and 7 tie at 2.0: (algo, math) order. 8 is fastest.
  const std::vector<std::vector<FakePerf>> rounds = {
      {{7, 0, 0, 2.0f}, {6, 0, 0, 2.0f}, {5, 0, 0, 0.1f}, {8, 0, 0, 1.5f}},
      {{7, 0, 0, 2.0f}, {6, 0, 0, 2.0f}, {5, 0, 0, 0.1f, false}, {8, 0, 0, 1.0f}},
      {{7, 0, 0, 2.0f}, {6, 0, 0, 2.0f}, {5, 0, 0, 0.1f}, {8, 0, 0, 1.0f}},
  };
  const std::vector<TimedChoice> ranked = rank_by_median(rounds, kAcceptAll);
  ASSERT_EQ(ranked.size(), 3u);
  EXPECT_EQ(ranked[0].algo, 8);
  EXPECT_FLOAT_EQ(ranked[0].median_ms, 1.0f);
  EXPECT_EQ(ranked[1].algo, 6);
  EXPECT_EQ(ranked[2].algo, 7);
  EXPECT_EQ(pick_by_median(rounds, kAcceptAll)->algo, 8);
}

TEST(AlgorithmSearch, MathTypeIsPartOfTheCandidate) {
  // The same algorithm under two math types is two candidates.
  const std::vector<std::vector<FakePerf>> rounds = {
      {{0, 1, 0, 2.0f}, {0, 2, 0, 1.0f}},
      {{0, 1, 0, 2.0f}, {0, 2, 0, 1.0f}},
  };
  const auto best = pick_by_median(rounds, kAcceptAll);
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->algo, 0);
  EXPECT_EQ(best->math, 2);
}

TEST(AlgorithmSearch, ACandidateRefusedInAnyRoundIsOut) {
  // Algorithm 3 is fastest but failed in round 1: algorithm 4 wins. Its workspace is the largest reported.
  const std::vector<std::vector<FakePerf>> rounds = {
      {{3, 0, 0, 0.5f}, {4, 0, 100, 1.0f}},
      {{3, 0, 0, 0.5f, false}, {4, 0, 300, 1.0f}},
      {{3, 0, 0, 0.5f}, {4, 0, 200, 1.0f}},
  };
  const auto best = pick_by_median(rounds, kAcceptAll);
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->algo, 4);
  EXPECT_EQ(best->memory, 300u);
}

TEST(AlgorithmSearch, ACandidateListedTwiceInOneRoundCountsOnce) {
  // Algorithm 9 appears twice in round 0 and not at all in round 1: it was not timed in every round.
  const std::vector<std::vector<FakePerf>> rounds = {
      {{9, 0, 0, 0.5f}, {9, 0, 0, 0.6f}, {1, 0, 0, 1.0f}},
      {{1, 0, 0, 1.0f}},
  };
  const auto best = pick_by_median(rounds, kAcceptAll);
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->algo, 1);
}

TEST(AlgorithmSearch, TheAcceptRuleIsApplied) {
  // A workspace limit of 150 bytes leaves only algorithm 6.
  const std::vector<std::vector<FakePerf>> rounds = {
      {{5, 0, 1000, 0.5f}, {6, 0, 100, 1.0f}},
      {{5, 0, 1000, 0.5f}, {6, 0, 100, 1.0f}},
  };
  const auto best = pick_by_median(rounds, [](const FakePerf& r) { return r.ran && r.memory <= 150; });
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->algo, 6);
}

TEST(AlgorithmSearch, NothingAcceptedOrNoRoundsGivesNoChoice) {
  const std::vector<std::vector<FakePerf>> refused = {{{1, 0, 0, 1.0f, false}}};
  EXPECT_FALSE(pick_by_median(refused, kAcceptAll).has_value());
  EXPECT_FALSE(pick_by_median(std::vector<std::vector<FakePerf>>{}, kAcceptAll).has_value());
}

TEST(AlgorithmSearch, TheSameResultsInAnyOrderGiveTheSameChoice) {
  // Equal medians: the choice does not depend on the order cuDNN listed them in.
  const std::vector<std::vector<FakePerf>> a = {{{7, 0, 0, 1.0f}, {8, 0, 0, 1.0f}}};
  const std::vector<std::vector<FakePerf>> b = {{{8, 0, 0, 1.0f}, {7, 0, 0, 1.0f}}};
  EXPECT_EQ(pick_by_median(a, kAcceptAll)->algo, pick_by_median(b, kAcceptAll)->algo);
}

}  // namespace
}  // namespace dlbench::cuda
