// The data-parallel training check, for any way of starting the ranks: R ranks at batch B must end with
// the weights of one rank at batch B accumulating R micro-batches of the same samples (batch norm keeps
// per-rank statistics, so that — not one rank at batch R x B — is the exact equivalent), and log the same
// losses (the global batch's mean).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_util.h"
#include "mpi_cli_util.h"
#include "temp_dir.h"
#include "train/checkpoint.h"

namespace dlbench::testing {

// ||a - b|| / ||b|| over the parameters of two checkpoints.
inline double parameter_distance(const Checkpoint& a, const Checkpoint& b) {
  EXPECT_EQ(a.parameters.size(), b.parameters.size());
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < a.parameters.size() && i < b.parameters.size(); ++i) {
    const double d = double(a.parameters[i]) - double(b.parameters[i]);
    diff2 += d * d;
    ref2 += double(b.parameters[i]) * double(b.parameters[i]);
  }
  return std::sqrt(diff2 / ref2);
}

// Starts `ranks` ranks of `dlbench ARGS` (args already quoted) and returns what they did.
using RankLauncher = std::function<CommandResult(int ranks, const std::string& args, int timeout_seconds)>;

inline CommandResult launch_with_mpirun(int ranks, const std::string& args, int timeout_seconds) {
  return run_mpi(ranks, "", args, timeout_seconds);
}

// R ranks vs one rank accumulating R micro-batches: same samples, same update, up to summation order.
// `parallel_json`, when given, is where the ranks' result is kept (for the caller's own checks).
inline void expect_ranks_match_accumulation(const RankLauncher& launch, int ranks, const std::string& args,
                                            double tolerance, nlohmann::json* parallel_result = nullptr) {
  SCOPED_TRACE(std::to_string(ranks) + " ranks: " + args);
  TempDir dir;
  const std::string parallel = dir.file("parallel.ckpt"), accumulated = dir.file("accumulated.ckpt");
  const std::string common = "train --device cpu --threads 1 --lr-schedule constant " + args;
  const std::string parallel_json = dir.file("parallel.json"),
                    accumulated_json = dir.file("accumulated.json");
  auto r = launch(ranks, common + " --checkpoint " + parallel + " --json " + parallel_json, 300);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // Only rank 0 speaks, and the header says how the ranks run.
  EXPECT_EQ(count(r.out, "dlbench train |"), 1) << r.out;
  EXPECT_NE(r.out.find(std::to_string(ranks) + " ranks (mpi)"), std::string::npos) << r.out;
  auto one = run_dlbench(common + " --accumulate-steps " + std::to_string(ranks) + " --checkpoint " +
                             accumulated + " --json " + accumulated_json,
                         300);
  ASSERT_EQ(one.exit_code, 0) << one.out << one.err;
  // Each step's loss is the global batch's (the ranks' mean), as the one rank computes it, not rank 0's.
  const nlohmann::json ranks_result = nlohmann::json::parse(read_file(parallel_json));
  const auto ranks_losses = ranks_result["losses"].get<std::vector<double>>();
  const auto one_losses =
      nlohmann::json::parse(read_file(accumulated_json))["losses"].get<std::vector<double>>();
  ASSERT_EQ(ranks_losses.size(), one_losses.size());
  for (size_t i = 0; i < one_losses.size(); ++i)
    EXPECT_NEAR(ranks_losses[i], one_losses[i], 1e-5 * std::abs(one_losses[i])) << "step " << i + 1;
  Checkpoint a = load_checkpoint(parallel), b = load_checkpoint(accumulated);
  EXPECT_EQ(a.step, b.step);
  const double distance = parameter_distance(a, b);
  EXPECT_LE(distance, tolerance);
  std::printf("%d ranks vs %d micro-batches: parameters differ by %.2e (relative)\n", ranks, ranks, distance);
  if (parallel_result) *parallel_result = ranks_result;
}

}  // namespace dlbench::testing
