// Fusion::attention_qkv_bias: the attention layer makes c_attn's bias gradient from a third of the pass
// over qkv's gradient: q's third summed, k's zero (the softmax ignores a bias on every key), v's the sums
// of the attention output's gradient, which attn.c_proj writes from its own bias gradient (a GEMV) in
// steps that overwrite the parameter gradients. gpt-mini's step gives, with the fusion and without, the
// same bits for every other parameter's gradient and c_attn's bias gradient to rounding; over two
// micro-batches (the second adding, where the projection writes nothing) too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gpt_test_util.h"
#include "models/gpt.h"
#include "nn/causal_self_attention.h"
#include "nn/network.h"

namespace dlbench {
namespace {

struct Step {
  std::vector<float> gradients;
  std::vector<std::string> names;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // offset, count per parameter
  int attention_making_bias = 0;                    // attention layers that make c_attn's bias gradient
};

// gpt-mini (batch 2 x 32 tokens, seed 7's weights, the dense fusions on) with the attention fusion forced
// on or off, after `micro_batches` forward and backward passes on fixed tokens, the later ones adding to
// the parameter gradients.
Step mini_step(Backend& backend, bool fuse, int micro_batches) {
  NetworkOptions options;
  options.batch = 2;
  options.fusions.dense_gelu_dense = true;
  options.fusions.dense_residual = true;
  options.fusions.layernorm_dx_sums = true;
  options.fusions.attention_qkv_bias = fuse;
  Model model = build_gpt("gpt-mini", backend, options, 32);
  Network& net = *model.net;
  net.finalize(7);
  testing::feed_fixed_tokens(backend, model);
  for (int i = 0; i < micro_batches; ++i) {
    net.set_parameter_grad_mode(i == 0 ? Accumulate::overwrite : Accumulate::add);
    net.forward(Phase::train);
    net.backward();
  }
  backend.synchronize();
  Step s;
  const Tensor& g = net.memory().flat_gradients();
  s.gradients.assign(g.ptr<float>(), g.ptr<float>() + g.numel());
  for (const auto& p : net.memory().parameters()) {
    s.names.push_back(p.name);
    s.ranges.emplace_back(p.offset, p.value->numel());
  }
  for (const auto& layer : net.layers())
    if (const auto* attention = dynamic_cast<const CausalSelfAttentionLayer*>(layer.get()))
      s.attention_making_bias += attention->makes_qkv_bias_gradient();
  return s;
}

bool is_qkv_bias(const std::string& name) { return name.find("attn.c_attn.bias") != std::string::npos; }

void expect_same_gradients(const Step& fused, const Step& plain) {
  ASSERT_EQ(fused.names, plain.names);
  int qkv_biases = 0;
  for (size_t i = 0; i < fused.names.size(); ++i) {
    SCOPED_TRACE(fused.names[i]);
    const auto [offset, count] = fused.ranges[i];
    const float* a = fused.gradients.data() + offset;
    const float* b = plain.gradients.data() + offset;
    if (!is_qkv_bias(fused.names[i])) {
      EXPECT_EQ(std::memcmp(a, b, static_cast<size_t>(count) * sizeof(float)), 0) << "not the same bits";
      continue;
    }
    ++qkv_biases;
    const int64_t third = count / 3;
    double diff = 0, norm = 0, k_plain = 0;
    for (int64_t j = 0; j < count; ++j) {
      diff += (double(a[j]) - b[j]) * (double(a[j]) - b[j]);
      norm += double(b[j]) * b[j];
      if (j >= third && j < 2 * third) {
        EXPECT_EQ(a[j], 0.f) << "k's third, element " << j - third;
        k_plain += double(b[j]) * b[j];
      }
    }
    ASSERT_GT(norm, 0.0) << "no gradient";
    EXPECT_LT(std::sqrt(diff / norm), 1e-5);
    // Summed over the rows, k's third is zero but for rounding.
    EXPECT_LT(std::sqrt(k_plain / norm), 1e-5);
  }
  EXPECT_EQ(qkv_biases, 4);  // gpt-mini's 4 blocks
}

TEST(AttentionQkvBias, SameGradientsFromAThirdOfThePass) {
  for (const bool onednn : {false, true}) {
    SCOPED_TRACE(onednn ? "onednn" : "reference");
    auto backend = onednn ? make_onednn_backend(2) : make_reference_backend();
    for (const int micro_batches : {1, 2}) {
      SCOPED_TRACE(micro_batches == 1 ? "one micro-batch" : "two micro-batches");
      const Step fused = mini_step(*backend, true, micro_batches),
                 plain = mini_step(*backend, false, micro_batches);
      EXPECT_EQ(fused.attention_making_bias, 4);
      EXPECT_EQ(plain.attention_making_bias, 0);
      expect_same_gradients(fused, plain);
    }
  }
}

}  // namespace
}  // namespace dlbench
