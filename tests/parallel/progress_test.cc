// The watchdog's bookkeeping and verdict, the injected-stall hook, the config comparison and comm-bench's
// arithmetic: pure functions, checked exactly.
#include "parallel/progress.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <thread>

#include "app/comm_bench.h"
#include "parallel/communicator.h"
#include "parallel/config_check.h"
#include "temp_dir.h"

namespace dlbench::parallel {
namespace {

RankProgress record(int64_t step, int64_t issued, double pending, OpKind kind = OpKind::all_reduce,
                    int64_t sequence = 0) {
  RankProgress p;
  p.step = step;
  p.issued = issued;
  p.pending_seconds = pending;
  p.pending_kind = pending < 0 ? OpKind::none : kind;
  p.pending_sequence = sequence;
  return p;
}

TEST(Progress, TracksIssuedAndTheOldestUnfinished) {
  ProgressTracker t(3, 10.0);
  EXPECT_EQ(t.snapshot().pending_seconds, -1.0);
  t.set_step(7);
  const int64_t a = t.begin(OpKind::all_reduce);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const int64_t b = t.begin(OpKind::sum);
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 2);
  RankProgress p = t.snapshot();
  EXPECT_EQ(p.step, 7);
  EXPECT_EQ(p.issued, 2);
  EXPECT_EQ(p.pending_kind, OpKind::all_reduce);
  EXPECT_EQ(p.pending_sequence, 1);
  EXPECT_GE(p.pending_seconds, 0.025);
  // The later one finishing first leaves the first pending.
  t.finish(b);
  EXPECT_EQ(t.snapshot().pending_sequence, 1);
  t.finish(a);
  EXPECT_EQ(t.snapshot().pending_seconds, -1.0);
  const int64_t c = t.begin(OpKind::all_reduce);
  t.begin(OpKind::all_reduce);
  t.finish_through(c);
  EXPECT_EQ(t.snapshot().pending_sequence, 4);
  t.finish_through(100);  // beyond what was issued: everything, nothing more
  EXPECT_EQ(t.snapshot().pending_seconds, -1.0);
  EXPECT_EQ(t.issued(), 4);
}

TEST(Progress, NoVerdictWithinTheTimeout) {
  std::vector<RankProgress> r{record(5, 12, 1.9), record(5, 11, -1), record(5, 12, 0.5)};
  EXPECT_FALSE(stall_verdict(r, 2.0).has_value());
}

TEST(Progress, NamesTheRankThatHasNotJoined) {
  std::vector<RankProgress> r{record(5, 12, 2.5, OpKind::all_reduce), record(5, 11, -1), record(5, 12, 2.4),
                              record(5, 12, 0.1)};
  EXPECT_EQ(stall_verdict(r, 2.0).value(),
            "rank 1 stalled at step 5: ranks 0, 2 waited 2.5 s for it in all_reduce_sum (collective #12; "
            "timeout 2 s)");
}

TEST(Progress, NamesSeveralStalledRanksAndTheirSteps) {
  std::vector<RankProgress> r{record(9, 40, 3.0, OpKind::barrier), record(8, 37, -1), record(9, 39, -1)};
  EXPECT_EQ(stall_verdict(r, 2.0).value(),
            "ranks 1, 2 stalled at steps 8, 9: rank 0 waited 3.0 s for them in barrier (collective #38; "
            "timeout 2 s)");
}

TEST(Progress, BlamesTheTransportWhenEveryRankEntered) {
  std::vector<RankProgress> r{record(4, 20, 6.0, OpKind::all_reduce, 19),
                              record(4, 20, 6.1, OpKind::all_reduce, 19)};
  EXPECT_EQ(
      stall_verdict(r, 5.0).value(),
      "collective #19 (all_reduce_sum) at step 4 did not finish within 5 s on ranks 0, 1 although every rank "
      "entered it (the transport stalled: network, GPU or NCCL)");
}

TEST(Progress, InjectedStallFromTheEnvironment) {
  unsetenv("DLBENCH_TEST_STALL");
  EXPECT_FALSE(injected_stall_from_environment().has_value());
  setenv("DLBENCH_TEST_STALL", "2:17:1.5", 1);
  auto s = injected_stall_from_environment();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->rank, 2);
  EXPECT_EQ(s->step, 17);
  EXPECT_EQ(s->seconds, 1.5);
  // The named rank sleeps in set_step of that step only.
  setenv("DLBENCH_TEST_STALL", "1:3:0.2", 1);
  ProgressTracker stalled(1, 10.0), other(0, 10.0);
  auto start = std::chrono::steady_clock::now();
  other.set_step(3);
  stalled.set_step(2);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 0.1);
  stalled.set_step(3);
  EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 0.2);
  setenv("DLBENCH_TEST_STALL", "one:2:3", 1);
  EXPECT_EQ(dlbench::testing::user_error_message([] { injected_stall_from_environment(); }),
            "DLBENCH_TEST_STALL=one:2:3: expected RANK:STEP:SECONDS, e.g. 1:5:30");
  unsetenv("DLBENCH_TEST_STALL");
}

