// The algorithm cache (backend/tuning/algorithm_cache.h) on the CPU: choices survive a process, a file of
// another machine, of an older format or that is no JSON at all is ignored and rebuilt (never an error),
// two processes saving at once lose nothing, a save leaves no temporary behind, a cache held in memory
// writes nothing. And the pick rule (backend/tuning/pick.h) that makes a search repeatable.
#include "backend/tuning/algorithm_cache.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "backend/tuning/pick.h"
#include "temp_dir.h"

namespace dlbench::tuning {
namespace {

namespace fs = std::filesystem;

const MachineKey kMachine{"NVIDIA H200", "13000", "cudnn 91900 cublas 13.0.0", "0.1.0"};

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::json read_json(const fs::path& path) { return nlohmann::json::parse(read_text(path)); }

TEST(AlgorithmCache, ChoicesSurviveTheProcessAndTheFirstChoiceStays) {
  const dlbench::testing::TempDir dir;
  const std::string path = dir.file("algorithms.json");
  {
    AlgorithmCache cache(path);
    cache.bind(kMachine);
    EXPECT_EQ(cache.read_from_file(), 0u);
    EXPECT_EQ(cache.put("conv a", {{"algo", 1}}), nlohmann::json({{"algo", 1}}));
    // Another rank's later choice of the same shape: the first stays, and is what the caller runs.
    EXPECT_EQ(cache.put("conv a", {{"algo", 2}}), nlohmann::json({{"algo", 1}}));
    cache.save();
  }
  const nlohmann::json file = read_json(path);
  EXPECT_EQ(file["format"], "dlbench-algorithm-cache-2");
  EXPECT_EQ(file["machine"]["gpu"], "NVIDIA H200");
  AlgorithmCache again(path);
  EXPECT_FALSE(again.find("conv a")) << "nothing is read before bind()";
  again.bind(kMachine);
  EXPECT_EQ(again.read_from_file(), 1u);
  EXPECT_EQ(again.find("conv a").value(), nlohmann::json({{"algo", 1}}));
  EXPECT_NE(again.load_note().find("1 choices read"), std::string::npos) << again.load_note();
}

// Nothing added: no file written (a run that found every choice in the file leaves it untouched).
TEST(AlgorithmCache, NothingAddedWritesNothing) {
  const dlbench::testing::TempDir dir;
  const fs::path path = dir.path() / "algorithms.json";
  AlgorithmCache cache(path.string());
  cache.bind(kMachine);
  cache.save();
  EXPECT_FALSE(fs::exists(path));
}

// A corrupt file, another format, another machine: named, ignored (no entry of it is used) and rebuilt.
TEST(AlgorithmCache, ACorruptOrForeignFileIsIgnoredAndRebuilt) {
  const dlbench::testing::TempDir temp;
  const fs::path& dir = temp.path();
  MachineKey other = kMachine;
  other.driver = "12080";
  nlohmann::json foreign = {{"format", "dlbench-algorithm-cache-2"},
                            {"machine", other.to_json()},
                            {"choices", {{"conv a", {{"algo", 7}}}}}};
  const std::vector<std::pair<std::string, std::string>> files = {
      {"truncated", "{\"format\": \"dlbench-algorithm-cache-2\", \"choi"},
      {"not json", "\x01\x02 garbage"},
      {"a list", "[1, 2, 3]"},
      {"old format", R"({"format": "dlbench-algorithm-cache-1", "choices": {"conv a": [1, 2, 3]}})"},
      {"another machine", foreign.dump()}};
  for (const auto& [what, text] : files) {
    SCOPED_TRACE(what);
    const fs::path path = dir / "algorithms.json";
    std::ofstream(path) << text;
    AlgorithmCache cache(path.string());
    cache.bind(kMachine);  // never throws
    EXPECT_FALSE(cache.find("conv a"));
    EXPECT_EQ(cache.read_from_file(), 0u);
    EXPECT_NE(cache.load_note().find("ignored"), std::string::npos) << cache.load_note();
    cache.put("conv b", {{"algo", 3}});
    cache.save();
    const nlohmann::json rebuilt = read_json(path);
    EXPECT_EQ(rebuilt["machine"], kMachine.to_json());
    EXPECT_EQ(rebuilt["choices"].size(), 1u) << rebuilt.dump();
    EXPECT_EQ(rebuilt["choices"]["conv b"]["algo"], 3);
  }
  std::string why;
  std::ofstream(dir / "other.json") << foreign.dump();
  EXPECT_FALSE(read_cache_file((dir / "other.json").string(), kMachine, why));
  EXPECT_NE(why.find("made on NVIDIA H200, driver 12080"), std::string::npos) << why;
}

// An entry the backend cannot read is forgotten, and searched again.
TEST(AlgorithmCache, ForgetDropsAnEntry) {
  AlgorithmCache cache;
  cache.bind(kMachine);
  cache.put("conv a", "not a choice");
  cache.forget("conv a", "is not a convolution's choice");
  EXPECT_FALSE(cache.find("conv a"));
  EXPECT_EQ(cache.put("conv a", {{"algo", 1}}), nlohmann::json({{"algo", 1}}));
}

// --algorithm-cache none: held in memory, shared by the backends it is given to, never written.
TEST(AlgorithmCache, InMemoryWritesNoFile) {
  const dlbench::testing::TempDir temp;
  const fs::path& dir = temp.path();
  const fs::path before = fs::current_path();
  fs::current_path(dir);
  {
    AlgorithmCache cache;
    cache.bind(kMachine);
    EXPECT_TRUE(cache.path().empty());
    cache.put("conv a", {{"algo", 1}});
    cache.save();
    EXPECT_EQ(cache.find("conv a").value()["algo"], 1);
  }
  EXPECT_TRUE(fs::is_empty(dir));
  fs::current_path(before);
}

// Two objects of one file, as two processes: the second save keeps the first's entries.
TEST(AlgorithmCache, SavingMergesWhatAnotherProcessSavedMeanwhile) {
  const dlbench::testing::TempDir dir;
  const std::string path = dir.file("algorithms.json");
  AlgorithmCache first(path), second(path);
  first.bind(kMachine);
  second.bind(kMachine);  // both read the missing file
  first.put("conv a", 1);
  second.put("conv b", 2);
  second.put("conv a", 3);  // the file's entry (the first saver's) wins over a later process's
  first.save();
  second.save();
  const nlohmann::json file = read_json(path);
  EXPECT_EQ(file["choices"]["conv a"], 1);
  EXPECT_EQ(file["choices"]["conv b"], 2);
}

// Two processes saving the same file at the same time, many times: every entry of both ends in it, the
// file is a whole cache at the end, and no temporary is left beside it.
TEST(AlgorithmCache, TwoWritersAtOnceLoseNothing) {
  const dlbench::testing::TempDir temp;
  const fs::path& dir = temp.path();
  const std::string path = (dir / "algorithms.json").string();
  constexpr int kRounds = 20, kPerRound = 10;
  std::vector<pid_t> children;
  for (int writer = 0; writer < 2; ++writer) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      AlgorithmCache cache(path);
      cache.bind(kMachine);
      for (int round = 0; round < kRounds; ++round) {
        for (int i = 0; i < kPerRound; ++i)
          cache.put("writer " + std::to_string(writer) + " entry " + std::to_string(round * kPerRound + i),
                    round);
        cache.save();
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const nlohmann::json file = read_json(path);
  EXPECT_EQ(file["choices"].size(), static_cast<size_t>(2 * kRounds * kPerRound));
  EXPECT_EQ(dlbench::testing::temporaries_in(dir), 0);
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name == "algorithms.json" || name == "algorithms.json.lock") << "left behind: " << name;
  }
}

// The pick rule: the first candidate (in the fixed order) within the timing noise of the fastest.
TEST(PickWithinNoise, TheFirstWithinTheNoiseWinsNotTheFastest) {
  const std::vector<double> times{1.015, 1.0, 0.7 * 3};
  const std::optional<Pick> p = pick_within_noise(times, 0.02);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->index, 0u);  // 1.5% slower than the fastest: within 2%
  EXPECT_DOUBLE_EQ(p->fastest_ms, 1.0);
  EXPECT_DOUBLE_EQ(p->second_ms, 1.015);
  EXPECT_TRUE(p->close());
  // Outside the noise the fastest wins; the candidates that did not run (NaN, infinity) never do.
  const std::vector<double> apart{1.04, NAN, 1.0, INFINITY};
  EXPECT_EQ(pick_within_noise(apart, 0.02)->index, 2u);
  EXPECT_TRUE(pick_within_noise(apart, 0.02)->close());  // 4% apart: named, though not within the noise
  const std::vector<double> far{2.0, 1.0};
  EXPECT_FALSE(pick_within_noise(far)->close());
  const std::vector<double> alone{1.0};
  EXPECT_FALSE(pick_within_noise(alone)->close());
  const std::vector<double> none{NAN, INFINITY};
  EXPECT_FALSE(pick_within_noise(none));
  EXPECT_FALSE(pick_within_noise(std::vector<double>{}));
}

