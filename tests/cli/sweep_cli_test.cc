// `dlbench sweep`: points appended as JSON lines, a restarted sweep runs only the missing points, a failed
// point is recorded with its error while the others go on, malformed lines are named and skipped.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.h"
#include "temp_dir.h"

namespace dlbench::testing {
namespace {

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(read_text(path));
  for (std::string line; std::getline(in, line);)
    if (auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false); !j.is_discarded())
      lines.push_back(j);
  return lines;
}

const std::string kSweep =
    "sweep --device cpu --models resnet20 --precisions fp32 --steps 2 --warmup-steps 1 --results ";

TEST(SweepCli, RunsEveryPointOnceAndResumesWhereItStopped) {
  const auto dir = temp_dir("sweep");
  const std::string results = (dir / "points.jsonl").string();
  // A point of this grid already done, and a line that is not JSON, as an interrupted sweep may leave.
  {
    std::ofstream out(results);
    out << R"({"sweep_point": {"model": "resnet20", "precision": "fp32", "gpus": 1, "batch_size": 8, "launcher": "threads"}, "status": "ok"})"
        << "\n{not json\n";
  }
  CommandResult r = run_dlbench(kSweep + results + " --batch-sizes 8,16");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("1 points to run, 1 already"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("line 2: not a JSON object"), std::string::npos) << r.err;
  std::vector<nlohmann::json> lines = read_lines(results);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["sweep_point"]["batch_size"], 16);
  EXPECT_EQ(lines[1]["status"], "ok");
  EXPECT_GT(lines[1]["result"]["images_per_second"].get<double>(), 0);

  // Started again: nothing left to do.
  r = run_dlbench(kSweep + results + " --batch-sizes 8,16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("0 points to run, 2 already"), std::string::npos) << r.out;
  EXPECT_EQ(read_lines(results).size(), 2u);

  // The report of that file: the measured point in the tables, the malformed line named.
  r = run_dlbench("report " + results + " -o " + (dir / "report").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("line 2: not a JSON object"), std::string::npos) << r.err;
  const std::string markdown = read_text((dir / "report" / "report.md").string());
  EXPECT_NE(markdown.find("## resnet20: throughput"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("| dlbench | resnet20 | fp32 | 1 | 16 |"), std::string::npos) << markdown;
  std::filesystem::remove_all(dir);
}

TEST(SweepCli, TheAlgorithmCacheIsGivenToEveryPoint) {
  const auto dir = temp_dir("sweep_algorithms");
  const std::string results = (dir / "points.jsonl").string();
  const std::string cache = (dir / "algorithms.json").string();
  CommandResult r = run_dlbench(kSweep + results + " --batch-sizes 8,16 --algorithm-cache " + cache);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<nlohmann::json> lines = read_lines(results);
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& line : lines) EXPECT_EQ(line["result"]["config"]["algorithm_cache"], cache) << line.dump();
  std::filesystem::remove_all(dir);
}

// --bench-args reach every point's bench and are part of its identity: the same grid with other flags runs
// again into the same file, the same flags again run nothing.
TEST(SweepCli, BenchArgsReachEveryPointAndArePartOfItsIdentity) {
  const auto dir = temp_dir("sweep_bench_args");
  const std::string results = (dir / "points.jsonl").string();
  CommandResult r = run_dlbench(kSweep + results + " --batch-sizes 8");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  r = run_dlbench(kSweep + results + " --batch-sizes 8 --bench-args=--seed,7,--lr,0.05");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  r = run_dlbench(kSweep + results + " --batch-sizes 8 --bench-args=--seed,7,--lr,0.05");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<nlohmann::json> lines = read_lines(results);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_FALSE(lines[0]["sweep_point"].contains("bench_args")) << lines[0].dump();
  EXPECT_EQ(lines[0]["result"]["config"]["seed"], 42) << lines[0].dump();
  EXPECT_EQ(lines[1]["sweep_point"]["bench_args"], nlohmann::json({"--seed", "7", "--lr", "0.05"}));
  EXPECT_EQ(lines[1]["result"]["config"]["seed"], 7) << lines[1].dump();
  EXPECT_DOUBLE_EQ(lines[1]["result"]["config"]["lr"].get<double>(), 0.05);
  std::filesystem::remove_all(dir);
}

// On the CPU, "auto" gives the points no cache (nothing to keep) and writes no file beside the results.
TEST(SweepCli, NoAlgorithmCacheOnTheCpuByDefault) {
  const auto dir = temp_dir("sweep_algorithms_cpu");
  const std::string results = (dir / "points.jsonl").string();
  CommandResult r = run_dlbench(kSweep + results + " --batch-sizes 8");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<nlohmann::json> lines = read_lines(results);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["result"]["config"]["algorithm_cache"], "") << lines[0].dump();
  EXPECT_FALSE(std::filesystem::exists(results + ".algorithms.json"));
  std::filesystem::remove_all(dir);
}

