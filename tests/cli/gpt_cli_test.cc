// GPT models through the dlbench binary: train on token files (validation loss, tokens/s, checkpoint and
// an exact resume with AdamW's moments), bench on synthetic tokens, and bad flags as one line and exit 1.
// On the reference backend at short sequences: seconds each.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_util.h"
#include "temp_dir.h"

namespace dlbench::testing {
namespace {

// A small English text tokenized byte-level into DIR/train.bin and DIR/val.bin.
std::string tokenized_text(TempDir& dir) {
  std::string text;
  for (int i = 0; i < 60; ++i)
    text += "The licenses for most software are designed to take away your freedom to share and change it. ";
  write_file(dir.file("text.txt"), text);
  const CommandResult r = run_dlbench("tokenize " + dir.file("text.txt") + " -o " + dir.file("tokens"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return dir.file("tokens");
}

nlohmann::json run_json(const std::string& args, TempDir& dir, const std::string& name) {
  const std::string json = dir.file(name + ".json");
  const CommandResult r = run_dlbench(args + " --json " + json, 600);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  if (r.exit_code != 0) return {};
  return nlohmann::json::parse(read_text(json));
}

const char* kSmall = "--model gpt-mini --backend reference --seq-len 16 --batch-size 4 --seed 3";

TEST(GptCli, TrainReportsValidationLossAndTokensPerSecond) {
  TempDir dir;
  const std::string tokens = tokenized_text(dir);
  const nlohmann::json j =
      run_json(std::string("train ") + kSmall + " --data " + tokens + " --steps 4", dir, "t");
  ASSERT_TRUE(j.contains("val_loss"));
  EXPECT_GT(j["val_loss"].get<double>(), 0.0);
  EXPECT_LT(j["val_loss"].get<double>(), 6.0);
  EXPECT_EQ(j["parameters"], 858880);
  EXPECT_GT(j["tokens_per_second"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(j["tokens_per_second"].get<double>(), 16 * j["sequences_per_second"].get<double>());
  EXPECT_EQ(j["config"]["optimizer"], "adamw");
  EXPECT_EQ(j["config"]["seq_len"], 16);
  EXPECT_EQ(j["losses"].size(), 4u);
}

TEST(GptCli, ResumeContinuesExactlyWithAdamWsMoments) {
  TempDir dir;
  const std::string tokens = tokenized_text(dir);
  // A constant rate after a fixed warm-up: the run's length then does not change the schedule.
  const std::string base =
      std::string("train ") + kSmall + " --data " + tokens + " --lr-schedule constant --lr-warmup-steps 2";
  const std::string checkpoint = dir.file("half.ckpt");
  auto full = run_json(base + " --steps 6", dir, "full")["losses"].get<std::vector<double>>();
  auto first = run_json(base + " --steps 3 --checkpoint " + checkpoint, dir, "first")["losses"]
                   .get<std::vector<double>>();
  nlohmann::json second = run_json(base + " --steps 6 --resume " + checkpoint, dir, "second");
  auto rest = second["losses"].get<std::vector<double>>();
  ASSERT_EQ(full.size(), 6u);
  ASSERT_EQ(rest.size(), 3u);
  EXPECT_EQ(second["first_step"], 3);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(first[i], full[i]) << "step " << i + 1;
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(rest[i], full[3 + i]) << "step " << 4 + i;  // bit for bit
  // Another optimizer is another run: refused, naming a setting that differs.
  const CommandResult sgd =
      run_dlbench(base + " --steps 6 --optimizer sgd --lr 0.01 --resume " + checkpoint, 600);
  EXPECT_EQ(sgd.exit_code, 1);
  EXPECT_CONTAINS(sgd.err, "the checkpoint was written with");
}

TEST(GptCli, BenchOnSyntheticTokens) {
  TempDir dir;
  const nlohmann::json j =
      run_json(std::string("bench ") + kSmall + " --steps 2 --warmup-steps 1", dir, "bench");
  EXPECT_EQ(j["model"], "gpt-mini");
  EXPECT_GT(j["tokens_per_second"].get<double>(), 0.0);
  EXPECT_EQ(j["batch_size"], 4);
  EXPECT_GT(j["model_flops_per_token"].get<double>(), 6.0 * j["parameters"].get<double>());
  EXPECT_FALSE(j.contains("mfu")) << "no stated peak on the CPU";
}

// --recompute trains the same run: the same losses, step by step, and says so in the result's config.
TEST(GptCli, RecomputeTrainsTheSameLosses) {
  TempDir dir;
  const std::string tokens = tokenized_text(dir);
  const std::string base = std::string("train ") + kSmall + " --data " + tokens + " --steps 3";
  const nlohmann::json kept = run_json(base, dir, "kept"),
                       again = run_json(base + " --recompute", dir, "again");
  ASSERT_EQ(kept["losses"].size(), 3u);
  EXPECT_EQ(again["losses"], kept["losses"]);
  EXPECT_EQ(again["val_loss"], kept["val_loss"]);
  EXPECT_EQ(again["config"]["recompute"], true);
  EXPECT_EQ(kept["config"]["recompute"], false);
}

TEST(GptCli, BadFlagsAreOneLineAndExit1) {
  TempDir dir;
  for (const std::string& args :
       {std::string("train --model gpt-mini --seq-len 300"),
        std::string("train --model resnet20 --seq-len 8"),
        std::string("train --model gpt-mini --data ") + dir.file("missing"),
        std::string("train --model gpt-mini --optimizer adam"),
        std::string("train --model gpt-mini --optimizer sgd --clip-grad-norm 1"),
        std::string("train --model gpt-mini --adam-beta2 1"), std::string("bench --model gpt3"),
        std::string("bench --model resnet20 --recompute")}) {
    const CommandResult r = run_dlbench(args, 60);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << args << "\n" << r.err;
  }
  // A text too short for one step's windows.
  write_file(dir.file("short.txt"), std::string(200, 'x'));
  ASSERT_EQ(run_dlbench("tokenize " + dir.file("short.txt") + " -o " + dir.file("short")).exit_code, 0);
  const CommandResult r = run_dlbench(
      "train --model gpt-mini --backend reference --seq-len 16 --batch-size 64 --data " + dir.file("short"),
      60);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_CONTAINS(r.err, "smaller batch");
}

// Each way a token file can be wrong, given to the binary as --data: one line naming the file and what is
// wrong, exit 1, nothing trained.
TEST(GptCli, BadTokenFilesAreOneLineAndExit1) {
  TempDir dir;
  auto u16 = [](std::vector<uint16_t> tokens) {
    return std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  };
  auto llmc = [](int32_t magic, int32_t version, int32_t count, const std::string& tokens) {
    std::vector<int32_t> header(256, 0);
    header[0] = magic, header[1] = version, header[2] = count;
    return std::string(reinterpret_cast<const char*>(header.data()), header.size() * 4) + tokens;
  };
  const std::string text = u16(std::vector<uint16_t>(200, 'a'));
  const struct {
    const char* name;
    std::string bytes;
    const char* says;
  } cases[] = {
      {"empty.bin", "", "empty"},
      {"odd.bin", text + "x", "odd"},
      {"version.bin", llmc(20240520, 9, 200, text), "version"},
      {"count.bin", llmc(20240520, 1, 500, text), "500"},
      {"vocabulary.bin", u16({'a', 'b', 300, 'c'}), "300"},
      {"short.bin", u16(std::vector<uint16_t>(10, 'a')), "window"},
  };
  for (const auto& c : cases) {
    write_file(dir.file(c.name), c.bytes);
    const CommandResult r =
        run_dlbench(std::string("train ") + kSmall + " --steps 1 --data " + dir.file(c.name), 60);
    EXPECT_EQ(r.exit_code, 1) << c.name << "\n" << r.out << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << c.name << "\n" << r.err;
    EXPECT_CONTAINS(r.err, c.name);
    EXPECT_CONTAINS(r.err, c.says);
    EXPECT_EQ(r.out.find("step 1/1"), std::string::npos) << c.name << ": trained anyway";
  }
}

}  // namespace
}  // namespace dlbench::testing
