// `dlbench sweep`: points appended as JSON lines, a restarted sweep runs only the missing points, a failed
// point is recorded with its error while the others go on, malformed lines are named and skipped.
#include <fmt/format.h>
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
  EXPECT_NE(markdown.find("| dlbench (CPU) | resnet20 | fp32 | 1 | 16 |"), std::string::npos) << markdown;
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
                                  std::string("sweep --results /tmp/x.jsonl --precisions fp4"),
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

// Issue 23, item 2: a results line that cannot be appended whole (a full disk: here a file-size limit, with
// SIGXFSZ ignored so that the write fails with EFBIG, a real short write) stops the sweep with one line
// naming the file and the cause; the file is cut back to its earlier lines, and once there is room the
// same command runs the point and every earlier line is intact.
TEST(SweepCli, AFullDiskStopsTheSweepAndLosesNoLine) {
  const auto dir = temp_dir("sweep_full_disk");
  const std::string results = (dir / "points.jsonl").string();
  {
    // Earlier points, to within 300 bytes of a 64 KiB limit: the next line (a bench result) crosses it.
    std::ofstream out(results);
    for (int i = 0; out.tellp() < 64 * 1024 - 300; ++i)
      out << R"({"sweep_point": {"model": "resnet20", "precision": "fp32", "gpus": 1, "batch_size": )"
          << 1000 + i << R"(, "launcher": "threads"}, "status": "ok"})"
          << "\n";
  }
  const std::string before = read_text(results);
  const std::string sweep = std::string(DLBENCH_BINARY) + " " + kSweep + results + " --batch-sizes 2";
  CommandResult r = run_shell("bash -c 'trap \"\" XFSZ; ulimit -f 64; exec " + sweep + "'", 120);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_CONTAINS(r.err, "dlbench: error: ");
  EXPECT_CONTAINS(r.err, results);
  EXPECT_EQ(r.err.find("Success"), std::string::npos) << r.err;
  EXPECT_TRUE(read_text(results) == before)
      << "the file must keep its earlier lines and nothing of the new one";

  r = run_dlbench(kSweep + results + " --batch-sizes 2", 120);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string after = read_text(results);
  ASSERT_EQ(after.compare(0, before.size(), before), 0);
  const std::vector<nlohmann::json> lines = read_lines(results);
  EXPECT_EQ(lines.size(), static_cast<size_t>(count_lines(before)) + 1);
  EXPECT_EQ(lines.back()["sweep_point"]["batch_size"], 2);
  EXPECT_EQ(lines.back()["status"], "ok");
  std::filesystem::remove_all(dir);
}

// Issue 23, item 10: on the CPU a sweep given no model, batch or steps runs what `dlbench bench` runs
// there (resnet20, batch 128, 20 steps after 2: seconds, not the GPU's hours), and calls its points
// processes, not GPUs.
TEST(SweepCli, OnTheCpuTheDefaultsAreTheCpusAndNoPointIsAGpu) {
  const auto dir = temp_dir("sweep_cpu_defaults");
  const std::string results = (dir / "points.jsonl").string();
  CommandResult r = run_dlbench("sweep --device cpu --results " + results, 300);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("GPU"), std::string::npos) << r.out;
  EXPECT_CONTAINS(r.out, "1 process (CPU)");
  const std::vector<nlohmann::json> lines = read_lines(results);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["sweep_point"]["model"], "resnet20");
  EXPECT_EQ(lines[0]["sweep_point"]["batch_size"], 128);
  EXPECT_EQ(lines[0]["result"]["config"]["steps"], 20);
  EXPECT_EQ(lines[0]["result"]["config"]["warmup_steps"], 2);
  // Several ranks on the CPU are processes: one line before any point, not a grid of failures.
  r = run_dlbench(kSweep + results + " --gpus 1,2 --batch-sizes 2");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_CONTAINS(r.err, "--launcher mpi");
  EXPECT_EQ(read_lines(results).size(), 1u);
  std::filesystem::remove_all(dir);
}

// A GPT model's point takes bench's batch of sequences and reports tokens/s.
TEST(SweepCli, AGptModelRunsAtItsOwnDefaultBatch) {
  const auto dir = temp_dir("sweep_gpt");
  const std::string results = (dir / "points.jsonl").string();
  CommandResult r = run_dlbench(
      "sweep --device cpu --models gpt-mini --steps 2 --warmup-steps 1 --results " + results, 300);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_CONTAINS(r.out, "tokens/s");
  const std::vector<nlohmann::json> lines = read_lines(results);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["status"], "ok");
  EXPECT_EQ(lines[0]["sweep_point"]["batch_size"], 16);
  EXPECT_GT(lines[0]["result"]["tokens_per_second"].get<double>(), 0);
  std::filesystem::remove_all(dir);
}

