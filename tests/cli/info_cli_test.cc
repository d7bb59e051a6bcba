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

// dlbench gives the CUDA driver 32 hardware queues unless the environment names a number (apps/dlbench.cc),
// and the result records what was in effect.
TEST(InfoCli, RecordsTheHardwareQueuesItRanWith) {
  const auto dir = temp_dir("info_queues");
  const std::string json = (dir / "info.json").string();
  for (const auto& [prefix, expected] :
       {std::pair<std::string, std::string>{"env -u CUDA_DEVICE_MAX_CONNECTIONS ", "32"},
        {"env CUDA_DEVICE_MAX_CONNECTIONS=4 ", "4"}}) {
    CommandResult r = run_shell(prefix + DLBENCH_BINARY + " info --json " + json);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(read_text(json));
    EXPECT_EQ(j["environment"].value("CUDA_DEVICE_MAX_CONNECTIONS", ""), expected) << prefix;
  }
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
