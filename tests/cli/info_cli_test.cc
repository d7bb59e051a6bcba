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

TEST(InfoCli, AFolderAsJsonPathIsRefusedFirstAndLeavesNothing) {
  namespace fs = std::filesystem;
  const auto dir = temp_dir("info_dir");
  fs::create_directories(dir / "results");
  for (const std::string& target : {(dir / "results").string(), (dir / "results").string() + "/"}) {
    CommandResult r = run_dlbench("info --json " + target);
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("--json"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << "refused before the table, not after: " << r.out;
    // No results.tmp, no temporary beside or inside it.
    int entries = 0;
    for (const auto& entry : fs::recursive_directory_iterator(dir)) entries += entry.exists();
    EXPECT_EQ(entries, 1);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dlbench::testing
