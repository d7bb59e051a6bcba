// Data-parallel training end to end, through the binary under mpirun on the CPU: R ranks at batch B must
// end with the weights of one rank at batch B accumulating R micro-batches of the same samples (batch norm
// keeps per-rank statistics, so that — not one rank at batch R x B — is the exact equivalent); a stalled
// rank and ranks started with different flags stop every rank with a message. Every run is under `timeout`.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "parallel/mpi_runtime.h"
#include "mpi_cli_util.h"
#include "temp_dir.h"
#include "train/checkpoint.h"

namespace dlbench::parallel {
namespace {

using dlbench::testing::count;
using dlbench::testing::run_dlbench;
using dlbench::testing::run_mpi;

class DataParallelTrain : public dlbench::testing::MpirunTest {};

// ||a - b|| / ||b|| over the parameters of two checkpoints.
double parameter_distance(const Checkpoint& a, const Checkpoint& b) {
  EXPECT_EQ(a.parameters.size(), b.parameters.size());
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < a.parameters.size() && i < b.parameters.size(); ++i) {
    const double d = double(a.parameters[i]) - double(b.parameters[i]);
    diff2 += d * d;
    ref2 += double(b.parameters[i]) * double(b.parameters[i]);
  }
  return std::sqrt(diff2 / ref2);
}

// R ranks vs one rank accumulating R micro-batches: same samples, same update, up to summation order.
void expect_ranks_match_accumulation(int ranks, const std::string& args, double tolerance) {
  SCOPED_TRACE(std::to_string(ranks) + " ranks: " + args);
  dlbench::testing::TempDir dir;
  const std::string parallel = dir.file("parallel.ckpt"), accumulated = dir.file("accumulated.ckpt");
  const std::string common = "train --device cpu --threads 1 --lr-schedule constant " + args;
  const std::string parallel_json = dir.file("parallel.json"),
                    accumulated_json = dir.file("accumulated.json");
  auto r = run_mpi(ranks, "", common + " --checkpoint " + parallel + " --json " + parallel_json, 300);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // Only rank 0 speaks, and the header says how the ranks run.
  EXPECT_EQ(count(r.out, "dlbench train |"), 1) << r.out;
  EXPECT_NE(r.out.find(std::to_string(ranks) + " ranks (mpi)"), std::string::npos) << r.out;
  auto one = run_dlbench(common + " --accumulate-steps " + std::to_string(ranks) + " --checkpoint " +
                             accumulated + " --json " + accumulated_json,
                         300);
  ASSERT_EQ(one.exit_code, 0) << one.out << one.err;
  // Each step's loss is the global batch's (the ranks' mean), as the one rank computes it, not rank 0's.
  const auto losses_of = [](const std::string& path) {
    return nlohmann::json::parse(dlbench::testing::read_file(path))["losses"].get<std::vector<double>>();
  };
  const std::vector<double> ranks_losses = losses_of(parallel_json), one_losses = losses_of(accumulated_json);
  ASSERT_EQ(ranks_losses.size(), one_losses.size());
  for (size_t i = 0; i < one_losses.size(); ++i)
    EXPECT_NEAR(ranks_losses[i], one_losses[i], 1e-5 * std::abs(one_losses[i])) << "step " << i + 1;
  Checkpoint a = load_checkpoint(parallel), b = load_checkpoint(accumulated);
  EXPECT_EQ(a.step, b.step);
  const double distance = parameter_distance(a, b);
  EXPECT_LE(distance, tolerance);
  std::printf("%d ranks vs %d micro-batches: parameters differ by %.2e (relative)\n", ranks, ranks, distance);
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

// A rank that stops answering (a test-only stall) is named, with its step, by every rank; all exit non-zero.
TEST_F(DataParallelTrain, StalledRankStopsTraining) {
  auto r =
      run_mpi(2, "-x DLBENCH_TEST_STALL=1:2:60",
              "train --device cpu --threads 1 --model resnet20 --data synthetic --batch-size 8 --steps 4 "
              "--timeout 3",
              90);
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.exit_code, 124) << "timed out instead of being stopped by the watchdog: " << r.err;
  EXPECT_GE(count(r.err, "rank 1 stalled at step 2"), 1) << r.err;
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