// Issue 23, item 13: a --bench-args flag that bench refuses fails every point the same way: the sweep
// stops at the first with the line that says what was wrong (never CLI11's "Run with --help ..."),
// recording nothing, so that the grid with the flag corrected runs every point.
TEST(SweepCli, ABadBenchArgStopsTheSweepWithTheLineThatSaysWhy) {
  const auto dir = temp_dir("sweep_bad_bench_args");
  const std::string results = (dir / "points.jsonl").string();
  CommandResult r = run_dlbench(kSweep + results + " --batch-sizes 2,4 --bench-args=--no-such-flag,3");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_CONTAINS(r.err, "--no-such-flag");
  EXPECT_EQ(r.err.find("Run with --help"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("point 2 of 2"), std::string::npos) << r.out;
  EXPECT_TRUE(read_lines(results).empty());
  // A value bench refuses after parsing (one "dlbench: error:" line) is a failed point with that line.
  r = run_dlbench(kSweep + results + " --batch-sizes 2 --bench-args=--log-every,-1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  const std::vector<nlohmann::json> lines = read_lines(results);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["status"], "failed");
  EXPECT_EQ(lines[0]["error"].get<std::string>().rfind("dlbench: error: ", 0), 0u) << lines[0]["error"];
  EXPECT_CONTAINS(lines[0]["error"].get<std::string>(), "--log-every");
  std::filesystem::remove_all(dir);
}

// Issue 23, paths: an algorithm cache that is the results file (or its logs folder) would be read as
// algorithm choices and rewritten: refused with one line before any point, the file untouched.
TEST(SweepCli, AnAlgorithmCacheNamingTheResultsIsRefused) {
  const auto dir = temp_dir("sweep_paths");
  const std::string results = (dir / "points.jsonl").string();
  write_file(
      results,
      R"({"sweep_point": {"model": "resnet20", "precision": "fp32", "gpus": 1, "batch_size": 9, "launcher": "threads"}, "status": "ok"})"
      "\n");
  const std::string before = read_text(results);
  for (const std::string& cache : {results, (dir / "." / "points.jsonl").string(), results + ".logs"}) {
    CommandResult r = run_dlbench(kSweep + results + " --batch-sizes 2 --algorithm-cache " + cache);
    EXPECT_EQ(r.exit_code, 1) << cache << r.out;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_CONTAINS(r.err, "--algorithm-cache");
    EXPECT_EQ(r.out.find("point 1 of"), std::string::npos) << r.out;
    EXPECT_EQ(read_text(results), before);
  }
  std::filesystem::remove_all(dir);
}

// A bench result line as `dlbench bench --json` writes it, with the fields a test sets.
std::string result_line(const std::string& fields) {
  return R"({"model": "resnet50", "precision": "fp32", "ranks": 1, "batch_size": 256, )"
         R"("images_per_second": 1000.0, "step_ms": {"median": 256.0}, )" +
         fields + "}\n";
}

CommandResult report_of(const std::vector<std::string>& files, const std::filesystem::path& out) {
  std::string args = "report";
  for (const std::string& f : files) args += " " + f;
  return run_dlbench(args + " -o " + out.string());
}

// Issue 23, item 10: CPU runs are processes and ranks, never "1 GPU" or "all GPUs together"; a training
// run is not a benchmark of the same point (its own row), and shows its test accuracy; 42 MiB is 42 MiB.
TEST(ReportCli, CpuAndTrainingRunsAreNamedForWhatTheyAre) {
  const auto dir = temp_dir("report_cpu");
  const std::string input = (dir / "cpu.jsonl").string();
  write_file(input,
             result_line(R"("device": "cpu", "images_per_second": 40.0, "peak_memory_bytes": 44040192,)"
                         R"( "config": {"command": "bench"})") +
                 result_line(R"("device": "cpu", "images_per_second": 30.0, "test_accuracy": 0.8765,)"
                             R"( "losses": [2.3, 1.9], "config": {"command": "train"})"));
  CommandResult r = report_of({input}, dir / "out");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string md = read_text((dir / "out" / "report.md").string());
  EXPECT_EQ(md.find("1 GPU"), std::string::npos) << md;
  EXPECT_EQ(md.find("all GPUs"), std::string::npos) << md;
  EXPECT_CONTAINS(md, "1 process");
  EXPECT_CONTAINS(md, "| dlbench (CPU) | fp32 | 256 | 40 |");
  EXPECT_CONTAINS(md, "| dlbench train (CPU) | fp32 | 256 | 30 |");
  EXPECT_CONTAINS(md, "42 MiB");
  EXPECT_EQ(md.find("0.0 GiB"), std::string::npos) << md;
  EXPECT_CONTAINS(md, "87.65%");
  std::filesystem::remove_all(dir);
}

// A peer's CPU run is set beside dlbench's CPU run (both are "(CPU)" variants), as on a GPU.
TEST(ReportCli, APeersCpuRunIsComparedWithDlbenchsCpuRun) {
  const auto dir = temp_dir("report_cpu_peer");
  const std::string input = (dir / "cpu.jsonl").string();
  write_file(input,
             result_line(R"("device": "cpu", "images_per_second": 40.0, "config": {"command": "bench"})") +
                 result_line(R"("device": "cpu", "framework": "pytorch", "images_per_second": 20.0)"));
  CommandResult r = report_of({input}, dir / "out");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string md = read_text((dir / "out" / "report.md").string());
  EXPECT_CONTAINS(md, "| pytorch (CPU) | fp32 | 256 | 1 | 40 | 20 | 2.00x |");
  std::filesystem::remove_all(dir);
}

// Issue 23, item 10: a speedup divides by the one-GPU point of the same batch (a 1-GPU point at batch 256
// beside a faster one at 512 is no "speedup 0.51"), and the tables show the batch.
TEST(ReportCli, ASpeedupIsAgainstTheOneGpuPointOfTheSameBatch) {
  const auto dir = temp_dir("report_batch");
  const std::string input = (dir / "r.jsonl").string();
  write_file(input, result_line(R"("launcher": "threads")") +
                        result_line(R"("batch_size": 512, "images_per_second": 1960.0)") +
                        result_line(R"("ranks": 2, "images_per_second": 1900.0, "launcher": "threads")"));
  CommandResult r = report_of({input}, dir / "out");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string md = read_text((dir / "out" / "report.md").string());
  EXPECT_CONTAINS(md, "| dlbench | fp32 | 256 | 1,000 | 1,900 |");
  EXPECT_CONTAINS(md, "| dlbench | fp32 | 512 | 1,960 | - |");
  EXPECT_CONTAINS(md, "| dlbench | fp32 | 256 | 2 | 1.90x | 95.0% |");
  for (const nlohmann::json& point : read_lines((dir / "out" / "points.jsonl").string())) {
    if (point["ranks"] == 1) {
      EXPECT_DOUBLE_EQ(point["speedup"].get<double>(), 1.0) << point.dump();
    }
    if (point["ranks"] == 2) {
      EXPECT_DOUBLE_EQ(point["speedup"].get<double>(), 1.9) << point.dump();
    }
  }
  std::filesystem::remove_all(dir);
}

// Issue 23, item 10: a file given twice (or by another name) is read once; impossible values are named
// (file, line, field, value) and their points skipped, as malformed lines are.
TEST(ReportCli, AFileGivenTwiceIsReadOnceAndImpossibleValuesAreSkipped) {
  const auto dir = temp_dir("report_twice");
  const std::string input = (dir / "r.jsonl").string();
  write_file(input, result_line(R"("launcher": "threads")") + result_line(R"("batch_size": -1)") +
                        result_line(R"("step_ms": {"median": -5})") +
                        result_line(R"("images_per_second": 1e308)"));
  std::filesystem::create_symlink(input, dir / "link.jsonl");
  CommandResult r =
      report_of({input, input, (dir / "." / "r.jsonl").string(), (dir / "link.jsonl").string()}, dir / "out");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_lines((dir / "out" / "points.jsonl").string()).size(), 1u);
  EXPECT_CONTAINS(r.err, "r.jsonl line 2: its \"batch_size\" is -1");
  EXPECT_CONTAINS(r.err, "r.jsonl line 3: its \"step_ms.median\" is -5");
  EXPECT_CONTAINS(r.err, "r.jsonl line 4: its \"images_per_second\" is 1e+308");
  EXPECT_CONTAINS(read_text((dir / "out" / "report.md").string()), "3 malformed input line(s)");
  std::filesystem::remove_all(dir);
}

// Issue 23, item 10: the figures of an earlier report are removed (only the report's own files); and an
// output of the report that is one of its inputs is refused with one line, the input untouched.
TEST(ReportCli, EarlierFiguresGoAndAnInputIsNeverOverwritten) {
  const auto dir = temp_dir("report_figures_paths");
  const std::string input = (dir / "r.jsonl").string();
  write_file(input, result_line(R"("launcher": "threads")"));
  std::filesystem::create_directories(dir / "out" / "figures");
  write_file((dir / "out" / "figures" / "throughput_resnet9_fp16.png").string(), "old");
  write_file((dir / "out" / "figures" / "speedup_resnet9.dat").string(), "old");
  write_file((dir / "out" / "figures" / "my_notes.txt").string(), "mine");
  CommandResult r = report_of({input}, dir / "out");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "out" / "figures" / "throughput_resnet9_fp16.png"));
  EXPECT_FALSE(std::filesystem::exists(dir / "out" / "figures" / "speedup_resnet9.dat"));
  EXPECT_EQ(read_text((dir / "out" / "figures" / "my_notes.txt").string()), "mine");

  const std::string points = (dir / "out" / "points.jsonl").string(), before = read_text(points);
  r = report_of({points}, dir / "out");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_EQ(read_text(points), before);
  r = report_of({input}, dir / "r.jsonl");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_EQ(read_text(input), result_line(R"("launcher": "threads")"));
  // The report again into its folder replaces its own files; a file of the user's by one of their names
  // (a report.md written by hand) stops it before anything is written.
  r = report_of({input}, dir / "out");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* name : {"report.md", "report.html", "points.jsonl"}) {
    std::filesystem::create_directories(dir / "mine");
    write_file((dir / "mine" / name).string(), "my own notes\n");
    r = report_of({input}, dir / "mine");
    EXPECT_EQ(r.exit_code, 1) << name << ": " << r.out;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(std::string(name) + ": the file exists and is not"), std::string::npos) << r.err;
    EXPECT_EQ(read_text((dir / "mine" / name).string()), "my own notes\n");
    std::filesystem::remove_all(dir / "mine");
  }
  std::filesystem::remove_all(dir);
}