TEST(ReportCli, NoResultsIsOneLine) {
  const auto dir = temp_dir("report_empty");
  { std::ofstream((dir / "empty.jsonl").string()) << "\n"; }
  CommandResult r = run_dlbench("report " + (dir / "empty.jsonl").string() + " -o " + (dir / "out").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("no result in"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "out" / "report.md"));
  std::filesystem::remove_all(dir);
}

TEST(SweepCli, AFailedPointIsRecordedWithItsErrorAndTheOthersRun) {
  const auto dir = temp_dir("sweep_fail");
  const std::string results = (dir / "points.jsonl").string();
  // resnet20 takes 1x28x28 inputs; a batch of 100000 asks the CPU backend for more memory than the guard
  // of synthetic data allows, so that point fails with one line.
  CommandResult r = run_dlbench(kSweep + results + " --batch-sizes 100000000,8");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  std::vector<nlohmann::json> lines = read_lines(results);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["status"], "failed");
  EXPECT_NE(lines[0]["error"].get<std::string>().find("error"), std::string::npos) << lines[0]["error"];
  EXPECT_EQ(lines[1]["status"], "ok");
  std::filesystem::remove_all(dir);
}

TEST(SweepCli, BadGridsAreOneLine) {
  for (const std::string& args : {std::string("sweep --results /tmp/x.jsonl --models resnet9"),
                                  std::string("sweep --results /tmp/x.jsonl --precisions fp8"),
                                  std::string("sweep --results /tmp/x.jsonl --launcher slurm")}) {
    CommandResult r = run_dlbench(args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
  }
}

TEST(SweepCli, BatchSizeMaxOnTheCpuIsAFailedPointWithItsReason) {
  const auto dir = temp_dir("sweep_max");
  const std::string results = (dir / "points.jsonl").string();
  CommandResult r = run_dlbench(kSweep + results + " --batch-sizes max");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  std::vector<nlohmann::json> lines = read_lines(results);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["sweep_point"]["batch_size"], "max");
  EXPECT_EQ(lines[0]["status"], "failed");
  EXPECT_CONTAINS(lines[0]["error"].get<std::string>(), "--batch-size max needs a GPU");
  std::filesystem::remove_all(dir);
}

