// --recompute (NetworkOptions::recompute): gpt-mini's blocks made again in the backward pass give the
// same loss and the same gradients, bit for bit, as keeping every activation, in less activation memory;
// and the memory plan's placements of values live twice are checked like any other. The dense layers'
// fusions (the MLP as one layer, residual adds taken by the projections) change nothing a step computes
// on backends that compose them, recomputed or not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "gpt_test_util.h"
#include "models/gpt.h"
#include "nn/layernorm.h"
#include "nn/network.h"

namespace dlbench {
namespace {

struct Step {
  float loss = 0;
  std::vector<float> gradients;
  std::vector<std::string> kinds, parameters;
  size_t activation_bytes = 0, transient_peak_bytes = 0;
  size_t layers_run_again = 0;
  int summing_layernorms = 0;  // layer norms whose backward makes the bias gradient of a dense layer
  int shared_gradients = 0;    // residual inputs whose gradient is the output's, in the same memory
};

// One forward and backward pass of gpt-mini on fixed tokens, from seed 7's weights; `fuse`: the dense
// layers' fusions forced on (else off).
Step mini_step(Backend& backend, bool recompute, bool fuse = false) {
  Model model = testing::finalized_gpt_mini(backend, recompute, fuse);
  Network& net = *model.net;
  testing::feed_fixed_tokens(backend, model);
  net.forward(Phase::train);
  net.backward();
  backend.synchronize();
  Step s;
  s.loss = model.loss->output()->value.ptr<float>()[0];
  const Tensor& g = net.memory().flat_gradients();
  s.gradients.assign(g.ptr<float>(), g.ptr<float>() + g.numel());
  s.activation_bytes = net.memory().activation_bytes();
  s.transient_peak_bytes = net.memory().transient_peak_bytes();
  for (const Placement& p : net.memory().placements()) s.layers_run_again += p.again_first >= 0;
  for (const auto& layer : net.layers()) {
    s.kinds.push_back(layer->kind());
    if (const auto* norm = dynamic_cast<const LayerNormLayer*>(layer.get()))
      s.summing_layernorms += norm->sums_input_gradient();
    for (int i = 0; i < static_cast<int>(layer->inputs().size()); ++i)
      s.shared_gradients +=
          layer->passes_output_gradient_to(i) &&
          layer->inputs()[static_cast<size_t>(i)]->grad.data() == layer->output()->grad.data();
  }
  for (const auto& p : net.memory().parameters()) s.parameters.push_back(p.name);
  return s;
}

void expect_same_numbers(const Step& a, const Step& b) {
  EXPECT_EQ(a.loss, b.loss);
  ASSERT_EQ(a.gradients.size(), b.gradients.size());
  EXPECT_EQ(std::memcmp(a.gradients.data(), b.gradients.data(), a.gradients.size() * sizeof(float)), 0)
      << "the gradients differ";
}

void expect_same_step_with_less_memory(Backend& backend) {
  const Step kept = mini_step(backend, false), again = mini_step(backend, true);
  EXPECT_EQ(kept.layers_run_again, 0u);
  // Per block: ln_1, c_attn, attention, c_proj, residual_1, ln_2, c_fc and gelu are made again (mlp.c_proj's
  // output is read by no backward, and residual_2's is the next block's input): 8 values x 4 blocks.
  EXPECT_EQ(again.layers_run_again, 32u);
  EXPECT_EQ(again.loss, kept.loss);
  ASSERT_EQ(again.gradients.size(), kept.gradients.size());
  EXPECT_EQ(std::memcmp(again.gradients.data(), kept.gradients.data(), kept.gradients.size() * sizeof(float)),
            0)
      << "the gradients differ";
  double norm = 0;
  for (float v : kept.gradients) norm += double(v) * v;
  EXPECT_GT(norm, 0.0);  // a backward pass that wrote nothing would match too
  EXPECT_LT(again.transient_peak_bytes, kept.transient_peak_bytes);
  EXPECT_LT(again.activation_bytes, kept.activation_bytes);
}

TEST(Recompute, GptMiniOnTheReferenceBackendSameStepLessMemory) {
  auto backend = make_reference_backend();
  expect_same_step_with_less_memory(*backend);
}

TEST(Recompute, GptMiniOnOneDnnSameStepLessMemory) {
  auto backend = make_onednn_backend(2);
  expect_same_step_with_less_memory(*backend);
}

// Each block's MLP (c_fc, GELU, c_proj and residual_2) as one layer and attn.c_proj taking residual_1:
// 9 layers a block become 6, the parameters keep their names and order, and the step computes the same,
// bit for bit, kept or recomputed. The projections' bias gradients are then summed by the layer norms that
// read their outputs first (each block's ln_2, the next block's ln_1, and ln_f after the last block):
// 8 in gpt-mini's 4 blocks, not block 0's ln_1, which reads the embedding. Recomputed, the MLP (a block's
// last layer now) is run again for the GELU's input and output it saves, in about the memory the separate
// layers took.
TEST(Recompute, FusedDenseLayersComputeWhatTheLayersDo) {
  for (const bool onednn : {false, true}) {
    SCOPED_TRACE(onednn ? "onednn" : "reference");
    auto backend = onednn ? make_onednn_backend(2) : make_reference_backend();
    const Step layers = mini_step(*backend, false), fused = mini_step(*backend, false, true),
               fused_again = mini_step(*backend, true, true), layers_again = mini_step(*backend, true);
    EXPECT_EQ(layers.kinds.size(), fused.kinds.size() + 4 * 4);  // 4 blocks: -3 for the MLP, -1 for c_proj
    EXPECT_EQ(std::count(fused.kinds.begin(), fused.kinds.end(), "mlp+add"), 4);
    EXPECT_EQ(std::count(fused.kinds.begin(), fused.kinds.end(), "linear+add"), 4);
    EXPECT_EQ(std::count(fused.kinds.begin(), fused.kinds.end(), "gelu"), 0);
    EXPECT_EQ(std::count(fused.kinds.begin(), fused.kinds.end(), "add"), 0);
    EXPECT_EQ(fused.summing_layernorms, 8);
    EXPECT_EQ(layers.summing_layernorms, 0);
    // Each block's two residual connections hand the stream's gradient on in place, fused or not.
    EXPECT_EQ(fused.shared_gradients, 8);
    EXPECT_EQ(layers.shared_gradients, 8);
    EXPECT_EQ(fused_again.shared_gradients, 8);
    EXPECT_EQ(fused.parameters, layers.parameters);
    expect_same_numbers(fused, layers);
    expect_same_numbers(fused_again, layers);
    // Made again per block: the outputs of ln_1, c_attn, attention, c_proj + residual_1 and ln_2, and the
    // MLP's two saved values (it makes no output again: that is the next block's input, kept).
    EXPECT_EQ(fused_again.layers_run_again, 7u * 4);
    // (Memory against the separate layers: Gpt2FusedLayersPlanNoMoreMemory, at a size where it matters.)
    EXPECT_LT(fused_again.transient_peak_bytes, fused.transient_peak_bytes);
    EXPECT_LT(fused_again.activation_bytes, fused.activation_bytes);
  }
}

// At GPT-2's size: each block holds 16 x width values per token inside it (ln_1, c_attn's three, the
// attention's and c_proj's outputs, residual_1, ln_2, c_fc's and GELU's four each), which without
// recomputation all 12 blocks keep until their backward; with it, about one block's worth is live at a
// time. gpt2 at batch 4 and 1024 tokens in bf16 (planned, nothing allocated) saves most of 11 blocks' worth.
// (What stays is mostly the logits, whose memory their gradient takes.)
TEST(Recompute, Gpt2KeepsAboutOneBlocksInnerValues) {
  auto backend = make_reference_backend();
  size_t bytes[2] = {};
  for (bool recompute : {false, true}) {
    NetworkOptions options;
    options.batch = 4;
    options.dtype = DType::bf16;
    options.recompute = recompute;
    Model model = build_gpt("gpt2", *backend, options, 1024);
    model.net->plan_memory_only();
    bytes[recompute] = model.net->memory().activation_bytes();
  }
  const double block_inner_bytes = 16.0 * 768 * (4 * 1024) * 2;
  EXPECT_GT(double(bytes[0]) - double(bytes[1]), 0.9 * 11 * block_inner_bytes)
      << bytes[1] << " of " << bytes[0];
}

// The fused layers plan no more memory than the layers they replace: at gpt2's size (batch 4, 1024 tokens,
// bf16; planned, nothing allocated): the MLP's dh is scratch of its backward alone (where the separate
// layers had GELU's input's and output's gradients), and the residual adds' sums are written by the
// projections. (With dh in the shared workspace, which every step holds, it took 18.9 MB more.)
TEST(Recompute, Gpt2FusedLayersPlanNoMoreMemory) {
  auto backend = make_reference_backend();
  size_t bytes[2] = {};
  for (bool fuse : {false, true}) {
    NetworkOptions options;
    options.batch = 4;
    options.dtype = DType::bf16;
    options.fusions.dense_gelu_dense = fuse;
    options.fusions.dense_residual = fuse;
    Model model = build_gpt("gpt2", *backend, options, 1024);
    model.net->plan_memory_only();
    bytes[fuse] = model.net->memory().total_bytes();
  }
  EXPECT_LE(bytes[1], bytes[0]);
}

// A value live twice shares memory only with tensors live in neither of its ranges, and a placement that
// puts it where another lives in its second range is refused.
TEST(Recompute, PlacementsOfValuesLiveTwice) {
  std::vector<Placement> p{{"twice", 0, 1024, false, 0, 2, 8, 10},
                           {"between", 0, 1024, false, 3, 7},
                           {"during the second", 0, 512, false, 9, 9}};
  const size_t arena = place_by_liveness(p);
  EXPECT_EQ(arena, 1536u);  // "between" takes "twice"'s memory; the other cannot
  EXPECT_EQ(p[0].offset, 0u);
  EXPECT_EQ(p[1].offset, 0u);
  EXPECT_EQ(p[2].offset, 1024u);
  check_placements(p, arena);
  std::vector<Placement> clash{{"twice", 0, 1024, false, 0, 2, 8, 10}, {"later", 0, 1024, false, 9, 12}};
  EXPECT_THROW(check_placements(clash, 1024), Error);
}

}  // namespace
}  // namespace dlbench