// A stand-in for the peers' interpreter: records its command line, and either writes a result where
// --json asks (as a peer does; the GPT peer's with 256 tokens per sequence) or, for the JAX script, says
// JAX is missing with exit status 3.
std::string fake_python(const std::filesystem::path& dir) {
  const std::string path = (dir / "fake-python").string();
  write_file(
      path,
      "#!/bin/sh\n"
      "echo \"$*\" >> " +
          (dir / "argv.txt").string() +
          "\n"
          "case \"$*\" in *jax/train.py*) echo 'jax peer: JAX is not installed (no module jax)' >&2; "
          "exit 3;; esac\n"
          "json=''; model=''; precision=''; prev=''; tokens=''\n"
          "for a in \"$@\"; do case \"$prev\" in --json) json=$a;; --model) model=$a;; "
          "--precision) precision=$a;; esac; prev=$a; done\n"
          "case \"$*\" in *gpt.py*) tokens=', \"tokens_per_second\": 25600.0';; esac\n"
          "printf '{\"framework\": \"pytorch\", \"model\": \"%s\", \"precision\": \"%s\", "
          "\"images_per_second\": 100.0%s, \"ranks\": 1, \"batch_size\": 8}' \"$model\" \"$precision\" "
          "\"$tokens\" > \"$json\"\n");
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

// A GPT model's PyTorch peer is nanoGPT's step (peers/pytorch/gpt.py), with no channels-last.
TEST(CompareCli, RunsTheGptPeerForAGptModel) {
  const auto dir = temp_dir("compare_gpt");
  const std::string results = (dir / "points.jsonl").string();
  const std::string python = fake_python(dir);
  CommandResult r = run_dlbench(
      "compare --device cuda --models gpt2 --precisions bf16 --gpus 1 --batch-sizes 16 --steps 3 "
      "--warmup-steps 1 --frameworks pytorch-compiled --python " +
      python + " --peers " + DLBENCH_SOURCE_DIR + "/peers --results " + results);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string argv = read_text((dir / "argv.txt").string());
  EXPECT_CONTAINS(argv,
                  "/peers/pytorch/gpt.py --model gpt2 --precision bf16 --batch-size 16 --steps 3 "
                  "--warmup-steps 1 --device cuda --json");
  EXPECT_CONTAINS(argv, "--compile");
  EXPECT_EQ(argv.find("--channels-last"), std::string::npos) << argv;
  std::filesystem::remove_all(dir);
}

// The points of a GPT model no peer can run are recorded unavailable, with the reason, without starting
// anything: the JAX peer has no GPT model, and the PyTorch GPT peer trains in one process (N of them under
// torchrun would each write one GPU's result for the N-GPU point).
TEST(CompareCli, AGptPointAPeerCannotRunIsUnavailableWithTheReason) {
  const auto dir = temp_dir("compare_gpt_unavailable");
  const std::string results = (dir / "points.jsonl").string();
  CommandResult r = run_dlbench(
      "compare --device cuda --models gpt2 --precisions bf16 --gpus 1,2 --batch-sizes 16 --steps 3 "
      "--warmup-steps 1 --frameworks pytorch,jax --python " +
      fake_python(dir) + " --peers " + DLBENCH_SOURCE_DIR + "/peers --results " + results);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string argv = read_text((dir / "argv.txt").string());
  EXPECT_EQ(count_lines(argv), 1) << argv;  // pytorch on one GPU, nothing else
  EXPECT_CONTAINS(argv, "/peers/pytorch/gpt.py --model gpt2");
  const std::vector<nlohmann::json> lines = read_lines(results);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0]["status"], "ok");
  EXPECT_EQ(lines[0]["result"]["tokens_per_second"], 25600.0);
  EXPECT_EQ(lines[1]["sweep_point"]["gpus"], 2);
  EXPECT_EQ(lines[1]["status"], "unavailable");
  EXPECT_CONTAINS(lines[1]["error"].get<std::string>(),
                  "the PyTorch GPT peer (peers/pytorch/gpt.py) trains on one GPU only");
  for (int i : {2, 3}) {
    EXPECT_EQ(lines[i]["sweep_point"]["framework"], "jax");
    EXPECT_EQ(lines[i]["status"], "unavailable");
    EXPECT_EQ(lines[i]["error"], "the JAX peer has no GPT model");
  }
  std::filesystem::remove_all(dir);
}

