// `dlbench comm-bench` end to end, through the binary: under mpirun on the CPU (results checked, the
// table printed once, the JSON file), its bad input, and a stalled rank stopping every rank with the
// message naming it. Every run is under `timeout`, so nothing here can hang CI.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <regex>

#include "cli_util.h"
#include "mpi_cli_util.h"
#include "parallel/mpi_runtime.h"
#include "temp_dir.h"

namespace dlbench::parallel {
namespace {

using dlbench::testing::CommandResult;
using dlbench::testing::count;
using dlbench::testing::read_text;
using dlbench::testing::run_dlbench;
using dlbench::testing::run_mpi;

class CommBenchCli : public dlbench::testing::MpirunTest {};

TEST_F(CommBenchCli, TwoCpuRanksUnderMpirun) {
  dlbench::testing::TempDir dir;
  const std::string json = dir.file("comm.json");
  auto r = run_mpi(
      2, "", "comm-bench --device cpu --min-bytes 4 --max-bytes 262144 --iters 3 --warmup 1 --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(count(r.out, "comm-bench: all_reduce_sum, 2 rank(s), mpi on cpu (mpi), f32"), 1)
      << r.out;                                    // rank 0 only
  EXPECT_EQ(count(r.out, "  ok\n"), 17) << r.out;  // 4 B .. 256 KiB
  EXPECT_EQ(count(r.out, "WRONG"), 0);
  const auto j = nlohmann::json::parse(read_text(json));
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_EQ(j["launcher"], "mpi");
  EXPECT_EQ(j["communicator"], "mpi");
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["correct"], true);
  EXPECT_TRUE(j["system"].contains("cpu"));
  ASSERT_EQ(j["rows"].size(), 17u);
  int64_t bytes = 4;
  for (const auto& row : j["rows"]) {
    EXPECT_EQ(row["bytes"], bytes);
    EXPECT_EQ(row["elements"], bytes / 4);
    EXPECT_EQ(row["correct"], true);
    EXPECT_EQ(row["wrong_elements"], 0);
    EXPECT_GT(row["time_us"].get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(row["algbw_gbps"].get<double>(), bytes / (row["time_us"].get<double>() * 1e-6) / 1e9);
    EXPECT_DOUBLE_EQ(row["busbw_gbps"].get<double>(), row["algbw_gbps"].get<double>());  // 2 (n-1)/n = 1
    bytes *= 2;
  }
}

TEST_F(CommBenchCli, FourCpuRanksSumOddSizesExactly) {
  // 12 bytes = 3 floats, then 6, 12, ...: odd element counts; busbw factor 1.5.
  dlbench::testing::TempDir dir;
  const std::string json = dir.file("comm.json");
  auto r = run_mpi(4, "", "comm-bench --min-bytes 12 --max-bytes 49152 --iters 2 --warmup 0 --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto j = nlohmann::json::parse(read_text(json));
  EXPECT_EQ(j["ranks"], 4);
  ASSERT_EQ(j["rows"].size(), 13u);
  EXPECT_EQ(j["rows"][0]["elements"], 3);
  for (const auto& row : j["rows"]) {
    EXPECT_EQ(row["correct"], true);
    EXPECT_DOUBLE_EQ(row["busbw_gbps"].get<double>(), 1.5 * row["algbw_gbps"].get<double>());
  }
}

void expect_stall_stops_every_rank(int ranks, int stalled, int step) {
  const auto start = std::chrono::steady_clock::now();
  auto r = run_mpi(ranks, fmt::format("-x DLBENCH_TEST_STALL={}:{}:60", stalled, step),
                   "comm-bench --max-bytes 64 --iters 10 --warmup 0 --timeout 2", 90);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.exit_code, 124) << "timed out instead of being stopped by the watchdog: " << r.err;
  // Every rank prints the same verdict, naming the stalled rank and its step.
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  const std::string verdict = fmt::format("rank {} (host {}) stalled at step {}: ", stalled, host, step);
  for (int rank = 0; rank < ranks; ++rank) {
    EXPECT_EQ(count(r.err, fmt::format("dlbench: error: (rank {} on {}) {}", rank, host, verdict)), 1)
        << "rank " << rank << ":\n"
        << r.err;
  }
  // Detected after the 2 s timeout, long before the 60 s sleep ends.
  EXPECT_LT(seconds, 25.0) << r.err;
}

TEST_F(CommBenchCli, StalledRankStopsEveryRankWithItsNameAndStep) {
  expect_stall_stops_every_rank(2, 1, 5);
  expect_stall_stops_every_rank(4, 2, 9);
}

TEST_F(CommBenchCli, BadInputIsOneLine) {
  auto r = run_dlbench("comm-bench --launcher mpi", 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "dlbench: error: --launcher mpi: this process was not started by mpirun; run mpirun -np N "
            "dlbench ...\n");
  r = run_dlbench("comm-bench --dtype f16", 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "dlbench: error: --dtype f16 on the CPU: CPU ranks sum f32 (use --device cuda for f16/bf16)\n");
  r = run_dlbench("comm-bench --max-bytes 4 --min-bytes 8", 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "dlbench: error: --max-bytes 4 is below --min-bytes 8\n");
  r = run_dlbench("comm-bench --gpus 2", 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "dlbench: error: --gpus 2 needs --device cuda; CPU ranks run one per process: mpirun -np 2 "
            "dlbench ...\n");
  // Under mpirun, every rank fails the same way and the job ends promptly.
  r = run_mpi(2, "", "comm-bench --dtype bf16", 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(count(r.err, "dlbench: error: --dtype bf16 on the CPU"), 2) << r.err;
}

}  // namespace
}  // namespace dlbench::parallel
