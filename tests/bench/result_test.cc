// The result schema (bench/result.h): results committed under bench/results/ by earlier versions
// (fixtures/committed_results.jsonl holds four of their lines, verbatim: a CPU benchmark beside PyTorch, a
// 2-GPU point, a 1-GPU point with energy and clocks, a sweep line) read into the typed result and written
// back as the same text; a field of the wrong type is named, dotted to where it sits; and the report reads
// the committed lines through the schema as it read them before.
#include "bench/result.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "bench/report.h"
#include "temp_dir.h"

namespace dlbench {
namespace {

const std::string kCommitted =
    std::string(DLBENCH_SOURCE_DIR) + "/tests/bench/fixtures/committed_results.jsonl";

// The dlbench results of a line: the line itself, a sweep's "result", a GPU script's "dlbench_result".
std::vector<nlohmann::json> run_results_of(const nlohmann::json& line) {
  std::vector<nlohmann::json> results;
  for (const char* key : {"result", "dlbench_result"})
    if (line.contains(key) && is_run_result(line[key])) results.push_back(line[key]);
  if (is_run_result(line)) results.push_back(line);
  return results;
}

std::vector<nlohmann::json> committed_results() {
  std::ifstream in(kCommitted);
  std::vector<nlohmann::json> results;
  for (std::string line; std::getline(in, line);)
    for (nlohmann::json& r : run_results_of(nlohmann::json::parse(line))) results.push_back(std::move(r));
  return results;
}

TEST(RunResult, CommittedResultsReadBackAsTheSameText) {
  const std::vector<nlohmann::json> results = committed_results();
  ASSERT_EQ(results.size(), 4u);
  for (const nlohmann::json& j : results)
    EXPECT_EQ(to_json(run_result_from_json(j)).dump(2), j.dump(2)) << j["date"];
}

TEST(RunResult, CommittedResultsReadAsTypedFields) {
  const std::vector<nlohmann::json> results = committed_results();
  ASSERT_EQ(results.size(), 4u);
  const RunResult cpu = run_result_from_json(results[0]);
  EXPECT_EQ(cpu.device, "cpu");
  ASSERT_TRUE(cpu.bench.has_value());
  EXPECT_FALSE(cpu.train.has_value());
  EXPECT_FALSE(cpu.bench->energy.has_value());    // written as null: no NVML on a CPU
  EXPECT_TRUE(cpu.bench->step_times_ms.empty());  // older than the field
  ASSERT_TRUE(cpu.step_ms.has_value());
  EXPECT_EQ(cpu.step_ms->count, cpu.steps);

  const RunResult two_gpus = run_result_from_json(results[1]);
  EXPECT_EQ(two_gpus.ranks, 2);
  EXPECT_EQ(two_gpus.global_batch_size, 2 * two_gpus.batch_size);
  ASSERT_TRUE(two_gpus.images_per_second.has_value());
  EXPECT_DOUBLE_EQ(*two_gpus.images_per_second, results[1]["images_per_second"].get<double>());

  const RunResult gpu = run_result_from_json(results[2]);
  ASSERT_TRUE(gpu.bench && gpu.bench->energy && gpu.bench->clocks);
  EXPECT_GT(gpu.bench->energy->joules_per_image, 0);
  EXPECT_DOUBLE_EQ(gpu.bench->clocks->sm_clock_median_mhz,
                   results[2]["gpu_clocks"]["sm_clock_median_mhz"].get<double>());
  ASSERT_TRUE(gpu.step_ms.has_value());
  EXPECT_EQ(gpu.step_ms->count, gpu.steps);
}

TEST(RunResult, AFreshResultWritesEveryFieldItHolds) {
  RunResult r;
  r.model = "resnet20";
  r.images_per_second = 100;
  r.final_loss = NAN;
  TrainFigures& t = r.train.emplace();
  t.losses = {2.5, NAN};
  t.test = TestFigures{0.5, 64, {{1, 8, 0.5, 64}}};
  const nlohmann::json j = to_json(r);
  EXPECT_TRUE(j["final_loss"].is_null());
  EXPECT_TRUE(j["losses"][1].is_null());
  EXPECT_TRUE(j["communication_ms"].is_null());  // always written, null where not measured
  EXPECT_FALSE(j.contains("warmup_steps"));      // bench's figures only in a bench result
  EXPECT_EQ(j["evaluations"][0]["epoch"], 1);
  // Read back, NaN where null was written: the same text again.
  EXPECT_EQ(to_json(run_result_from_json(j)).dump(), j.dump());
}

TEST(RunResult, UnknownFieldsAreKept) {
  nlohmann::json j = committed_results()[2];
  j["a_field_of_a_later_version"] = {{"x", 1}};
  const RunResult r = run_result_from_json(j);
  EXPECT_TRUE(r.unknown.contains("a_field_of_a_later_version"));
  EXPECT_EQ(to_json(r), j);
}

// The field's dotted name, from run_result_from_json's error.
std::string wrong_field(const nlohmann::json& j) {
  try {
    run_result_from_json(j);
  } catch (const ResultFieldError& e) {
    return e.field();
  }
  return "(none)";
}

TEST(RunResult, AFieldOfTheWrongTypeIsNamed) {
  const nlohmann::json good = committed_results()[2];
  nlohmann::json j = good;
  j["batch_size"] = "256";
  EXPECT_EQ(wrong_field(j), "batch_size");
  j = good;
  j["step_ms"]["median"] = "fast";
  EXPECT_EQ(wrong_field(j), "step_ms.median");
  j = good;
  j["gpu_clocks"] = 5;
  EXPECT_EQ(wrong_field(j), "gpu_clocks");
  j = good;
  j["step_times_ms"][3] = "x";
  EXPECT_EQ(wrong_field(j), "step_times_ms");
  j = good;
  j["cuda_graph"] = "yes";
  EXPECT_EQ(wrong_field(j), "cuda_graph");
  j = good;
  j["ranks"] = 1.5;
  EXPECT_EQ(wrong_field(j), "ranks");
  nlohmann::json train = {
      {"config", nlohmann::json::object()}, {"losses", {1.0}}, {"evaluations", {{{"epoch", "one"}}}}};
  EXPECT_EQ(wrong_field(train), "evaluations[0].epoch");
  EXPECT_EQ(wrong_field(good), "(none)");
  try {
    j = good;
    j["precision"] = 16;
    run_result_from_json(j);
    FAIL() << "no error";
  } catch (const ResultFieldError& e) {
    EXPECT_STREQ(e.what(), "\"precision\" is 16: not a string");
  }
}

TEST(RunResult, OnlyADlbenchRunIsARunResult) {
  EXPECT_TRUE(is_run_result(committed_results()[0]));
  EXPECT_FALSE(is_run_result({{"framework", "pytorch"}, {"config", nlohmann::json::object()}}));
  EXPECT_FALSE(is_run_result({{"model", "resnet50"}, {"images_per_second", 1.0}}));
  EXPECT_FALSE(is_run_result(nlohmann::json::array()));
}

// The committed lines give the points they gave before the schema: each line's dlbench and peer result.
TEST(ReportOfCommittedResults, EveryLineGivesItsPoints) {
  ::testing::internal::CaptureStderr();
  const ReportInput input = read_report_input({kCommitted});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "");
  EXPECT_EQ(input.skipped_lines, 0);
  ASSERT_EQ(input.points.size(), 7u);  // 3 GPU-script lines x (dlbench + peer), 1 sweep line
  const ReportPoint& cpu = input.points[0];
  EXPECT_EQ(cpu.framework, "dlbench (CPU)");
  EXPECT_TRUE(cpu.step_median_ms.has_value());
  const ReportPoint& two = input.points[2];
  EXPECT_EQ(two.framework, "dlbench");
  EXPECT_EQ(two.gpus, 2);
  const ReportPoint& gpu = input.points[4];
  EXPECT_TRUE(gpu.energy_joules_per_item.has_value());
  EXPECT_TRUE(gpu.sm_clock_median_mhz.has_value());
  EXPECT_TRUE(gpu.seconds_to_first_timed_step.has_value());
  EXPECT_FALSE(gpu.algorithm_digest.empty());
}

// A result file with a field of the wrong type, or one that is no result at all: one line naming the file
// and the field, the point skipped; with nothing left to report, the report refuses.
TEST(ReportOfCommittedResults, ABadResultFileIsNamedWithItsField) {
  const testing::TempDir dir;
  nlohmann::json bad = committed_results()[2];
  bad["step_ms"]["p95"] = "slow";
  const std::string bad_path = dir.file("bad.json");
  testing::write_file(bad_path, bad.dump(2) + "\n");
  ::testing::internal::CaptureStderr();
  const ReportInput input = read_report_input({bad_path});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(input.points.size(), 0u);
  EXPECT_EQ(err, "report: " + bad_path + " line 1: its \"step_ms.p95\" is \"slow\": not a number; skipped\n");
  const std::string foreign_path = dir.file("trace.json");
  testing::write_file(foreign_path, R"({"traceEvents": [], "displayTimeUnit": "ms"})"
                                    "\n");
  ::testing::internal::CaptureStderr();
  EXPECT_THROW(run_report({foreign_path}, dir.file("report")), UserError);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "report: " + foreign_path + " line 1: has no \"model\"; skipped\n");
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "report" / "report.md"));
}

}  // namespace
}  // namespace dlbench