// No peer trains in fp8 by itself: its fp8 points are unavailable, with the reason, and nothing starts.
TEST(CompareCli, Fp8PointsAreUnavailableForEveryPeer) {
  const auto dir = temp_dir("compare_fp8");
  const std::string results = (dir / "points.jsonl").string();
  CommandResult r = run_dlbench(
      "compare --device cuda --models gpt2 --precisions fp8 --gpus 1 --batch-sizes 16 --steps 3 "
      "--warmup-steps 1 --frameworks pytorch,pytorch-compiled --python " +
      fake_python(dir) + " --peers " + DLBENCH_SOURCE_DIR + "/peers --results " + results);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "argv.txt")) << "a peer was started";
  const std::vector<nlohmann::json> lines = read_lines(results);
  ASSERT_EQ(lines.size(), 2u);
  for (const nlohmann::json& line : lines) {
    EXPECT_EQ(line["status"], "unavailable");
    EXPECT_CONTAINS(line["error"].get<std::string>(), "do not train in fp8");
  }
  std::filesystem::remove_all(dir);
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
  // The peer started once to find it missing ran no point: counted among the unavailable ones alone.
  EXPECT_CONTAINS(r.out, "compare: jax done: 0 run, 0 failed, 2 not available, 0 skipped");
  EXPECT_CONTAINS(r.out, "compare: pytorch done: 2 run, 0 failed, 0 not available, 0 skipped");

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
  // The point JAX said it is missing at keeps its words; the one recorded after it, the reason alone.
  EXPECT_EQ(lines[4]["error"], "jax peer: JAX is not installed (no module jax)") << lines[4].dump();
  EXPECT_EQ(lines[5]["error"], "JAX is not installed (no module jax)") << lines[5].dump();
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
  // SIGTERM once the first point's log exists (its process is running), as `timeout` would send it; the
  // script's exit status is dlbench's own. Waiting for the log, not a fixed time, keeps a loaded machine
  // from signalling before the sweep has started.
  const std::string script = (dir / "stop.sh").string();
  write_file(script, std::string(DLBENCH_BINARY) + " compare --python " + slow + grid + " &\npid=$!\n" +
                         "for i in $(seq 600); do ls " + results +
                         ".logs/*.log >/dev/null 2>&1 && break; "
                         "sleep 0.1; done\nsleep 0.5\nkill -TERM $pid\nwait $pid\n");
  CommandResult stopped = run_shell("bash " + script);
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