// The ranks' agreement checks only all-gather: a communicator of `size` ranks, seen from `rank`, whose other
// collectives do nothing.
class GatherOnly : public Communicator {
 public:
  GatherOnly(int rank, int size)
      : Communicator(std::make_shared<ProgressTracker>(rank, 10.0)), rank_(rank), size_(size) {}
  std::string name() const override { return "canned"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(Tensor&) override {}
  void wait_all_reduces() override {}
  void broadcast(Tensor&, int) override {}
  void barrier() override {}
  double sum(double v) override { return v; }
  double max(double v) override { return v; }

 private:
  int rank_, size_;
};

// A communicator whose all_gather returns what the test says the ranks sent.
class CannedCommunicator final : public GatherOnly {
 public:
  explicit CannedCommunicator(std::vector<nlohmann::json> configs)
      : GatherOnly(0, static_cast<int>(configs.size())), configs_(std::move(configs)) {}
  std::vector<std::string> all_gather(const std::string& own) override {
    EXPECT_EQ(nlohmann::json::parse(own), strip(configs_[0]));
    std::vector<std::string> all;
    for (const auto& c : configs_) all.push_back(strip(c).dump());
    return all;
  }
  std::vector<std::string> ignored;

 private:
  nlohmann::json strip(nlohmann::json c) const {
    for (const auto& k : ignored) c.erase(k);
    return c;
  }
  std::vector<nlohmann::json> configs_;
};

TEST(ConfigCheck, SameConfigPasses) {
  nlohmann::json c = {{"model", "resnet50"}, {"batch_size", 32}, {"lr", 0.1}};
  CannedCommunicator comm({c, c, c});
  check_same_config(comm, c);
}

TEST(ConfigCheck, NamesTheFlagThatDiffers) {
  nlohmann::json c0 = {{"model", "resnet50"}, {"batch_size", 32}, {"lr", 0.1}, {"device", "cuda:0"}};
  nlohmann::json c1 = c0, c2 = c0;
  c2["batch_size"] = 64;
  c1["device"] = "cuda:1";
  CannedCommunicator comm({c0, c1, c2});
  EXPECT_EQ(
      dlbench::testing::user_error_message([&] { check_same_config(comm, c0); }),
      "the ranks were started with different settings: --device (device): rank 0 has \"cuda:0\", rank 1 has "
      "\"cuda:1\"; --batch-size (batch_size): rank 0 has 32, rank 2 has 64; start every rank with the same "
      "flags");
}

TEST(ConfigCheck, RankSpecificKeysAreLeftOut) {
  nlohmann::json c0 = {{"batch_size", 32}, {"device", "cuda:0"}};
  nlohmann::json c1 = {{"batch_size", 48}, {"device", "cuda:1"}};
  CannedCommunicator comm({c0, c1});
  comm.ignored = {"device"};
  EXPECT_EQ(
      dlbench::testing::user_error_message([&] { check_same_config(comm, c0, {"device"}); }),
      "the ranks were started with different settings: --batch-size (batch_size): rank 0 has 32, rank 1 has "
      "48; start every rank with the same flags");
}

// Ranks on hosts: each message names every differing rank's host, ranks with the same value together.
TEST(ConfigCheck, NamesTheHostsOfTheRanksThatDiffer) {
  nlohmann::json c0 = {{"batch_size", 32}, {"lr", 0.1}};
  nlohmann::json c2 = {{"batch_size", 32}, {"lr", 0.2}};
  CannedCommunicator comm({c0, c0, c2, c2});
  EXPECT_EQ(
      dlbench::testing::user_error_message([&] {
        check_same_config(comm, c0, {}, {"nodea", "nodea", "nodeb", "nodeb"});
      }),
      "the ranks were started with different settings: --lr (lr): rank 0 (host nodea) has 0.1, ranks 2, 3 "
      "(host nodeb) have 0.2; start every rank with the same flags");
}

// all_gather returns the strings the test says the ranks sent.
class CannedStrings final : public GatherOnly {
 public:
  CannedStrings(int rank, std::vector<std::string> values)
      : GatherOnly(rank, static_cast<int>(values.size())), values_(std::move(values)) {}
  std::vector<std::string> all_gather(const std::string& own) override {
    EXPECT_EQ(own, values_[static_cast<size_t>(rank())]);
    return values_;
  }