// A stand-in for the peers' interpreter: records its command line, and either writes a result where
// --json asks (as a peer does) or, for the JAX script, says JAX is missing with exit status 3.
std::string fake_python(const std::filesystem::path& dir) {
  const std::string path = (dir / "fake-python").string();
  write_file(path,
             "#!/bin/sh\n"
             "echo \"$*\" >> " +
                 (dir / "argv.txt").string() +
                 "\n"
                 "case \"$*\" in *jax/train.py*) echo 'jax peer: JAX is not installed (no module jax)' >&2; "
                 "exit 3;; esac\n"
                 "json=''; model=''; precision=''; prev=''\n"
                 "for a in \"$@\"; do case \"$prev\" in --json) json=$a;; --model) model=$a;; "
                 "--precision) precision=$a;; esac; prev=$a; done\n"
                 "printf '{\"framework\": \"pytorch\", \"model\": \"%s\", \"precision\": \"%s\", "
                 "\"images_per_second\": 100.0, \"ranks\": 1, \"batch_size\": 8}' \"$model\" \"$precision\" "
                 "> \"$json\"\n");
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

TEST(CompareCli, RunsEachPeerWithItsBestFlagsAndRecordsAMissingOne) {
  const auto dir = temp_dir("compare");
  const std::string results = (dir / "points.jsonl").string();
  const std::string python = fake_python(dir);
  const std::string args =
      "compare --device cuda --models resnet50 --precisions fp16 --gpus 1,2 --batch-sizes 8 "
      "--steps 3 --warmup-steps 1 --frameworks pytorch,pytorch-compiled,jax --python " +
      python + " --peers " + DLBENCH_SOURCE_DIR + "/peers --results " + results;
  CommandResult r = run_dlbench(args);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_CONTAINS(r.out, "not installed here: jax (jax peer: JAX is not installed (no module jax))");

  const std::string argv = read_text((dir / "argv.txt").string());
  // One GPU: the script itself; two: under torchrun. Channels-last always, --compile for the compiled peer.
  EXPECT_CONTAINS(argv,
                  "/peers/pytorch/train.py --model resnet50 --precision fp16 --batch-size 8 --steps 3 "
                  "--warmup-steps 1 --device cuda --json");
  EXPECT_CONTAINS(argv, "-m torch.distributed.run --standalone --nproc_per_node 2 ");
  EXPECT_CONTAINS(argv, "--channels-last --compile");
  std::vector<nlohmann::json> lines = read_lines(results);
  ASSERT_EQ(lines.size(), 6u);
  int ok = 0, unavailable = 0;
  for (const auto& line : lines) {
    ok += line["status"] == "ok";
    unavailable += line["status"] == "unavailable";
  }
  EXPECT_EQ(ok, 4);
  EXPECT_EQ(unavailable, 2);  // JAX: missing at one GPU, and one GPU only anyway at two
  // JAX ran once: after it said it is missing, its other points were recorded without starting it.
  EXPECT_EQ(count_lines(argv), 5) << argv;

  // Started again: every point is in the file, nothing runs.
  r = run_dlbench(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines(read_text((dir / "argv.txt").string())), 5);
  std::filesystem::remove_all(dir);
}

TEST(CompareCli, AStoppedSweepRecordsThePointItWasRunningAndRunsItOnTheNextStart) {
  const auto dir = temp_dir("compare_stopped");
  const std::string results = (dir / "points.jsonl").string();
  const std::string marker = (dir / "finished").string();
  // A peer that takes 5 s, then leaves a mark: the stop must kill it before that.
  const std::string slow = (dir / "slow-python").string();
  write_file(slow, "#!/bin/sh\nsleep 5\ntouch " + marker + "\n");
  std::filesystem::permissions(slow, std::filesystem::perms::owner_all);
  const std::string grid =
      " --device cuda --models resnet50 --precisions fp16,bf16 --batch-sizes 8 --steps 3 "
      "--warmup-steps 1 --frameworks pytorch --peers " +
      std::string(DLBENCH_SOURCE_DIR) + "/peers --results " + results;
  // `timeout` sends SIGTERM after 2 s; --preserve-status gives dlbench's own exit status.
  CommandResult stopped = run_shell("timeout -s TERM --preserve-status 2 " + std::string(DLBENCH_BINARY) +
                                    " compare --python " + slow + grid);
  EXPECT_EQ(stopped.exit_code, 1);
  EXPECT_EQ(count_lines(stopped.err), 1) << stopped.err;
  EXPECT_CONTAINS(stopped.err, "stopped by a signal");
  std::vector<nlohmann::json> lines = read_lines(results);
  ASSERT_EQ(lines.size(), 1u);  // the point that ran; the second never started
  EXPECT_EQ(lines[0]["status"], "interrupted");
  ::sleep(5);
  EXPECT_FALSE(std::filesystem::exists(marker)) << "the stopped point's process was left running";

  // Started again (with a peer that works): the interrupted point and the one not reached both run.
  CommandResult r = run_dlbench("compare --python " + fake_python(dir) + grid);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_CONTAINS(r.out, "2 points to run, 0 already");
  lines = read_lines(results);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1]["status"], "ok");
  EXPECT_EQ(lines[2]["status"], "ok");
  std::filesystem::remove_all(dir);
}

TEST(CompareCli, BadFrameworkIsOneLine) {
  CommandResult r = run_dlbench("compare --results /tmp/x.jsonl --frameworks tensorflow");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_CONTAINS(r.err, "--frameworks tensorflow: unknown");
}

TEST(StudyCli, RunsDlbenchAndThePeersThenWritesTheReport) {
  const auto dir = temp_dir("study");
  const std::string results = (dir / "study.jsonl").string();
  CommandResult r = run_dlbench(
      "study --device cpu --models resnet20 --precisions fp32 --gpus 1 --batch-sizes 8 --steps 2 "
      "--warmup-steps 1 --frameworks pytorch,jax --python " +
      fake_python(dir) + " --peers " + DLBENCH_SOURCE_DIR + "/peers --results " + results + " -o " +
      (dir / "report").string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_CONTAINS(r.out, "socket(s)");  // the system table first
  std::vector<nlohmann::json> lines = read_lines(results);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["sweep_point"]["framework"], "dlbench");
  EXPECT_EQ(lines[0]["status"], "ok");
  EXPECT_EQ(lines[1]["sweep_point"]["framework"], "pytorch");
  EXPECT_EQ(lines[2]["status"], "unavailable");
  const std::string markdown = read_text((dir / "report" / "report.md").string());
  EXPECT_CONTAINS(markdown, "| dlbench | resnet20 | fp32 | 1 | 8 |");
  EXPECT_CONTAINS(markdown, "| pytorch | resnet20 | fp32 | 1 | 8 |");
  EXPECT_CONTAINS(markdown, "JAX is not installed");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dlbench::testing
