#include "models/gpt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "nn/memory_plan.h"

namespace dlbench {
namespace {

// The model planned (shapes and parameters, nothing allocated): enough to count and name parameters.
Model planned_gpt(Backend& backend, const std::string& name, int64_t batch, int64_t seq_len) {
  NetworkOptions options;
  options.batch = batch;
  Model model = build_gpt(name, backend, options, seq_len);
  model.net->plan_memory_only();
  return model;
}

struct Expected {
  const char* name;
  int64_t layers, heads, channels;
  int64_t parameters;  // with the unpadded vocabulary (GPT-2's published sizes)
};

class GptSizes : public ::testing::TestWithParam<Expected> {};

TEST_P(GptSizes, ParameterCountsPaddedAndNot) {
  const Expected& e = GetParam();
  auto backend = make_reference_backend();
  const GptSpec spec = gpt_spec(e.name);
  EXPECT_EQ(spec.layers, e.layers);
  EXPECT_EQ(spec.heads, e.heads);
  EXPECT_EQ(spec.channels, e.channels);
  EXPECT_EQ(spec.context, 1024);
  EXPECT_EQ(spec.vocab, 50257);
  EXPECT_EQ(spec.padded_vocab, 50304);
  EXPECT_EQ(gpt_parameter_count(spec, spec.vocab), e.parameters);
  Model model = planned_gpt(*backend, e.name, 1, 1);
  // The network holds the padded table: 47 rows more.
  EXPECT_EQ(model.net->parameter_count(), e.parameters + 47 * e.channels);
  EXPECT_EQ(model.net->parameter_count(), gpt_parameter_count(spec, spec.padded_vocab));
  EXPECT_EQ(model.trained_parameters(), e.parameters);
  // 6 FLOPs per trained parameter and token, and the attention's 12 x layers x width x T (T = 1 here).
  EXPECT_DOUBLE_EQ(model.flops_per_token, 6.0 * double(e.parameters) + 12.0 * double(e.layers * e.channels));
}

// At the full context, GPT-2 124M's count (nanoGPT's estimate_mfu: 6N + 12 L H Q T).
TEST(Gpt, Gpt2FlopsPerTokenAtItsContext) {
  auto backend = make_reference_backend();
  Model model = planned_gpt(*backend, "gpt2", 1, 1024);
  EXPECT_DOUBLE_EQ(model.flops_per_token, 6.0 * 124439808 + 12.0 * 12 * 768 * 1024);  // 859,885,056
}

INSTANTIATE_TEST_SUITE_P(Family, GptSizes,
                         ::testing::Values(Expected{"gpt2", 12, 12, 768, 124439808},
                                           Expected{"gpt2-medium", 24, 16, 1024, 354823168},
                                           Expected{"gpt2-large", 36, 20, 1280, 774030080},
                                           Expected{"gpt2-xl", 48, 25, 1600, 1557611200}),
                         [](const auto& info) {
                           std::string name = info.param.name;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

TEST(Gpt, Gpt2ParameterNamesAreNanoGpts) {
  auto backend = make_reference_backend();
  Model model = planned_gpt(*backend, "gpt2", 1, 4);
  std::set<std::string> names;
  for (const auto& p : model.net->memory().parameters()) names.insert(p.name);
  // 2 embeddings + 12 per block + ln_f's 2; the head adds none (tied).
  EXPECT_EQ(names.size(), 2u + 12u * 12u + 2u);
  for (const char* expected :
       {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
        "transformer.h.0.ln_1.bias", "transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_attn.bias",
        "transformer.h.0.attn.c_proj.weight", "transformer.h.0.ln_2.weight",
        "transformer.h.0.mlp.c_fc.weight", "transformer.h.11.mlp.c_proj.bias", "transformer.ln_f.weight",
        "transformer.ln_f.bias"})
    EXPECT_TRUE(names.count(expected)) << expected;
  EXPECT_FALSE(names.count("lm_head.weight"));
}

TEST(Gpt, MiniShapesAndGpt2Initialisation) {
  auto backend = make_reference_backend();
  NetworkOptions options;
  options.batch = 2;
  Model model = build_gpt("gpt-mini", *backend, options, 16);
  model.net->finalize(5);
  EXPECT_EQ(model.family, ModelFamily::gpt);
  EXPECT_EQ(model.tokens->value.dims(), (std::vector<int64_t>{2, 16}));
  EXPECT_EQ(model.targets->value.dims(), (std::vector<int64_t>{2, 16}));
  EXPECT_EQ(model.logits->value.dims(), (std::vector<int64_t>{32, 256}));
  EXPECT_EQ(model.num_classes, 256);
  EXPECT_EQ(model.padding_parameters, 0);
  EXPECT_EQ(model.input(), model.tokens);
  // Each parameter's spread: N(0, 0.02) weights, residual projections 0.02 / sqrt(2 * 4), zero biases,
  // layer norms 1 and 0.
  const float* flat = model.net->memory().flat_parameters().ptr<float>();
  for (const auto& p : model.net->memory().parameters()) {
    const int64_t n = p.value->numel();
    double sum = 0, squares = 0;
    for (int64_t i = 0; i < n; ++i) {
      sum += flat[p.offset + i];
      squares += double(flat[p.offset + i]) * flat[p.offset + i];
    }
    const double mean = sum / n, stddev = std::sqrt(squares / n - mean * mean);
    const bool projection = p.name.find("c_proj.weight") != std::string::npos;
    if (p.name.find("ln") != std::string::npos && p.name.ends_with(".weight")) {
      EXPECT_EQ(mean, 1.0) << p.name;
      EXPECT_EQ(stddev, 0.0) << p.name;
    } else if (p.name.ends_with(".bias")) {
      EXPECT_EQ(squares, 0.0) << p.name;
    } else {
      const double expected = projection ? 0.02 / std::sqrt(8.0) : 0.02;
      EXPECT_NEAR(stddev, expected, 0.05 * expected) << p.name;
      EXPECT_NEAR(mean, 0.0, 5 * expected / std::sqrt(double(n))) << p.name;
    }
  }
  // One forward pass: a loss near log(256) for weights this small (logits of std 0.02 sqrt(128)).
  for (int64_t i = 0; i < 32; ++i) {
    model.tokens->value.ptr<int32_t>()[i] = static_cast<int32_t>(i * 7 % 256);
    model.targets->value.ptr<int32_t>()[i] = static_cast<int32_t>(i * 11 % 256);
  }
  model.net->forward(Phase::train);
  EXPECT_NEAR(model.loss->output()->value.ptr<float>()[0], std::log(256.0), 0.15);
}

// The loss writes the logits' gradient over the logits (LossGradient::over_the_logits): one tensor of
// [N, V] in the compute dtype where there were three (the logits, their gradient, f32 probabilities).
TEST(Gpt, TheLogitsGradientTakesTheLogitsMemory) {
  auto backend = make_reference_backend();
  NetworkOptions options;
  options.batch = 2;
  Model model = build_gpt("gpt-mini", *backend, options, 16);
  model.net->finalize(5);
  EXPECT_EQ(model.logits->grad.data(), model.logits->value.data());
  for (const Placement& p : model.net->memory().placements())
    EXPECT_EQ(p.name.find("probabilities"), std::string::npos) << p.name;
  // gpt2 at batch 4 x 1024 in bf16: the activations are under the [N, V] tensors' three copies that the
  // head took before.
  NetworkOptions big;
  big.batch = 4;
  big.dtype = DType::bf16;
  Model gpt2 = build_gpt("gpt2", *backend, big, 1024);
  gpt2.net->plan_memory_only();
  const double logits_bytes = 4.0 * 1024 * 50304 * 2;
  EXPECT_LT(double(gpt2.net->memory().activation_bytes()), 2.0 * logits_bytes + 1.3e9)
      << gpt2.net->memory().activation_bytes();
}

TEST(Gpt, ModelListAndErrors) {
  for (const char* name : {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt-mini"}) {
    EXPECT_TRUE(is_gpt_model(name)) << name;
    EXPECT_TRUE(is_model_name(name)) << name;
    EXPECT_EQ(model_family(name), ModelFamily::gpt);
  }
  EXPECT_EQ(model_family("resnet50"), ModelFamily::resnet);
  EXPECT_FALSE(is_gpt_model("resnet50"));
  EXPECT_FALSE(is_model_name("gpt3"));
  EXPECT_THROW(gpt_spec("gpt3"), UserError);
  EXPECT_THROW(model_family("gpt3"), UserError);
  auto backend = make_reference_backend();
  NetworkOptions options;
  // A sequence longer than the context, and none at all.
  EXPECT_THROW(build_gpt("gpt-mini", *backend, options, 257), UserError);
  EXPECT_THROW(build_gpt("gpt-mini", *backend, options, -1), UserError);
  // 0: the model's context.
  Model model = build_gpt("gpt-mini", *backend, options, 0);
  EXPECT_EQ(model.seq_len, 256);
  try {
    build_model("gpt3", *backend, options, ModelOptions{});
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("gpt2-medium"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dlbench
