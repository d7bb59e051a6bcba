// `dlbench tokenize` run as the binary: a summary line and exit 0, or one error line and exit 1.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli/tiny_data.h"
#include "cli_util.h"
#include "temp_dir.h"

namespace dlbench::testing {
namespace {

namespace fs = std::filesystem;

TEST(TokenizeCli, WritesTrainAndValAndSaysTheSplit) {
  TempDir dir;
  write_file(dir.file("a.txt"), std::string(900, 'a'));
  write_file(dir.file("b.txt"), std::string(100, 'b'));
  const std::string out = dir.file("shards");
  const CommandResult r =
      run_dlbench("tokenize " + dir.file("a.txt") + " " + dir.file("b.txt") + " -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_CONTAINS(r.out, "900 train tokens");
  EXPECT_CONTAINS(r.out, "100 val tokens");
  EXPECT_CONTAINS(r.out, "the last 10% of the text by position");
  EXPECT_EQ(fs::file_size(out + "/train.bin"), 1024u + 2 * 900);
  EXPECT_EQ(fs::file_size(out + "/val.bin"), 1024u + 2 * 100);

  // Again without --force: refused, the files untouched; with it, replaced.
  expect_one_line_error(run_dlbench("tokenize " + dir.file("b.txt") + " -o " + out), "--force");
  EXPECT_EQ(fs::file_size(out + "/train.bin"), 1024u + 2 * 900);
  const CommandResult forced =
      run_dlbench("tokenize " + dir.file("b.txt") + " -o " + out + " --force --val-fraction 0.5");
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_EQ(fs::file_size(out + "/val.bin"), 1024u + 2 * 50);
}

TEST(TokenizeCli, BadInputIsOneLineAndExitOne) {
  TempDir dir;
  write_file(dir.file("empty.txt"), "");
  write_file(dir.file("a.txt"), "text");
  const std::string out = " -o " + dir.file("out");
  expect_one_line_error(run_dlbench("tokenize " + dir.file("none.txt") + out), "not found");
  expect_one_line_error(run_dlbench("tokenize " + dir.file("empty.txt") + out), "empty");
  expect_one_line_error(run_dlbench("tokenize " + dir.file("a.txt") + out + " --val-fraction 0.9"),
                        "--val-fraction 0.9");
  EXPECT_FALSE(fs::exists(dir.file("out")));
}

}  // namespace
}  // namespace dlbench::testing
