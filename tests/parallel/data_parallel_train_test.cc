// Data-parallel training end to end, through the binary under mpirun on the CPU: R ranks at batch B must
// end with the weights of one rank at batch B accumulating R micro-batches of the same samples (batch norm
// keeps per-rank statistics, so that — not one rank at batch R x B — is the exact equivalent); a stalled
// rank and ranks started with different flags stop every rank with a message. Every run is under `timeout`.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "accumulation_check.h"
#include "mpi_cli_util.h"
#include "parallel/mpi_runtime.h"

namespace dlbench::parallel {
namespace {

using dlbench::testing::count;
using dlbench::testing::run_mpi;

class DataParallelTrain : public dlbench::testing::MpirunTest {};

void expect_ranks_match_accumulation(int ranks, const std::string& args, double tolerance) {
  dlbench::testing::expect_ranks_match_accumulation(dlbench::testing::launch_with_mpirun, ranks, args,
                                                    tolerance);
}

// Two ranks add two gradients in the same order as two micro-batches do: equal to the last bit, over three
// steps. Four ranks sum (g0 + g1) + (g2 + g3) where accumulation adds g0 + g1 + g2 + g3 in turn: one step
// agrees to rounding. (Over several steps such last-bit differences grow, as they do between any two
// summation orders: a flipped ReLU mask moves a batch-norm gradient by percents, see
// tests/gpu_model/resnet50_step_test.cc.)
TEST_F(DataParallelTrain, Resnet20OnFashionMnistMatchesGradientAccumulation) {
  const std::string args = "--model resnet20 --data fashion-mnist --batch-size 16 --lr 0.1";
  expect_ranks_match_accumulation(2, args + " --steps 3", 0.0);
  expect_ranks_match_accumulation(4, args + " --steps 1", 1e-6);
}

TEST_F(DataParallelTrain, Resnet50SyntheticStepMatchesGradientAccumulation) {
  const std::string args = "--model resnet50 --data synthetic --batch-size 2 --steps 1 --lr 0.1";
  expect_ranks_match_accumulation(2, args, 1e-6);
  expect_ranks_match_accumulation(4, args, 1e-6);
}

// The GPT family through the same communicators and gradient buckets: AdamW with the clipping norm taken
// over the summed gradient, on synthetic tokens and on windows of a real text (each rank its share of an
// epoch's windows, as the one rank's micro-batches take them).
TEST_F(DataParallelTrain, GptMiniMatchesGradientAccumulation) {
  const std::string args = "--model gpt-mini --batch-size 4 --seq-len 32 --steps 3";
  expect_ranks_match_accumulation(2, args + " --data synthetic", 1e-6);
  dlbench::testing::TempDir dir;
  const std::string tokens = dir.file("gpl");
  ASSERT_EQ(dlbench::testing::run_dlbench("tokenize /usr/share/common-licenses/GPL-3 -o " + tokens).exit_code,
            0);
  expect_ranks_match_accumulation(2, args + " --data " + tokens, 1e-6);
}

// A rank that stops answering (a test-only stall) is named, with its step, by every rank; all exit non-zero.
TEST_F(DataParallelTrain, StalledRankStopsTraining) {
  auto r =
      run_mpi(2, "-x DLBENCH_TEST_STALL=1:2:60",
              "train --device cpu --threads 1 --model resnet20 --data synthetic --batch-size 8 --steps 4 "
              "--timeout 3",
              90);
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.exit_code, 124) << "timed out instead of being stopped by the watchdog: " << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(rank 1 \(host [^)]+\) stalled at step 2)"))) << r.err;
}

// Ranks started with different flags stop before training, naming the flag.
TEST_F(DataParallelTrain, DifferentFlagsOnTwoRanksAreNamed) {
  const std::string common =
      "train --device cpu --threads 1 --model resnet20 --data synthetic --batch-size 8 --steps 2";
  auto r = run_mpi(
      1, "", common + " --lr 0.1 : -np 1 " + std::string(DLBENCH_BINARY) + " " + common + " --lr 0.2", 90);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("--lr"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("step 2/2"), std::string::npos) << "trained anyway:\n" << r.out;
}

}  // namespace
}  // namespace dlbench::parallel
