// run_process: exit status and captured output, output to a log file, the time-out killing the whole
// process group, and a program that cannot be started.
#include "core/process.h"

#include <gtest/gtest.h>

#include "temp_dir.h"

namespace dlbench {
namespace {

TEST(Process, CapturesBothStreamsAndTheExitStatus) {
  const ProcessResult r = run_process({"sh", "-c", "echo to-out; echo to-err >&2; exit 3"}, {});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.out, "to-out\n");
  EXPECT_EQ(r.err, "to-err\n");
}

TEST(Process, ALogFileGetsBothStreamsAndTheFolderIsTheOneAsked) {
  testing::TempDir dir;
  ProcessOptions options;
  options.cwd = dir.path().string();
  options.log_path = dir.file("run.log");
  const ProcessResult r = run_process({"sh", "-c", "pwd; echo oops >&2"}, options);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(testing::read_file(options.log_path), dir.path().string() + "\noops\n");
}

TEST(Process, TheTimeOutKillsTheWholeGroup) {
  testing::TempDir dir;
  ProcessOptions options;
  options.timeout_seconds = 0.5;
  // The child starts a grandchild that would touch a file after 2 s: the kill must reach it too.
  const std::string marker = dir.file("late");
  const ProcessResult r = run_process({"sh", "-c", "(sleep 2; touch " + marker + ") & sleep 30"}, options);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.exit_code, -1);
  EXPECT_LT(r.seconds, 10);
  ::sleep(3);
  EXPECT_FALSE(std::filesystem::exists(marker));
}

TEST(Process, AProgramThatCannotStartIs127WithOneLine) {
  const ProcessResult r = run_process({"/nonexistent/program", "--flag"}, {});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_CONTAINS(r.err, "cannot run /nonexistent/program");
  EXPECT_FALSE(find_program("/nonexistent/program"));
  EXPECT_TRUE(find_program("sh"));
}

}  // namespace
}  // namespace dlbench
