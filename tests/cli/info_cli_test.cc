// `dlbench info`: the system table as text and as JSON.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_util.h"

namespace dlbench::testing {
namespace {

TEST(InfoCli, PrintsTheTableAndWritesTheSameAsJson) {
  const auto dir = temp_dir("info");
  const std::string json = (dir / "info.json").string();
  CommandResult r = run_dlbench("info --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cpu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("software"), std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(read_text(json));
  EXPECT_NE(r.out.find(j["cpu"].get<std::string>()), std::string::npos);
  EXPECT_GT(j["logical_cores"].get<int>(), 0);
  std::filesystem::remove_all(dir);
}

TEST(InfoCli, AnUnwritableJsonPathIsOneLine) {
  CommandResult r = run_dlbench("info --json /nonexistent-dir/info.json");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
}

}  // namespace
}  // namespace dlbench::testing