// A study on the CPU of `models` at batch 8, two steps each, with the fake PyTorch peer and a JAX peer
// that is missing, into DIR/study.jsonl and DIR/report.
CommandResult run_small_study(const std::filesystem::path& dir, const std::string& models) {
  return run_dlbench("study --device cpu --models " + models +
                     " --precisions fp32 --gpus 1 --batch-sizes 8 --steps 2 "
                     "--warmup-steps 1 --frameworks pytorch,jax --python " +
                     fake_python(dir) + " --peers " + DLBENCH_SOURCE_DIR + "/peers --results " +
                     (dir / "study.jsonl").string() + " -o " + (dir / "report").string());
}

TEST(StudyCli, RunsDlbenchAndThePeersThenWritesTheReport) {
  const auto dir = temp_dir("study");
  const std::string results = (dir / "study.jsonl").string();
  CommandResult r = run_small_study(dir, "resnet20");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_CONTAINS(r.out, "socket(s)");  // the system table first
  std::vector<nlohmann::json> lines = read_lines(results);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["sweep_point"]["framework"], "dlbench");
  EXPECT_EQ(lines[0]["status"], "ok");
  EXPECT_EQ(lines[1]["sweep_point"]["framework"], "pytorch");
  EXPECT_EQ(lines[2]["status"], "unavailable");
  const std::string markdown = read_text((dir / "report" / "report.md").string());
  EXPECT_CONTAINS(markdown, "| dlbench (CPU) | resnet20 | fp32 | 1 | 8 |");
  EXPECT_CONTAINS(markdown, "| pytorch | resnet20 | fp32 | 1 | 8 |");
  EXPECT_CONTAINS(markdown, "JAX is not installed");
  std::filesystem::remove_all(dir);
}

