// The fusion pass (nn/fusion_pass.h) on the CPU: a reference backend that says yes to some fusions gets
// the fused layers in place of the patterns, one that says no the layer list the model builder made, and
// a pattern whose intermediate value another layer reads is left alone whatever the backend says.
#include "nn/fusion_pass.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "backend/reference/reference_backend.h"
#include "models/resnet.h"
#include "nn/batchnorm.h"
#include "nn/batchnorm_max_pool.h"
#include "nn/batchnorm_shortcut.h"
#include "nn/causal_self_attention.h"
#include "nn/conv.h"
#include "nn/gelu.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "nn/pool.h"
#include "nn/residual_add.h"

namespace dlbench {
namespace {

// The reference backend, fusing what it is told to (it composes every fused op from the single ones), and
// noting what it was asked.
class FusingBackend final : public ReferenceBackend {
 public:
  explicit FusingBackend(std::set<Fusion> fusions) : fusions_(std::move(fusions)) {}
  bool fuses(const FusionCandidate& candidate) const override {
    asked.push_back(candidate);
    return fusions_.count(candidate.fusion) > 0;
  }
  mutable std::vector<FusionCandidate> asked;

 private:
  std::set<Fusion> fusions_;
};

// "name kind" of every layer, in execution order.
std::vector<std::string> layer_list(const Network& net) {
  std::vector<std::string> list;
  for (const auto& layer : net.layers()) list.push_back(layer->name() + " " + layer->kind());
  return list;
}

std::vector<std::string> parameter_names(Network& net) {
  std::vector<std::string> names;
  for (const auto& p : net.memory().parameters()) names.push_back(p.name);
  return names;
}

// resnet18 on 33x33 inputs (a stem, identity and projection blocks), built; `planned` runs the pass (and
// plans the memory, allocating nothing).
Model resnet18(Backend& backend, bool planned) {
  NetworkOptions options;
  options.batch = 2;
  ModelOptions model_options;
  model_options.input = {3, 33, 33};
  model_options.num_classes = 10;
  Model model = build_model("resnet18", backend, options, model_options);
  if (planned) model.net->plan_memory_only();
  return model;
}

// How many of `layer`'s batch norms take their statistics from a convolution (the one that makes the input
// each normalises).
int statistics_wired(Layer& layer) {
  auto wired = [&](const BatchNormState& norm, const Activation* input) {
    if (!norm.sums_from) return 0;
    EXPECT_EQ(norm.sums_from->output(), input) << layer.name() << ": the convolution does not make the input";
    return 1;
  };
  if (auto* bn = dynamic_cast<BatchNormLayer*>(&layer)) return wired(bn->state(), layer.inputs()[0]);
  if (auto* pooled = dynamic_cast<BatchNormMaxPoolLayer*>(&layer))
    return wired(pooled->state(), layer.inputs()[0]);
  if (auto* folded = dynamic_cast<BatchNormShortcutLayer*>(&layer))
    return wired(folded->closing(), layer.inputs()[0]) + wired(folded->shortcut(), layer.inputs()[1]);
  return 0;
}

int count(const std::vector<FusionCandidate>& asked, Fusion fusion) {
  int n = 0;
  for (const FusionCandidate& c : asked) n += c.fusion == fusion;
  return n;
}

TEST(FusionPass, ABackendThatFusesNothingKeepsTheBuiltLayers) {
  FusingBackend backend({});
  const Model built = resnet18(backend, false);
  EXPECT_TRUE(backend.asked.empty());  // the builder asks nothing
  const Model planned = resnet18(backend, true);
  EXPECT_EQ(layer_list(*planned.net), layer_list(*built.net));
  int wired = 0;
  for (const auto& layer : planned.net->layers()) wired += statistics_wired(*layer);
  EXPECT_EQ(wired, 0);
  // The pass asked about every pattern: the stem, resnet18's 3 projection shortcuts, its 20 batch norms
  // (each reads a convolution's output).
  EXPECT_EQ(count(backend.asked, Fusion::batchnorm_max_pool), 1);
  EXPECT_EQ(count(backend.asked, Fusion::shortcut_batchnorm), 3);
  EXPECT_EQ(count(backend.asked, Fusion::conv_statistics), 20);
  for (const FusionCandidate& c : backend.asked) {
    if (c.fusion == Fusion::batchnorm_max_pool) {
      EXPECT_EQ(c.batchnorm.fusion, BatchNormFusion::relu);
      EXPECT_EQ(c.pool.kind, PoolKind::max);
      EXPECT_EQ(c.pool.kernel_h, 3);
      EXPECT_EQ(c.pool.stride_h, 2);
      EXPECT_EQ(c.pool.in_h, c.batchnorm.h);
    }
    if (c.fusion == Fusion::shortcut_batchnorm) {
      EXPECT_EQ(c.batchnorm.fusion, BatchNormFusion::add_relu);
      EXPECT_EQ(c.shortcut.fusion, BatchNormFusion::none);
      EXPECT_EQ(c.shortcut.channels, c.batchnorm.channels);
    }
    if (c.fusion == Fusion::conv_statistics) EXPECT_EQ(c.conv.out_channels, c.batchnorm.channels);
  }
}

// Every fusion: the stem's batch norm and max pool become one layer in the pool's place, each projection
// shortcut's batch norm goes into its block's closing one, every batch norm takes its statistics from its
// convolution — and the parameters are those of the built layers, in their order.
TEST(FusionPass, ABackendThatFusesGetsTheFusedLayers) {
  FusingBackend none({});
  FusingBackend all({Fusion::conv_statistics, Fusion::shortcut_batchnorm, Fusion::batchnorm_max_pool});
  Model built = resnet18(none, true), fused = resnet18(all, true);
  std::vector<std::string> expected;
  for (const std::string& layer : layer_list(*built.net)) {
    if (layer == "bn1 batchnorm") {
      expected.push_back("bn1 batchnorm+maxpool");
    } else if (layer != "maxpool maxpool" && layer.find("downsample.1 ") == std::string::npos) {
      expected.push_back(layer);
    }
  }
  ASSERT_EQ(expected.size() + 4, built.net->layers().size());
  EXPECT_EQ(layer_list(*fused.net), expected);
  int folded = 0, wired = 0;
  for (const auto& layer : fused.net->layers()) {
    if (auto* f = dynamic_cast<const BatchNormShortcutLayer*>(layer.get())) {
      ++folded;
      EXPECT_NE(
          f->plan_summary().find("folded " + f->name().substr(0, f->name().size() - 3) + "downsample.1"),
          std::string::npos)
          << f->plan_summary();
    }
    wired += statistics_wired(*layer);
  }
  EXPECT_EQ(folded, 3);
  EXPECT_EQ(wired, 20);
  EXPECT_EQ(parameter_names(*fused.net), parameter_names(*built.net));
}

// Each fusion alone, and the network's choices over the backend's answer.
TEST(FusionPass, EachFusionAloneAndForcedChoices) {
  FusingBackend stem({Fusion::batchnorm_max_pool});
  Model pooled = resnet18(stem, true);
  EXPECT_EQ(layer_list(*pooled.net)[1], "bn1 batchnorm+maxpool");
  EXPECT_EQ(layer_list(*pooled.net)[2], "layer1.0.conv1 conv");

  FusingBackend shortcut({Fusion::shortcut_batchnorm});
  Model folded = resnet18(shortcut, true);
  EXPECT_EQ(layer_list(*folded.net)[2], "maxpool maxpool");
  int shortcut_layers = 0;
  for (const auto& layer : folded.net->layers())
    shortcut_layers += dynamic_cast<const BatchNormShortcutLayer*>(layer.get()) != nullptr;
  EXPECT_EQ(shortcut_layers, 3);

  // A backend that fuses everything, told by the network to fuse nothing.
  FusingBackend all({Fusion::conv_statistics, Fusion::shortcut_batchnorm, Fusion::batchnorm_max_pool});
  FusingBackend none({});
  NetworkOptions options;
  options.batch = 2;
  options.fusions = {false, false, false};
  ModelOptions model_options;
  model_options.input = {3, 33, 33};
  model_options.num_classes = 10;
  Model declined = build_model("resnet18", all, options, model_options);
  declined.net->plan_memory_only();
  EXPECT_EQ(layer_list(*declined.net), layer_list(*resnet18(none, true).net));
}

// A batch norm + ReLU whose output a second layer reads too must stay: the fused layer would not store it.
TEST(FusionPass, AValueReadElsewhereIsNotFusedAway) {
  FusingBackend backend({Fusion::batchnorm_max_pool});
  NetworkOptions options;
  options.batch = 2;
  Network net(backend, options);
  Activation& images = net.new_input("images", {2, 3, 8, 8}, DType::f32);
  auto& conv = net.add<ConvLayer>("conv", images, ConvOptions{4, 3, 1, 1});
  auto& bn = net.add<BatchNormLayer>("bn", *conv.output(), BatchNormFusion::relu);
  // A convolution reads it too (before the pool, so that the pool's backward writes its gradient first).
  net.add<ConvLayer>("side", *bn.output(), ConvOptions{4, 1, 1, 0});
  net.add<MaxPoolLayer>("pool", *bn.output(), 3, 2, 1);
  net.plan_memory_only();
  EXPECT_EQ(layer_list(net),
            (std::vector<std::string>{"conv conv", "bn batchnorm", "side conv", "pool maxpool"}));
}

// A transformer's MLP (dense, GELU, dense) whose GELU output a second layer reads must stay three layers:
// the fused layer keeps that value to itself. The residual add after it still folds into the second
// dense layer where the backend fuses residuals.
TEST(FusionPass, AnMlpWhoseInnerValueIsReadElsewhereStaysApart) {
  FusingBackend backend({Fusion::dense_gelu_dense, Fusion::dense_residual});
  NetworkOptions options;
  options.batch = 8;
  Network net(backend, options);
  Activation& x = net.new_input("x", {8, 16}, DType::f32);
  auto& fc = net.add<LinearLayer>("mlp.c_fc", x, 64, 0.02);
  auto& gelu = net.add<GeluLayer>("mlp.gelu", *fc.output());
  net.add<LinearLayer>("side", *gelu.output(), 4);  // a second reader of gelu(h)
  auto& proj = net.add<LinearLayer>("mlp.c_proj", *gelu.output(), 16, 0.02);
  net.add<ResidualAddLayer>("residual", x, *proj.output());
  net.plan_memory_only();
  EXPECT_EQ(layer_list(net), (std::vector<std::string>{"mlp.c_fc linear", "mlp.gelu gelu", "side linear",
                                                       "mlp.c_proj linear+add"}));

  // Read by nothing else, the same layers become one.
  Network whole(backend, options);
  Activation& x2 = whole.new_input("x", {8, 16}, DType::f32);
  auto& fc2 = whole.add<LinearLayer>("mlp.c_fc", x2, 64, 0.02);
  auto& gelu2 = whole.add<GeluLayer>("mlp.gelu", *fc2.output());
  auto& proj2 = whole.add<LinearLayer>("mlp.c_proj", *gelu2.output(), 16, 0.02);
  whole.add<ResidualAddLayer>("residual", x2, *proj2.output());
  whole.plan_memory_only();
  EXPECT_EQ(layer_list(whole), (std::vector<std::string>{"mlp mlp+add"}));
  EXPECT_EQ(parameter_names(whole), (std::vector<std::string>{"mlp.c_fc.weight", "mlp.c_fc.bias",
                                                              "mlp.c_proj.weight", "mlp.c_proj.bias"}));
}

// A layer norm that reads a projection's output first is the last to add to that output's gradient, so
// it sums it for the projection's bias gradient where the backend says so; a layer norm after another
// reader of its input does not, and the backend is not asked about it.
TEST(FusionPass, ALayerNormReadingAProjectionFirstSumsItsBiasGradient) {
  NetworkOptions options;
  options.batch = 8;
  for (const bool fusing : {true, false}) {
    SCOPED_TRACE(fusing ? "the backend fuses" : "the backend declines");
    FusingBackend backend(fusing ? std::set<Fusion>{Fusion::layernorm_dx_sums} : std::set<Fusion>{});
    Network net(backend, options);
    Activation& x = net.new_input("x", {8, 16}, DType::f32);
    auto& proj = net.add<LinearLayer>("proj", x, 16, 0.02);
    auto& first = net.add<LayerNormLayer>("ln_first", *proj.output());
    net.add<LinearLayer>("after", *proj.output(), 16, 0.02);  // a second reader, after the layer norm
    auto& other = net.add<LinearLayer>("other", x, 16, 0.02);
    net.add<LinearLayer>("before", *other.output(), 16, 0.02);  // a reader before the layer norm
    auto& late = net.add<LayerNormLayer>("ln_late", *other.output());
    net.plan_memory_only();
    EXPECT_EQ(first.sums_input_gradient(), fusing);
    EXPECT_FALSE(late.sums_input_gradient());
    EXPECT_EQ(count(backend.asked, Fusion::layernorm_dx_sums), 1);
  }
}

// Attention reading a dense layer's output alone makes that layer's bias gradient where the backend says
// so; attention whose qkv another layer reads too does not, and the backend is not asked about it.
TEST(FusionPass, AttentionMakesTheBiasGradientOfTheLayerThatMakesQkv) {
  NetworkOptions options;
  options.batch = 8;
  for (const bool fusing : {true, false}) {
    SCOPED_TRACE(fusing ? "the backend fuses" : "the backend declines");
    FusingBackend backend(fusing ? std::set<Fusion>{Fusion::attention_qkv_bias} : std::set<Fusion>{});
    Network net(backend, options);
    Activation& x = net.new_input("x", {8, 16}, DType::f32);
    auto& c_attn = net.add<LinearLayer>("c_attn", x, 48, 0.02);
    auto& attention = net.add<CausalSelfAttentionLayer>("attention", *c_attn.output(), 4, 2);
    net.add<LinearLayer>("c_proj", *attention.output(), 16, 0.02);
    auto& shared = net.add<LinearLayer>("shared", x, 48, 0.02);
    net.add<LinearLayer>("also_reading_shared", *shared.output(), 16, 0.02);
    auto& reading_shared = net.add<CausalSelfAttentionLayer>("reading_shared", *shared.output(), 4, 2);
    net.plan_memory_only();
    EXPECT_EQ(attention.makes_qkv_bias_gradient(), fusing);
    EXPECT_FALSE(reading_shared.makes_qkv_bias_gradient());
    EXPECT_EQ(count(backend.asked, Fusion::attention_qkv_bias), 1);
  }
}

}  // namespace
}  // namespace dlbench
