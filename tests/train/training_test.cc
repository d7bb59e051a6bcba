// End-to-end training through the dlbench binary: real convergence on Fashion-MNIST, bit-for-bit
// reproducibility from a seed, and checkpoint/resume continuing exactly where an uninterrupted run goes.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_util.h"

namespace dlbench::testing {
namespace {

namespace fs = std::filesystem;
const char* kFashionMnist = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";

nlohmann::json run_json(const std::string& args, const std::string& name) {
  fs::path json = temp_dir(name) / "result.json";
  CommandResult r = run_dlbench(args + " --json " + json.string(), 1500);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  if (r.exit_code != 0) return {};
  return nlohmann::json::parse(read_text(json.string()));
}

// resnet20 on all 60,000 training images for 2 epochs (936 steps of 128), cosine schedule with a short
// warm-up, evaluated on the full 10,000-image test set. About 6-8 minutes on 2 cores with the oneDNN
// backend; it reaches about 91%.
TEST(Convergence, ResNet20OnFashionMnistReaches90PercentWithOneDnn) {
  if (!fs::exists(kFashionMnist))
    GTEST_SKIP() << "Fashion-MNIST not installed (Debian: dataset-fashion-mnist)";
  nlohmann::json j = run_json(
      "train --model resnet20 --data fashion-mnist --backend onednn --layout nchw --epochs 2 --batch-size "
      "128 --lr 0.2 "
      "--nesterov --weight-decay 5e-4 --lr-schedule cosine --lr-warmup-epochs 0.2 --label-smoothing 0.0 "
      "--log-every 100",
      "convergence");
  ASSERT_TRUE(j.contains("test_accuracy"));
  double accuracy = j["test_accuracy"];
  std::printf("resnet20 Fashion-MNIST test accuracy: %.4f after %s steps\n", accuracy,
              j["steps"].dump().c_str());
  EXPECT_GE(accuracy, 0.90);
  EXPECT_LE(accuracy, 1.0);
  EXPECT_EQ(j["parameters"], 272186);
  // The loss fell: the mean of the last 50 steps is far below the first step's ~2.3.
  auto losses = j["losses"].get<std::vector<double>>();
  ASSERT_EQ(losses.size(), 936u);
  double tail = 0;
  for (size_t i = losses.size() - 50; i < losses.size(); ++i) tail += losses[i] / 50;
  EXPECT_LT(tail, 0.45);
  EXPECT_GT(losses.front(), 1.5);
}

TEST(Reproducibility, SameSeedGivesIdenticalLosses) {
  if (!fs::exists(kFashionMnist))
    GTEST_SKIP() << "Fashion-MNIST not installed (Debian: dataset-fashion-mnist)";
  const std::string args = "train --model resnet20 --data fashion-mnist --steps 12 --batch-size 32 --seed 5";
  auto a = run_json(args, "repro_a")["losses"].get<std::vector<double>>();
  auto b = run_json(args, "repro_b")["losses"].get<std::vector<double>>();
  ASSERT_EQ(a.size(), 12u);
  EXPECT_EQ(a, b);  // bit for bit
  auto c = run_json("train --model resnet20 --data fashion-mnist --steps 12 --batch-size 32 --seed 6",
                    "repro_c")["losses"]
               .get<std::vector<double>>();
  EXPECT_NE(a, c);  // and the seed matters
}

TEST(Checkpoint, ResumeContinuesExactlyLikeAnUninterruptedRun) {
  if (!fs::exists(kFashionMnist))
    GTEST_SKIP() << "Fashion-MNIST not installed (Debian: dataset-fashion-mnist)";
  fs::path dir = temp_dir("resume");
  std::string ckpt = (dir / "half.ckpt").string();
  // Fashion-MNIST has 1,875 steps per epoch at batch 32: the resume point sits mid-epoch, the harder case
  // (the data order must pick up where it stopped).
  // A constant rate: a cosine schedule depends on the run's length, so an 8-step run and the first half of
  // a 16-step run would differ by design, not by the checkpoint.
  const std::string base =
      "train --model resnet20 --data fashion-mnist --batch-size 32 --seed 9 --lr 0.05 "
      "--lr-schedule constant --momentum 0.9 --nesterov";
  auto full = run_json(base + " --steps 16", "resume_full")["losses"].get<std::vector<double>>();
  auto first =
      run_json(base + " --steps 8 --checkpoint " + ckpt, "resume_first")["losses"].get<std::vector<double>>();
  nlohmann::json second = run_json(base + " --steps 16 --resume " + ckpt, "resume_second");
  auto rest = second["losses"].get<std::vector<double>>();
  ASSERT_EQ(full.size(), 16u);
  ASSERT_EQ(first.size(), 8u);
  ASSERT_EQ(rest.size(), 8u);
  EXPECT_EQ(second["first_step"], 8);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(first[i], full[i]) << "step " << i + 1;
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(rest[i], full[8 + i]) << "step " << 9 + i;
}

}  // namespace
}  // namespace dlbench::testing
