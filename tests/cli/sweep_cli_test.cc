// `dlbench sweep`: points appended as JSON lines, a restarted sweep runs only the missing points, a failed
// point is recorded with its error while the others go on, malformed lines are named and skipped.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.h"

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

}  // namespace
}  // namespace dlbench::testing
