// The algorithm cache file (backend/algorithm_store.h): entries survive a process, a file another process
// saved meanwhile is merged, and a file that is not a cache is one clear error.
#include "backend/algorithm_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "core/status.h"
#include "temp_dir.h"

namespace dlbench {
namespace {

namespace fs = std::filesystem;

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

std::string user_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(AlgorithmStore, AMissingFileIsEmptyAndNothingAddedWritesNothing) {
  testing::TempDir dir;
  const fs::path path = dir.path() / "algorithms.json";
  AlgorithmStore store(path.string());
  EXPECT_EQ(store.size(), 0u);
  EXPECT_FALSE(store.find("a").has_value());
  store.save();
  EXPECT_FALSE(fs::exists(path));
}

TEST(AlgorithmStore, ChoicesSurviveTheProcessAndTheFirstChoiceStays) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "algorithms.json").string();
  {
    AlgorithmStore store(path);
    store.put("conv A", {1, 2, 3});
    store.put("conv A", {9, 9, 9});  // already chosen: kept as it was
    store.put("conv B", {4, 5, 6});
    EXPECT_EQ(store.find("conv A"), (std::vector<int64_t>{1, 2, 3}));
    store.save();
  }
  AlgorithmStore again(path);
  EXPECT_EQ(again.size(), 2u);
  EXPECT_EQ(again.find("conv A"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(again.find("conv B"), (std::vector<int64_t>{4, 5, 6}));
}

TEST(AlgorithmStore, SavingMergesWhatAnotherProcessSavedMeanwhile) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "algorithms.json").string();
  AlgorithmStore first(path), second(path);  // both read the missing file
  first.put("shared", {1});
  first.put("only first", {2});
  first.save();
  second.put("shared", {7});  // chosen independently; the file's earlier entry wins
  second.put("only second", {3});
  second.save();
  AlgorithmStore merged(path);
  EXPECT_EQ(merged.size(), 3u);
  EXPECT_EQ(merged.find("shared"), (std::vector<int64_t>{1}));
  EXPECT_EQ(merged.find("only first"), (std::vector<int64_t>{2}));
  EXPECT_EQ(merged.find("only second"), (std::vector<int64_t>{3}));
}

TEST(AlgorithmStore, AFileThatIsNotACacheIsOneClearError) {
  testing::TempDir dir;
  const fs::path path = dir.path() / "algorithms.json";
  write_text(path, "{\"results\": []}\n");
  EXPECT_EQ(user_error_of([&] { AlgorithmStore store(path.string()); }),
            "--algorithm-cache " + path.string() +
                ": not a dlbench algorithm cache (delete it, or name another file)");
  write_text(path, "not json at all");
  EXPECT_NE(user_error_of([&] { AlgorithmStore store(path.string()); }).find("not a dlbench algorithm cache"),
            std::string::npos);
  write_text(path, R"({"format": "dlbench-algorithm-cache-1", "choices": {"conv A": [1, "x"]}})");
  EXPECT_EQ(user_error_of([&] { AlgorithmStore store(path.string()); }),
            "--algorithm-cache " + path.string() + ": entry 'conv A' is not a list of integers");
}

}  // namespace
}  // namespace dlbench