// A study of an image model and a token model runs both through the sweep and the peers, and the report
// states each in its unit: the token model's tokens/s (its result's tokens_per_second), the image model's
// img/s.
TEST(StudyCli, AnImageAndATokenModelAreReportedEachInItsUnit) {
  const auto dir = temp_dir("study_gpt");
  const std::string results = (dir / "study.jsonl").string();
  CommandResult r = run_small_study(dir, "gpt-mini,resnet20");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::vector<nlohmann::json> lines = read_lines(results);
  ASSERT_EQ(lines.size(), 6u);
  for (int i : {0, 1, 2, 3}) EXPECT_EQ(lines[i]["status"], "ok") << lines[i].dump();
  EXPECT_EQ(lines[0]["sweep_point"]["model"], "gpt-mini");
  EXPECT_EQ(lines[2]["sweep_point"]["framework"], "pytorch");
  EXPECT_EQ(lines[4]["error"], "the JAX peer has no GPT model");
  EXPECT_EQ(lines[5]["status"], "unavailable");
  // dlbench's gpt-mini point in tok/s: its tokens_per_second, not its sequences/s.
  const double tokens = lines[0]["result"]["tokens_per_second"].get<double>();
  ASSERT_GT(tokens, 1000);  // 8 sequences of 256 tokens a step
  const std::string digits = fmt::format("{:.0f}", tokens);
  std::string grouped;  // as the report writes it: 12,345
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) grouped += ',';
    grouped += digits[i];
  }
  const std::string markdown = read_text((dir / "report" / "report.md").string());
  EXPECT_CONTAINS(markdown, "## gpt-mini: throughput (tokens/s,");
  EXPECT_CONTAINS(markdown, "## resnet20: throughput (images/s,");
  EXPECT_CONTAINS(markdown, "| dlbench (CPU) | gpt-mini | fp32 | 1 | 8 | " + grouped + " tok/s |");
  EXPECT_CONTAINS(markdown, "| pytorch | gpt-mini | fp32 | 1 | 8 | 25,600 tok/s |");
  EXPECT_CONTAINS(markdown, "| pytorch | resnet20 | fp32 | 1 | 8 | 100 img/s |");
  EXPECT_CONTAINS(markdown, "| dlbench (CPU) | resnet20 | fp32 | 1 | 8 |");
  EXPECT_CONTAINS(markdown,
                  "jax gpt-mini fp32 1 GPU batch 8 (torchrun): not available: the JAX peer has no GPT model");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dlbench::testing
