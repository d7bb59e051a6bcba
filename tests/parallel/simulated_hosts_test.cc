// Ranks on two hosts, as MPI sees them: mpirun with a host list of two names (nodea, nodeb; two slots
// each) and a launch agent of the tests' own that starts each host's daemon on this machine under that
// host's name (tests/parallel/simulated_hosts), every byte between ranks over TCP on the loopback. The
// ranks must train as one rank accumulating their micro-batches, sum exactly, name each other's hosts, and
// refuse to train where the second host runs another flag, another dlbench or another copy of the data.
// Each test checks the hosts the ranks report, so a launch fallen back to one host fails. Every run is
// under `timeout`; a machine that cannot give a process a host name of its own skips, saying why.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "accumulation_check.h"
#include "mpi_cli_util.h"

namespace dlbench::parallel {
namespace {

using dlbench::testing::CommandResult;
using dlbench::testing::count;
using dlbench::testing::SimulatedHosts;

class OnSimulatedHosts : public dlbench::testing::MpirunTest {
 protected:
  void SetUp() override {
    MpirunTest::SetUp();
    if (IsSkipped()) return;
    if (const std::string reason = SimulatedHosts::unavailable(); !reason.empty())
      GTEST_SKIP() << "cannot simulate two hosts on this machine: " << reason;
  }
  // Ranks 0, 1 on nodea run `dlbench COMMON FIRST`, ranks 2, 3 on nodeb `dlbench COMMON SECOND`.
  CommandResult run_two_programs(const std::string& common, const std::string& first,
                                 const std::string& second, int timeout_seconds = 60) {
    return hosts_.run("-np 2 -H nodea:2 " + std::string(DLBENCH_BINARY) + " " + common + " " + first +
                          " : -np 2 -H nodeb:2",
                      common + " " + second, timeout_seconds);
  }
  SimulatedHosts hosts_;
};

// 2 hosts x 2 ranks sum (g0 + g1) + (g2 + g3) over TCP where one rank accumulating 4 micro-batches adds
// them in turn: one step agrees to rounding, as on one host.
TEST_F(OnSimulatedHosts, TrainingMatchesGradientAccumulation) {
  nlohmann::json result;
  dlbench::testing::expect_ranks_match_accumulation(
      [&](int ranks, const std::string& args, int timeout) {
        return hosts_.run("-np " + std::to_string(ranks), args, timeout);
      },
      4, "--model resnet20 --data fashion-mnist --batch-size 16 --lr 0.1 --steps 1 --eval-images 64", 1e-6,
      &result);
  ASSERT_TRUE(result.contains("system")) << result.dump();
  dlbench::testing::expect_two_simulated_hosts(result["system"]["hosts"]);
  EXPECT_EQ(result["ranks"], 4);
}

TEST_F(OnSimulatedHosts, CommBenchChecksEverySum) {
  const std::string json = hosts_.state() + "/comm.json";
  const CommandResult r = hosts_.run(
      "-np 4",
      "comm-bench --device cpu --min-bytes 4 --max-bytes 4194304 --iters 2 --warmup 1 --json " + json, 60);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("ranks on 2 hosts: nodea (ranks 0, 1), nodeb (ranks 2, 3)"), std::string::npos)
      << r.out;
  const nlohmann::json result = nlohmann::json::parse(dlbench::testing::read_file(json));
  EXPECT_EQ(result["ranks"], 4);
  EXPECT_EQ(result["correct"], true);
  ASSERT_EQ(result["rows"].size(), 21u);  // 4 B .. 4 MiB
  for (const auto& row : result["rows"]) EXPECT_EQ(row["wrong_elements"], 0) << row.dump();
  EXPECT_EQ(count(r.out, "  ok"), 21) << r.out;
  dlbench::testing::expect_two_simulated_hosts(result["system"]["hosts"]);
}

const char* const kShortRun =
    "train --device cpu --threads 1 --model resnet20 --data synthetic --batch-size 8 --steps 2";

// One line, printed before any step, names the second host's ranks and what differs.
void expect_stopped_before_training(const CommandResult& r, const std::string& line_part) {
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(count(r.err, "dlbench: error:"), 1) << "one line for the run, by rank 0:\n" << r.err;
  EXPECT_NE(r.err.find(line_part), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("step 1/2"), std::string::npos) << "trained anyway:\n" << r.out;
}

TEST_F(OnSimulatedHosts, AnotherFlagOnTheSecondHostIsNamed) {
  const CommandResult r = run_two_programs(kShortRun, "--lr 0.1", "--lr 0.2");
  expect_stopped_before_training(
      r,
      "the ranks were started with different settings: --lr (lr): rank 0 (host "
      "nodea) has 0.1, ranks 2, 3 (host nodeb) have 0.2; start every rank with the "
      "same flags");
}

TEST_F(OnSimulatedHosts, AnotherVersionOnTheSecondHostIsNamed) {
  const CommandResult r = run_two_programs(kShortRun, "", "--test-claim-version 0.0.1-old");
  expect_stopped_before_training(r, "the ranks run different builds of dlbench: rank 0 (host nodea): ");
  EXPECT_NE(r.err.find("; ranks 2, 3 (host nodeb): 0.0.1-old; install the same dlbench on every host"),
            std::string::npos)
      << r.err;
}

// Each host has its own copy of the data at the same path; nodeb's has one training label changed.
TEST_F(OnSimulatedHosts, AnotherDataSetOnTheSecondHostIsNamed) {
  const std::string original = "/usr/share/datasets/fashion-mnist", data = hosts_.data(),
                    other = hosts_.state() + "/nodeb.data";
  const std::string labels = "train-labels-idx1-ubyte";
  const CommandResult made = dlbench::testing::run_shell(
      "sh -c 'set -e; mkdir -p " + data + " " + other + "; for f in " + original + "/*; do ln -s $f " + data +
          "/; ln -s $f " + other + "/; done; rm " + other + "/" + labels + ".gz; zcat " + original + "/" +
          labels + ".gz > " + other + "/" + labels + "; b=$(od -An -tu1 -j 8 -N 1 " + other + "/" + labels +
          "); printf \"\\\\$(printf %o $(( (b + 1) % 10 )))\" | dd of=" + other + "/" + labels +
          " bs=1 seek=8 conv=notrunc 2>/dev/null; gzip " + other + "/" + labels + "'",
      30);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const CommandResult r = hosts_.run(
      "-np 4", "train --device cpu --threads 1 --model resnet20 --data " + data + " --batch-size 8 --steps 2",
      60);
  expect_stopped_before_training(
      r,
      "the ranks load different training data: rank 0 (host nodea): 60000 samples of "
      "1x28x28, 10 classes, labels crc32 ");
  EXPECT_NE(r.err.find("; ranks 2, 3 (host nodeb): 60000 samples of 1x28x28, 10 classes, labels crc32 "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("; give every host the same data set"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace dlbench::parallel