// Repeatable: times that move by less than the noise from one process to the next give the same pick.
TEST(PickWithinNoise, TimesThatMoveWithinTheNoiseGiveTheSamePick) {
  const std::vector<double> one{0.402, 0.400, 0.520}, other{0.399, 0.401, 0.515};
  EXPECT_EQ(pick_within_noise(one)->index, pick_within_noise(other)->index);
  // The default margin absorbs what eight processes measured: a candidate 2.0% slower in one and 2.5%
  // in another (a coin toss at a 2% margin), or 4% and 6%, keeps one pick.
  EXPECT_EQ(pick_within_noise(std::vector<double>{0.1251, 0.1227})->index,
            pick_within_noise(std::vector<double>{0.1258, 0.1227})->index);
  EXPECT_EQ(pick_within_noise(std::vector<double>{1.04, 1.0})->index,
            pick_within_noise(std::vector<double>{1.06, 1.0})->index);
  // Outside it, the fastest wins.
  EXPECT_EQ(pick_within_noise(std::vector<double>{1.10, 1.0})->index, 1u);
}

// The candidates timed again before a pick: those a time near the margin's edge could swing (within
// kEdgeBand of kTimingNoise, either side); a pick with no time near the edge is not.
TEST(PickWithinNoise, TimesNearTheMarginsEdgeAreLookedAtAgain) {
  const std::vector<double> under{1.065, 1.0}, over{1.075, 1.0};
  EXPECT_EQ(ambiguous_contenders(under), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(ambiguous_contenders(over), (std::vector<size_t>{0, 1}));
  // Clear outcomes: 0.5% apart (within the noise), 15% apart (outside it), a lone candidate.
  EXPECT_TRUE(ambiguous_contenders(std::vector<double>{1.005, 1.0}).empty());
  EXPECT_TRUE(ambiguous_contenders(std::vector<double>{1.15, 1.0}).empty());
  EXPECT_TRUE(ambiguous_contenders(std::vector<double>{1.0, NAN}).empty());
  // With one near the edge, every candidate within the margin and the band is a contender, far ones not.
  const std::vector<double> mixed{1.072, 1.0, 1.5, 1.012, INFINITY};
  EXPECT_EQ(ambiguous_contenders(mixed), (std::vector<size_t>{0, 1, 3}));
}

}  // namespace
}  // namespace dlbench::tuning
