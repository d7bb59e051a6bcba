// The report from fixture results: the expected Markdown (a golden file), malformed lines named and
// skipped, empty input refused with one clear message.
#include "bench/report.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "core/status.h"

namespace dlbench {
namespace {

const std::string kFixtures = std::string(DLBENCH_SOURCE_DIR) + "/tests/bench/";

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Report, FixtureGivesTheGoldenMarkdown) {
  ::testing::internal::CaptureStderr();
  const ReportInput input = read_report_input({kFixtures + "fixtures/study_small.jsonl"});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(input.points.size(), 7u);
  EXPECT_EQ(input.failed.size(), 1u);
  EXPECT_EQ(input.skipped_lines, 2);
  EXPECT_NE(err.find("study_small.jsonl line 9: not a JSON object"), std::string::npos) << err;
  EXPECT_NE(err.find("line 10: has no \"images_per_second\""), std::string::npos) << err;
  const std::string markdown = report_markdown(input);
  const std::string golden_path = kFixtures + "golden/study_small.md";
  if (std::getenv("DLBENCH_UPDATE_GOLDEN")) {  // regenerate after a deliberate change, then read the diff
    std::ofstream(golden_path) << markdown;
  }
  EXPECT_EQ(markdown, read(golden_path)) << "set DLBENCH_UPDATE_GOLDEN=1 to rewrite " << golden_path;
}

TEST(Report, TablesHoldTheNumbersOfThePoints) {
  const std::string markdown = report_markdown(read_report_input({kFixtures + "fixtures/study_small.jsonl"}));
  // 1,980 / 1,000 on 2 GPUs: 1.98x, 99.0%; 13,800 / 7,000: 1.97x, 98.6%; PyTorch 12,000 / 6,600: 1.82x.
  EXPECT_NE(markdown.find("| dlbench | fp32 | 2 | 1.98x | 99.0% |"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("| dlbench | fp16 | 2 | 1.97x | 98.6% |"), std::string::npos);
  EXPECT_NE(markdown.find("| pytorch | fp16 | 2 | 1.82x | 90.9% |"), std::string::npos);
  EXPECT_NE(markdown.find("| dlbench | 1 | +600% | - |"), std::string::npos);   // 7,000 / 1,000
  EXPECT_NE(markdown.find("**large spread**"), std::string::npos);              // the 8.1% jitter point
  EXPECT_NE(markdown.find("NCCL: unhandled system error"), std::string::npos);  // the failed sweep point
  EXPECT_NE(markdown.find("dlbench (fp32) scales best, at 99.0% efficiency"), std::string::npos);
}

TEST(Report, EmptyInputIsOneClearError) {
  const std::string empty = ::testing::TempDir() + "/empty.jsonl";
  std::ofstream(empty).flush();
  try {
    run_report({empty}, ::testing::TempDir() + "/report-out");
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("no result in"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dlbench