 private:
  std::vector<std::string> values_;
};

TEST(ConfigCheck, AnotherVersionOnAHostIsNamedByRankZeroAlone) {
  const std::vector<std::string> hosts = {"nodea", "nodea", "nodeb", "nodeb"};
  const std::vector<std::string> versions = {"0.9.0 (commit a)", "0.9.0 (commit a)", "0.8.0 (commit b)",
                                             "0.9.0 (commit c)"};
  CannedStrings same(1, {"0.9.0 (commit a)", "0.9.0 (commit a)"});
  check_same_version(same, "0.9.0 (commit a)", {"nodea", "nodeb"});
  CannedStrings zero(0, versions);
  EXPECT_EQ(
      dlbench::testing::user_error_message([&] { check_same_version(zero, versions[0], hosts); }),
      "the ranks run different builds of dlbench: rank 0 (host nodea): 0.9.0 (commit a); rank 2 (host "
      "nodeb): 0.8.0 (commit b); rank 3 (host nodeb): 0.9.0 (commit c); install the same dlbench on every "
      "host");
  // The other ranks stop too, silently: one line for the run.
  CannedStrings three(3, versions);
  EXPECT_EQ(dlbench::testing::user_error_message([&] { check_same_version(three, versions[3], hosts); }), "");
}

TEST(ConfigCheck, AnotherDataSetOnAHostIsNamed) {
  const std::vector<std::string> digests = {"60000 samples, labels crc32 1", "60000 samples, labels crc32 2",
                                            "60000 samples, labels crc32 2"};
  CannedStrings zero(0, digests);
  EXPECT_EQ(
      dlbench::testing::user_error_message([&] {
        check_same_data(zero, digests[0], {"nodea", "nodeb", "nodeb"});
      }),
      "the ranks load different training data: rank 0 (host nodea): 60000 samples, labels crc32 1; ranks "
      "1, 2 (host nodeb): 60000 samples, labels crc32 2; give every host the same data set");
}

TEST(ConfigCheck, DifferingKeysIncludeMissingAndNestedOnes) {
  nlohmann::json a = {{"lr", 0.1}, {"data", {{"path", "x"}, {"shards", 4}}}, {"seed", 1}};
  nlohmann::json b = {{"lr", 0.1}, {"data", {{"path", "y"}, {"shards", 4}}}, {"nesterov", true}};
  EXPECT_EQ(differing_keys(a, b), (std::vector<std::string>{"data/path", "nesterov", "seed"}));
  EXPECT_TRUE(differing_keys(a, a).empty());
}

TEST(CommBenchArithmetic, BusBandwidthAndValues) {
  EXPECT_EQ(all_reduce_bus_bandwidth(10.0, 2), 10.0);
  EXPECT_EQ(all_reduce_bus_bandwidth(10.0, 4), 15.0);
  EXPECT_EQ(all_reduce_bus_bandwidth(8.0, 8), 14.0);
  EXPECT_EQ(all_reduce_bus_bandwidth(10.0, 1), 0.0);
  for (int r = 0; r < 64; ++r) {
    for (int64_t i = 0; i < 100; ++i) {
      EXPECT_GE(comm_bench_value(r, i), -4);
      EXPECT_LE(comm_bench_value(r, i), 4);
    }
  }
  EXPECT_NE(comm_bench_value(0, 0), comm_bench_value(1, 0));  // ranks differ: a missing rank shows
}

}  // namespace
}  // namespace dlbench::parallel
