// The peers under dlbench's protocol, where their framework is installed (PyTorch on the CPU here; the
// tests skip, saying why, where it is not): the result's fields, one line and exit 2 for a bad flag,
// exit 3 when the framework is missing, and `dlbench compare` running the real PyTorch peer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli_util.h"
#include "temp_dir.h"

namespace dlbench::testing {
namespace {

const std::string kPeers = std::string(DLBENCH_SOURCE_DIR) + "/peers";

// The first interpreter that imports `modules`: python3 on PATH, then Debian's.
std::optional<std::string> python_with(const std::string& modules) {
  for (const std::string python : {"python3", "/usr/bin/python3"})
    if (std::system((python + " -c 'import " + modules + "' >/dev/null 2>&1").c_str()) == 0) return python;
  return std::nullopt;
}

TEST(PyTorchPeer, WritesTheProtocolsFieldsOnTheCpu) {
  const auto python = python_with("torch, torchvision");
  if (!python) GTEST_SKIP() << "no python3 with torch and torchvision: the PyTorch peer is not run";
  const auto dir = temp_dir("peer_pytorch");
  const std::string json = (dir / "r.json").string();
  CommandResult r = run_shell(*python + " " + kPeers + "/pytorch/train.py --model resnet20 --batch-size 16 " +
                              "--steps 3 --warmup-steps 1 --threads 2 --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(read_text(json));
  EXPECT_EQ(j["framework"], "pytorch");
  EXPECT_EQ(j["model"], "resnet20");
  EXPECT_EQ(j["batch_size"], 16);
  EXPECT_EQ(j["step_times_ms"].size(), 3u);
  EXPECT_GT(j["images_per_second"].get<double>(), 0);
  EXPECT_GT(j["step_ms"]["median"].get<double>(), 0);
  EXPECT_TRUE(j["energy_joules_per_image"].is_null());  // no GPU counter on the CPU
  std::filesystem::remove_all(dir);
}

TEST(PyTorchPeer, BadFlagsAreOneLineAndExitTwo) {
  const auto python = python_with("torch, torchvision");
  if (!python) GTEST_SKIP() << "no python3 with torch and torchvision: the PyTorch peer is not run";
  for (const std::string flags : {"--batch-size 0", "--batch-size max", "--model resnet9", "--steps -1"}) {
    CommandResult r = run_shell(*python + " " + kPeers + "/pytorch/train.py " + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << ": " << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << flags << ": " << r.err;
  }
}

TEST(PyTorchGptPeer, WritesTokensPerSecondOnTheCpu) {
  const auto python = python_with("torch");
  if (!python) GTEST_SKIP() << "no python3 with torch: the PyTorch GPT peer is not run";
  const auto dir = temp_dir("peer_gpt");
  const std::string json = (dir / "r.json").string();
  CommandResult r = run_shell(*python + " " + kPeers +
                              "/pytorch/gpt.py --model gpt-mini --batch-size 2 --seq-len 32 --steps 2 "
                              "--warmup-steps 1 --precision fp32 --threads 2 --json " +
                              json);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(read_text(json));
  EXPECT_EQ(j["model"], "gpt-mini");
  EXPECT_EQ(j["seq_len"], 32);
  EXPECT_DOUBLE_EQ(j["tokens_per_second"].get<double>(), 32 * j["sequences_per_second"].get<double>());
  std::filesystem::remove_all(dir);
}

TEST(PyTorchGptPeer, WithoutTorchOrWithABadFlagItSaysSoInOneLine) {
  const auto python = python_with("sys");
  if (!python) GTEST_SKIP() << "no python3 here: the GPT peer cannot be started";
  const bool torch = python_with("torch").has_value();
  CommandResult r = run_shell(*python + " " + kPeers + "/pytorch/gpt.py --model gpt9");
  EXPECT_EQ(r.exit_code, torch ? 2 : 3) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
}

// The training peer (gpt_train.py) learns from `dlbench tokenize`'s files under dlbench train's recipe:
// on the CPU, gpt-mini's loss falls and the val loss is reported.
TEST(PyTorchGptTrainPeer, LearnsFromTokenizedTextOnTheCpu) {
  const auto python = python_with("torch, numpy");
  if (!python) GTEST_SKIP() << "no python3 with torch and numpy: the PyTorch GPT training peer is not run";
  const auto dir = temp_dir("peer_gpt_train");
  const std::string tokens = (dir / "tokens").string(), json = (dir / "r.json").string();
  ASSERT_EQ(run_dlbench("tokenize /usr/share/common-licenses/GPL-3 -o " + tokens).exit_code, 0);
  CommandResult r =
      run_shell(*python + " " + kPeers + "/pytorch/gpt_train.py --model gpt-mini --data " + tokens +
                " --batch-size 8 --seq-len 64 --steps 60 --precision fp32 --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(read_text(json));
  ASSERT_EQ(j["losses"].size(), 60u);
  EXPECT_LT(j["losses"].back().get<double>(), j["losses"].front().get<double>() - 1.0);
  EXPECT_LT(j["val_loss"].get<double>(), std::log(256.0));  // below a uniform guess over the bytes
  std::filesystem::remove_all(dir);
}

TEST(PyTorchGptTrainPeer, WithoutTorchOrWithBadDataItSaysSoInOneLine) {
  const auto python = python_with("sys");
  if (!python) GTEST_SKIP() << "no python3 here: the GPT training peer cannot be started";
  const bool torch = python_with("torch, numpy").has_value();
  CommandResult r = run_shell(*python + " " + kPeers + "/pytorch/gpt_train.py --data /nonexistent");
  EXPECT_EQ(r.exit_code, torch ? 2 : 3) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
}

TEST(JaxPeer, WithoutJaxItSaysSoAndExitsThree) {
  const auto python = python_with("sys");
  if (!python) GTEST_SKIP() << "no python3 here: the JAX peer cannot be started";
  if (python_with("jax")) GTEST_SKIP() << "JAX is installed here: the missing-JAX path is not taken";
  CommandResult r = run_shell(*python + " " + kPeers + "/jax/train.py --model resnet50");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_CONTAINS(r.err, "JAX is not installed");
}

TEST(CompareCli, RunsTheRealPyTorchPeerBesideDlbench) {
  const auto python = python_with("torch, torchvision");
  if (!python) GTEST_SKIP() << "no python3 with torch and torchvision: the PyTorch peer is not run";
  const auto dir = temp_dir("compare_real");
  const std::string results = (dir / "points.jsonl").string();
  const std::string grid =
      " --device cpu --models resnet20 --precisions fp32 --batch-sizes 16 --steps 2 "
      "--warmup-steps 1 --results " +
      results;
  CommandResult r = run_dlbench("sweep" + grid);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  r = run_dlbench("compare --frameworks pytorch --python " + *python + " --peers " + kPeers + grid);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  r = run_dlbench("report " + results + " -o " + (dir / "report").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string markdown = read_text((dir / "report" / "report.md").string());
  EXPECT_CONTAINS(markdown, "| dlbench (CPU) | fp32 |");
  EXPECT_CONTAINS(markdown, "| pytorch (CPU) | fp32 |");
  // The conclusion sets the two side by side, whichever is faster.
  EXPECT_CONTAINS(markdown, "resnet20 fp32 on 1 process: ");
  EXPECT_CONTAINS(markdown, "x as fast as ");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dlbench::testing
