// Finite-difference gradient checks of the transformer layers (GPT-2's), in double precision on the
// reference backend, as layer_gradient_test.cc does for the CNN layers.
//
// Each check builds a small language model around the layer under test: tokens -> embedding (token +
// position) -> the layer(s) -> tied head (logits = x wte^T) -> padded cross-entropy, so the loss is a
// scalar of everything. The embedding's tables sit upstream of every layer: their gradients are only
// right if every input gradient in between is, so checking them checks the input gradients too. wte gets
// both the head's and the embedding's gradient, in one buffer: the numeric difference perturbs the one
// parameter both layers read. Tolerance: |analytic - numeric| <= 1e-7 + 1e-5 |numeric|, h = 1e-5.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "nn/causal_self_attention.h"
#include "nn/embedding.h"
#include "nn/gelu.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "nn/network.h"
#include "nn/parameter_gradient_check.h"
#include "nn/residual_add.h"
#include "nn/softmax_cross_entropy.h"
#include "nn/tied_lm_head.h"
#include "test_util.h"

namespace dlbench {
namespace {

constexpr int64_t kBatch = 2, kSeq = 5, kChannels = 8, kVocab = 11, kPaddedVocab = 16, kContext = 7;

struct LanguageHarness {
  std::unique_ptr<Backend> backend = make_reference_backend();
  std::unique_ptr<Network> net;
  Activation* tokens = nullptr;
  Activation* targets = nullptr;
  EmbeddingLayer* embedding = nullptr;
  SoftmaxCrossEntropyLayer* loss = nullptr;

  LanguageHarness() {
    NetworkOptions options;
    options.dtype = DType::f64;
    options.batch = kBatch;
    net = std::make_unique<Network>(*backend, options);
    tokens = &net->new_input("tokens", {kBatch, kSeq}, DType::i32);
    targets = &net->new_input("targets", {kBatch, kSeq}, DType::i32);
    embedding = &net->add<EmbeddingLayer>(
        "embedding", *tokens, EmbeddingOptions{kPaddedVocab, kContext, kChannels, 0.5, "transformer"});
  }

  Activation& embedded() { return *embedding->output(); }

  // The tied head and the loss after `features` [B*T, C]; then every tensor is made and filled.
  void finish(Activation& features) {
    auto& head = net->add<TiedLmHeadLayer>("lm_head", features, *embedding);
    loss = &net->add<SoftmaxCrossEntropyLayer>("loss", *head.output(), *targets, 0.f, kVocab);
    net->finalize(7);
    for (int64_t i = 0; i < kBatch * kSeq; ++i) {
      // Token 3 appears several times: its table row sums several gradients.
      tokens->value.ptr<int32_t>()[i] = static_cast<int32_t>(i % 4 == 0 ? 3 : (5 * i + 1) % kVocab);
      targets->value.ptr<int32_t>()[i] = static_cast<int32_t>((3 * i + 2) % kVocab);
    }
  }

  double loss_value() {
    net->forward(Phase::train);
    return loss->output()->value.ptr<double>()[0];
  }

  // Every parameter gradient, or `samples` evenly spread ones, against central differences.
  void check_parameter_gradients(int samples = 400) {
    testing::check_parameter_gradients(
        *net, [this] { return loss_value(); }, samples);
  }

