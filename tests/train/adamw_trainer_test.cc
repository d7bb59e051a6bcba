// The trainer with AdamW on a GPT model (reference backend, gpt-mini on short sequences), and the
// optimizer's choice and defaults by model family in the run's configuration.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "data/token_source.h"
#include "models/gpt.h"
#include "nn/network.h"
#include "train/config.h"
#include "train/trainer.h"

namespace dlbench {
namespace {

// A text of a few words repeated: learnable well below the entropy of its bytes taken one by one.
class RepeatedText final : public TokenSource {
 public:
  explicit RepeatedText(int64_t size) {
    const std::string words = "the quick brown fox jumps over the lazy dog. ";
    for (int64_t i = 0; i < size; ++i) tokens_.push_back(static_cast<unsigned char>(words[i % words.size()]));
  }
  std::string name() const override { return "repeated text"; }
  int64_t size() const override { return static_cast<int64_t>(tokens_.size()); }
  int64_t vocab_size() const override { return 256; }
  void read(int64_t first, std::span<int32_t> out) const override {
    for (size_t i = 0; i < out.size(); ++i) out[i] = tokens_[static_cast<size_t>(first) + i];
  }

 private:
  std::vector<int32_t> tokens_;
};

RunConfig gpt_mini_config(int64_t batch, int64_t seq_len) {
  RunConfig c;
  c.kind = RunKind::train;
  c.model.name = "gpt-mini";
  c.model.seq_len = seq_len;
  c.batch_size = batch;
  c.steps = 40;
  c.device_request = DeviceRequest::cpu;
  c.backend_name = "reference";
  resolve_config(c, /*cuda_available=*/false);
  return c;
}

struct MiniRun {
  std::unique_ptr<Backend> backend = make_reference_backend();
  Model model;
  std::unique_ptr<Trainer> trainer;
  // `fp8`: the dense layers on FP8 operands (the reference backend's definition of them, in an f32 network).
  explicit MiniRun(const RunConfig& config, bool fp8 = false) {
    NetworkOptions options;
    options.batch = *config.batch_size;
    if (fp8) options.fp8 = Fp8Recipe{4, 0};
    model = build_gpt("gpt-mini", *backend, options, config.model.seq_len);
    trainer = std::make_unique<Trainer>(*backend, model, config);
  }
  // Step `step`'s batch: windows `step * batch ...` of the text, cyclically.
  float step(const TokenSource& text, int64_t step, double lr) {
    const int64_t batch = model.batch(), seq = model.seq_len;
    const int64_t windows = (text.size() - 1) / seq;
    std::vector<int64_t> starts;
    for (int64_t i = 0; i < batch; ++i) starts.push_back(((step * batch + i) % windows) * seq);
    return trainer->step([&](int64_t) { trainer->load_tokens(text, starts); }, lr, true);
  }
};

TEST(OptimizerChoice, GptModelsTakeAdamWAndResNetsKeepSgd) {
  RunConfig gpt = gpt_mini_config(4, 0);
  EXPECT_EQ(gpt.optimizer.kind, OptimizerKind::adamw);
  EXPECT_DOUBLE_EQ(gpt.optimizer.lr, 2e-3);
  EXPECT_DOUBLE_EQ(gpt.optimizer.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(gpt.optimizer.clip_grad_norm.value_or(-1), 1.0);
  EXPECT_FALSE(gpt.optimizer.decay_norm_and_bias);
  EXPECT_EQ(gpt.model.seq_len, 256);  // the model's context
  EXPECT_EQ(config_to_json(gpt)["optimizer"], "adamw");

  RunConfig resnet;
  resnet.kind = RunKind::bench;
  resnet.model.name = "resnet20";
  resnet.device_request = DeviceRequest::cpu;
  resolve_config(resnet, false);
  EXPECT_EQ(resnet.optimizer.kind, OptimizerKind::sgd);
  EXPECT_DOUBLE_EQ(resnet.optimizer.lr, 0.1);
  EXPECT_DOUBLE_EQ(resnet.optimizer.weight_decay, 5e-5);
  EXPECT_TRUE(resnet.optimizer.decay_norm_and_bias);
  EXPECT_FALSE(config_to_json(resnet).contains("optimizer"));  // a ResNet's result keeps its fields
  EXPECT_FALSE(resume_settings(resnet).contains("--optimizer"));
}

TEST(OptimizerChoice, BadCombinationsAreOneLine) {
  auto refuses = [](const std::function<void(RunConfig&)>& change) {
    RunConfig c;
    c.kind = RunKind::train;
    c.model.name = "gpt-mini";
    c.device_request = DeviceRequest::cpu;
    change(c);
    EXPECT_THROW(resolve_config(c, false), UserError);
  };
  refuses([](RunConfig& c) { c.model.seq_len = 257; });
  refuses([](RunConfig& c) { c.model.image_size = 64; });
  refuses([](RunConfig& c) { c.optimizer.adam_beta2 = 1.0; });
  refuses([](RunConfig& c) { c.optimizer.adam_eps = 0; });
  refuses([](RunConfig& c) { c.optimizer.nesterov = true; });
  refuses([](RunConfig& c) {
    c.optimizer.kind_request = OptimizerKind::sgd;
    c.optimizer.clip_grad_norm = 1.0;
  });
  refuses([](RunConfig& c) {
    c.model.name = "resnet20";
    c.model.seq_len = 64;
  });
  EXPECT_THROW(parse_optimizer("adam"), UserError);
}

TEST(AdamWTraining, GptMiniLearnsARepeatedText) {
  const RunConfig config = gpt_mini_config(4, 16);
  MiniRun run(config);
  RepeatedText text(4000);
  std::vector<float> losses;
  for (int64_t s = 0; s < 40; ++s) losses.push_back(run.step(text, s, 3e-3));
  // From about log(256) = 5.55 to well below what the text's byte frequencies alone give (~2.9 nats).
  EXPECT_NEAR(losses.front(), std::log(256.0), 0.3);
  const double tail = std::accumulate(losses.end() - 5, losses.end(), 0.0) / 5;
  EXPECT_LT(tail, 1.5) << "last losses " << losses[35] << " .. " << losses[39];
}

TEST(AdamWTraining, CheckpointKeepsBothMomentsAndTheStepCount) {
  const RunConfig config = gpt_mini_config(2, 8);
  RepeatedText text(2000);
  MiniRun straight(config);
  std::vector<float> expected;
  for (int64_t s = 0; s < 6; ++s) expected.push_back(straight.step(text, s, 2e-3));

  MiniRun first(config);
  for (int64_t s = 0; s < 3; ++s) first.step(text, s, 2e-3);
  Checkpoint checkpoint = first.trainer->make_checkpoint(3, 0);
  EXPECT_EQ(checkpoint.second_moment.size(), checkpoint.parameters.size());
  EXPECT_EQ(checkpoint.momentum.size(), checkpoint.parameters.size());
  MiniRun resumed(config);
  resumed.trainer->restore(checkpoint);
  for (int64_t s = 3; s < 6; ++s)
    EXPECT_EQ(resumed.step(text, s, 2e-3), expected[static_cast<size_t>(s)]) << "step " << s;  // bit for bit

  // Without the second moment (or with m zeroed) the resumed run differs: the test can fail.
  Checkpoint broken = checkpoint;
  std::fill(broken.second_moment.begin(), broken.second_moment.end(), 0.f);
  MiniRun wrong(config);
  wrong.trainer->restore(broken);
  wrong.step(text, 3, 2e-3);
  EXPECT_NE(wrong.step(text, 4, 2e-3), expected[4]);
}

TEST(AdamWTraining, ValidationLossIsTheMeanOverWindows) {
  const RunConfig config = gpt_mini_config(3, 8);
  MiniRun run(config);
  RepeatedText text(500);
  const std::vector<int64_t> starts = {0, 8, 16, 24};  // a batch and a short one, filled up
  auto keep_going = [](int64_t, int64_t) { return true; };
  const std::optional<double> loss = run.trainer->evaluate_loss(text, starts, keep_going);
  ASSERT_TRUE(loss.has_value());
  EXPECT_NEAR(*loss, std::log(256.0), 0.3);
  EXPECT_FALSE(run.trainer->evaluate_loss(text, starts, [](int64_t, int64_t) { return false; }).has_value());
}

// FP8 dense layers through the trainer: gpt-mini learns the text as in f32; the first step's scales come
// from a calibration pass (every operand's history holds two amaxes after one step: the calibration's
// and the step's); and a checkpoint brings the scales back, so that a resumed run goes on exactly.
TEST(AdamWTraining, GptMiniLearnsARepeatedTextInFp8) {
  const RunConfig config = gpt_mini_config(4, 16);
  MiniRun run(config, true);
  RepeatedText text(4000);
  std::vector<float> losses;
  for (int64_t s = 0; s < 40; ++s) {
    losses.push_back(run.step(text, s, 3e-3));
    if (s == 0) {
      const Fp8Scaling& fp8 = *run.model.net->fp8();
      const std::vector<float> state = fp8.state();
      const size_t n = static_cast<size_t>(fp8.operands()), length = 4;
      for (size_t i = 0; i < n; ++i) {
        const float* history = state.data() + 3 * n + i * length;
        EXPECT_GT(history[0], 0.f) << "operand " << i << ": the first step counted nothing";
        EXPECT_GT(history[1], 0.f) << "operand " << i << ": no calibration pass before the first step";
        EXPECT_EQ(history[2], 0.f) << "operand " << i;
      }
    }
  }
  EXPECT_NEAR(losses.front(), std::log(256.0), 0.3);
  const double tail = std::accumulate(losses.end() - 5, losses.end(), 0.0) / 5;
  EXPECT_LT(tail, 1.5) << "last losses " << losses[35] << " .. " << losses[39];
}

TEST(AdamWTraining, Fp8CheckpointResumesExactly) {
  const RunConfig config = gpt_mini_config(2, 8);
  RepeatedText text(2000);
  MiniRun straight(config, true);
  std::vector<float> expected;
  for (int64_t s = 0; s < 6; ++s) expected.push_back(straight.step(text, s, 2e-3));

  MiniRun first(config, true);
  for (int64_t s = 0; s < 3; ++s) first.step(text, s, 2e-3);
  const Checkpoint checkpoint = first.trainer->make_checkpoint(3, 0);
  MiniRun resumed(config, true);
  resumed.trainer->restore(checkpoint);
  for (int64_t s = 3; s < 6; ++s)
    EXPECT_EQ(resumed.step(text, s, 2e-3), expected[static_cast<size_t>(s)]) << s;
  EXPECT_EQ(resumed.model.net->fp8()->state(), straight.model.net->fp8()->state());
}

}  // namespace
}  // namespace dlbench
