#include "models/gpt.h"

#include <fmt/format.h>

#include <cmath>

#include "core/align.h"
#include "core/status.h"
#include "nn/causal_self_attention.h"
#include "nn/embedding.h"
#include "nn/gelu.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "nn/residual_add.h"
#include "nn/tied_lm_head.h"

namespace dlbench {

namespace {

constexpr int64_t kGpt2Vocab = 50257;
constexpr double kInitStd = 0.02;

GptSpec make_spec(int64_t layers, int64_t heads, int64_t channels, int64_t context, int64_t vocab) {
  // Padded to a multiple of 64 for the GEMMs' tiles (nanoGPT's 50,304); the extra rows are never used.
  return {layers, heads, channels, context, vocab, align_up<int64_t>(vocab, 64)};
}

// One pre-LN block: x + attn(ln_1(x)), then + mlp(ln_2(.)).
Activation& block(Network& net, const GptSpec& spec, int64_t seq_len, int64_t index, Activation& x) {
  const std::string prefix = fmt::format("transformer.h.{}.", index);
  const int64_t c = spec.channels;
  // GPT-2 scales the residual projections' init by 1/sqrt(N), N the residual additions (2 per block).
  const double projection_std = kInitStd / std::sqrt(2.0 * static_cast<double>(spec.layers));
  auto& ln_1 = net.add<LayerNormLayer>(prefix + "ln_1", x);
  auto& c_attn = net.add<LinearLayer>(prefix + "attn.c_attn", *ln_1.output(), 3 * c, kInitStd);
  auto& attention =
      net.add<CausalSelfAttentionLayer>(prefix + "attn.attention", *c_attn.output(), seq_len, spec.heads);
  auto& c_proj = net.add<LinearLayer>(prefix + "attn.c_proj", *attention.output(), c, projection_std);
  auto& x1 = net.add<ResidualAddLayer>(prefix + "residual_1", x, *c_proj.output());
  auto& ln_2 = net.add<LayerNormLayer>(prefix + "ln_2", *x1.output());
  auto& c_fc = net.add<LinearLayer>(prefix + "mlp.c_fc", *ln_2.output(), 4 * c, kInitStd);
  auto& gelu = net.add<GeluLayer>(prefix + "mlp.gelu", *c_fc.output());
  auto& mlp_proj = net.add<LinearLayer>(prefix + "mlp.c_proj", *gelu.output(), c, projection_std);
  return *net.add<ResidualAddLayer>(prefix + "residual_2", *x1.output(), *mlp_proj.output()).output();
}

}  // namespace

const std::vector<std::string>& gpt_model_names() {
  static const std::vector<std::string> names{"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt-mini"};
  return names;
}

bool is_gpt_model(const std::string& name) {
  for (const auto& n : gpt_model_names())
    if (n == name) return true;
  return false;
}

GptSpec gpt_spec(const std::string& name) {
  if (name == "gpt2") return make_spec(12, 12, 768, 1024, kGpt2Vocab);
  if (name == "gpt2-medium") return make_spec(24, 16, 1024, 1024, kGpt2Vocab);
  if (name == "gpt2-large") return make_spec(36, 20, 1280, 1024, kGpt2Vocab);
  if (name == "gpt2-xl") return make_spec(48, 25, 1600, 1024, kGpt2Vocab);
  if (name == "gpt-mini") return make_spec(4, 4, 128, 256, 256);
  throw_user_error("unknown GPT model '{}'; choose one of: {}", name, fmt::join(gpt_model_names(), ", "));
}

int64_t gpt_parameter_count(const GptSpec& spec, int64_t vocab_rows) {
  const int64_t c = spec.channels;
  const int64_t per_block = 2 * c                // ln_1
                            + 3 * c * c + 3 * c  // attn.c_attn
                            + c * c + c          // attn.c_proj
                            + 2 * c              // ln_2
                            + 4 * c * c + 4 * c  // mlp.c_fc
                            + 4 * c * c + c;     // mlp.c_proj
  return vocab_rows * c + spec.context * c + spec.layers * per_block + 2 * c;
}

Model build_gpt(const std::string& name, Backend& backend, const NetworkOptions& net_options,
                int64_t seq_len) {
  const GptSpec spec = gpt_spec(name);
  if (seq_len == 0) seq_len = spec.context;
  DLB_REQUIRE(seq_len >= 1 && seq_len <= spec.context, "--seq-len {}: {} takes 1 to {} tokens", seq_len, name,
              spec.context);
  DLB_REQUIRE(net_options.batch >= 1, "{} needs a batch of at least 1 sequence", name);
  Model model;
  model.name = name;
  model.family = ModelFamily::gpt;
  model.seq_len = seq_len;
  model.num_classes = spec.vocab;
  model.padding_parameters = (spec.padded_vocab - spec.vocab) * spec.channels;
  model.flops_per_token = 6.0 * static_cast<double>(gpt_parameter_count(spec, spec.vocab)) +
                          12.0 * static_cast<double>(spec.layers * spec.channels * seq_len);
  model.net = std::make_unique<Network>(backend, net_options);
  Network& net = *model.net;
  const int64_t b = net_options.batch;
  model.tokens = &net.new_input("tokens", {b, seq_len}, DType::i32);
  model.targets = &net.new_input("targets", {b, seq_len}, DType::i32);

  auto& embedding = net.add<EmbeddingLayer>(
      "transformer.embedding", *model.tokens,
      EmbeddingOptions{spec.padded_vocab, spec.context, spec.channels, kInitStd, "transformer"});
  Activation* x = embedding.output();  // [B * T, C]
  for (int64_t i = 0; i < spec.layers; ++i) {
    net.set_block(static_cast<int>(i));  // what --recompute makes again in the backward pass
    x = &block(net, spec, seq_len, i, *x);
  }
  net.set_block(-1);
  x = net.add<LayerNormLayer>("transformer.ln_f", *x).output();
  model.logits = net.add<TiedLmHeadLayer>("lm_head", *x, embedding).output();
  model.loss = &net.add<SoftmaxCrossEntropyLayer>("loss", *model.logits, *model.targets, 0.f, spec.vocab,
                                                  LossGradient::over_the_logits);
  return model;
}

}  // namespace dlbench