  const ParameterInfo& parameter(const std::string& name) const {
    for (const auto& p : net->memory().parameters())
      if (p.name == name) return p;
    ADD_FAILURE() << "no parameter " << name;
    return net->memory().parameters().front();
  }
};

TEST(TransformerGradient, EmbeddingAndTiedHeadWithPaddedVocabulary) {
  LanguageHarness h;
  h.finish(h.embedded());
  h.check_parameter_gradients(1000);
}

TEST(TransformerGradient, TiedWeightIsOneParameterWithBothGradientsSummed) {
  LanguageHarness h;
  h.net->keep_after_step(h.embedded());  // read after the step below
  h.finish(h.embedded());
  // One token table, declared by the embedding (layer 0, the last to write its gradient in backward).
  int tables = 0;
  for (const auto& p : h.net->memory().parameters()) tables += p.name == "transformer.wte.weight";
  EXPECT_EQ(tables, 1);
  EXPECT_EQ(h.parameter("transformer.wte.weight").layer, 0);
  EXPECT_EQ(h.net->parameter_count(), (kPaddedVocab + kContext) * kChannels);

  // The gradient is the head's plus the embedding's: with the embedding's part taken out (the rows of the
  // tokens seen, dwte[token] += dx[b, t]), what is left is dlogits^T x alone.
  h.loss_value();
  h.net->backward();
  const ParameterInfo& wte = h.parameter("transformer.wte.weight");
  const double* dwte = h.net->memory().flat_gradients().ptr<double>() + wte.offset;
  const Tensor& dx = h.embedded().grad;  // dLoss/d(embedding output): what the embedding scatters
  const Tensor& x = h.embedded().value;
  const Tensor& probs = h.loss->probabilities();
  const int64_t rows = kBatch * kSeq;
  for (int64_t v = 0; v < kPaddedVocab; ++v) {
    for (int64_t c = 0; c < kChannels; ++c) {
      double head = 0, scattered = 0;
      for (int64_t n = 0; n < rows; ++n) {
        const double target = h.targets->value.ptr<int32_t>()[n] == v ? 1.0 : 0.0;
        const double dlogit = v < kVocab ? (probs.ptr<double>()[n * kPaddedVocab + v] - target) / rows : 0.0;
        head += dlogit * x.ptr<double>()[n * kChannels + c];
        if (h.tokens->value.ptr<int32_t>()[n] == v) scattered += dx.ptr<double>()[n * kChannels + c];
      }
      EXPECT_NEAR(dwte[v * kChannels + c], head + scattered, 1e-12) << "dwte[" << v << ", " << c << "]";
      // Padded rows: never predicted, never embedded: no gradient at all.
      if (v >= kVocab) {
        EXPECT_EQ(dwte[v * kChannels + c], 0.0);
      }
    }
  }
  // Padded columns are absent from the softmax.
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t v = kVocab; v < kPaddedVocab; ++v) EXPECT_EQ(probs.ptr<double>()[n * kPaddedVocab + v], 0.0);
}

TEST(TransformerGradient, TiedGradientAccumulatesOverMicroBatches) {
  LanguageHarness h;
  h.finish(h.embedded());
  Tensor& grads = h.net->memory().flat_gradients();
  h.loss_value();
  h.net->backward();
  std::vector<double> once(grads.ptr<double>(), grads.ptr<double>() + grads.numel());
  h.net->set_parameter_grad_mode(Accumulate::add);
  h.loss_value();
  h.net->backward();
  for (int64_t i = 0; i < grads.numel(); ++i)
    EXPECT_NEAR(grads.ptr<double>()[i], 2 * once[static_cast<size_t>(i)], 1e-12) << i;
}

TEST(TransformerGradient, LayerNormWhoseInputAlsoFeedsAResidual) {
  // y = x + ln(x): x's gradient is written by the add and then added to by the layer norm.
  LanguageHarness h;
  auto& ln = h.net->add<LayerNormLayer>("ln", h.embedded());
  auto& sum = h.net->add<ResidualAddLayer>("add", h.embedded(), *ln.output());
  h.finish(*sum.output());
  h.check_parameter_gradients();
}

TEST(TransformerGradient, LinearOnTokenRowsAndGelu) {
  LanguageHarness h;
  auto& fc = h.net->add<LinearLayer>("mlp.c_fc", h.embedded(), 4 * kChannels);
  auto& gelu = h.net->add<GeluLayer>("mlp.gelu", *fc.output());
  auto& proj = h.net->add<LinearLayer>("mlp.c_proj", *gelu.output(), kChannels);
  h.finish(*proj.output());
  h.check_parameter_gradients();
}

TEST(TransformerGradient, CausalSelfAttention) {
  LanguageHarness h;
  auto& qkv = h.net->add<LinearLayer>("attn.c_attn", h.embedded(), 3 * kChannels);
  auto& attention = h.net->add<CausalSelfAttentionLayer>("attn.sdpa", *qkv.output(), kSeq, 2);
  auto& proj = h.net->add<LinearLayer>("attn.c_proj", *attention.output(), kChannels);
  h.finish(*proj.output());
  h.check_parameter_gradients();
}

TEST(TransformerGradient, ResidualAddPassesTheGradientToBoth) {
  // fc(x) + x: the add's two inputs, x also read by the linear (which then adds into x's gradient).
  LanguageHarness h;
  auto& fc = h.net->add<LinearLayer>("fc", h.embedded(), kChannels, 0.3);
  auto& sum = h.net->add<ResidualAddLayer>("add", *fc.output(), h.embedded());
  h.finish(*sum.output());
  h.check_parameter_gradients();
}

TEST(TransformerGradient, OnePreLnBlock) {
  // x + attn(ln1(x)), then + mlp(ln2(.)), then the final layer norm: GPT-2's block.
  LanguageHarness h;
  Activation& x = h.embedded();
  auto& ln1 = h.net->add<LayerNormLayer>("h.0.ln_1", x);
  auto& qkv = h.net->add<LinearLayer>("h.0.attn.c_attn", *ln1.output(), 3 * kChannels);
  auto& att = h.net->add<CausalSelfAttentionLayer>("h.0.attn", *qkv.output(), kSeq, 2);
  auto& proj = h.net->add<LinearLayer>("h.0.attn.c_proj", *att.output(), kChannels);
  auto& x1 = h.net->add<ResidualAddLayer>("h.0.add_1", x, *proj.output());
  auto& ln2 = h.net->add<LayerNormLayer>("h.0.ln_2", *x1.output());
  auto& fc = h.net->add<LinearLayer>("h.0.mlp.c_fc", *ln2.output(), 4 * kChannels);
  auto& gelu = h.net->add<GeluLayer>("h.0.mlp.gelu", *fc.output());
  auto& fc2 = h.net->add<LinearLayer>("h.0.mlp.c_proj", *gelu.output(), kChannels);
  auto& x2 = h.net->add<ResidualAddLayer>("h.0.add_2", *x1.output(), *fc2.output());
  auto& lnf = h.net->add<LayerNormLayer>("ln_f", *x2.output());
  h.finish(*lnf.output());
  h.check_parameter_gradients(600);
}

}  // namespace
}  // namespace dlbench
