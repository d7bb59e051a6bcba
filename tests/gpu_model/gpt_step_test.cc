// One whole gpt-mini training step (forward and backward) on the GPU against the same step on the CPU
// (oneDNN), in fp32 with TF32 off, with the dense layers fused as the CUDA backend fuses them (its MLPs
// on cuBLASLt's epilogues, residual adds in the projections' GEMMs) and with every fusion off: the loss
// and every parameter's gradient must agree. A transformer at initialisation has no batch norm to make
// its gradients ill-conditioned (see resnet50_step_test.cc), so a plain bound holds: 1e-4 relative per
// tensor, where the GPU's GELU, attention and sums differ from the CPU's in the last bits only. And the
// FP8 MLP's step against its separate layers', and with its dense layers' input codes kept from the
// forward against without (below).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gpt_test_util.h"
#include "models/gpt.h"
#include "nn/layernorm.h"
#include "nn/memory_plan.h"
#ifdef DLBENCH_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace dlbench {
namespace {

struct GptStep {
  float loss = 0;
  std::vector<float> gradients;
  std::vector<std::string> names, kinds;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // offset, count per parameter
};

// gpt-mini at batch 4 x 64 tokens on fixed tokens, from seed 7's weights; `fuse`: the dense fusions as
// the backend decides (unset) or forced off.
// gpt-mini (64 tokens a sequence, seed 7's weights) with `options`, after one forward and backward pass on
// fixed tokens.
Model stepped_gpt(Backend& backend, const NetworkOptions& options) {
  Model model = build_gpt("gpt-mini", backend, options, 64);
  model.net->finalize(7);
  testing::feed_fixed_tokens(backend, model);
  model.net->forward(Phase::train);
  model.net->backward();
  backend.synchronize();
  return model;
}

GptStep gpt_step(Backend& backend, std::optional<bool> fuse) {
  NetworkOptions options;
  options.batch = 4;
  options.fusions.dense_gelu_dense = fuse;
  options.fusions.dense_residual = fuse;
  options.fusions.layernorm_dx_sums = fuse;
  const Model model = stepped_gpt(backend, options);
  GptStep s;
  backend.copy_to_host(&s.loss, model.loss->output()->value.data(), sizeof(float));
  Tensor& grads = model.net->memory().flat_gradients();
  s.gradients.resize(static_cast<size_t>(grads.numel()));
  backend.copy_to_host(s.gradients.data(), grads.data(), grads.bytes());
  for (const auto& p : model.net->memory().parameters()) {
    s.names.push_back(p.name);
    s.ranges.emplace_back(p.offset, p.value->numel());
  }
  for (const auto& layer : model.net->layers()) s.kinds.push_back(layer->kind());
  return s;
}

// Each parameter's ||a - b|| / ||b||, and the loss's relative difference.
void expect_same_step(const GptStep& a, const GptStep& b, const char* what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(a.names, b.names);
  EXPECT_NEAR(a.loss, b.loss, 1e-5 * std::fabs(b.loss));
  double worst = 0;
  std::string worst_name;
  for (size_t i = 0; i < a.names.size(); ++i) {
    double diff = 0, norm = 0;
    for (int64_t j = a.ranges[i].first; j < a.ranges[i].first + a.ranges[i].second; ++j) {
      const double d = double(a.gradients[static_cast<size_t>(j)]) - b.gradients[static_cast<size_t>(j)];
      diff += d * d;
      norm += double(b.gradients[static_cast<size_t>(j)]) * b.gradients[static_cast<size_t>(j)];
    }
    ASSERT_GT(norm, 0.0) << a.names[i] << ": no gradient";
    const double relative = std::sqrt(diff / norm);
    EXPECT_LT(relative, 1e-4) << a.names[i];
    if (relative > worst) worst = relative, worst_name = a.names[i];
  }
  std::printf("  %s: loss %.7f vs %.7f, worst gradient %s at %.3g\n", what, a.loss, b.loss,
              worst_name.c_str(), worst);
}

TEST(GpuGptModel, MiniStepMatchesOneDnnFusedAndNot) {
#ifndef DLBENCH_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU: the GPU-vs-oneDNN step check needs one";
  auto cpu = make_onednn_backend(0);
  auto gpu = make_cuda_backend(0);  // FP32 without TF32, the dense epilogues on
  const GptStep reference = gpt_step(*cpu, false);
  const GptStep fused = gpt_step(*gpu, std::nullopt), layers = gpt_step(*gpu, false);
  // The backend fused: 4 blocks of one MLP and one projection with its residual.
  EXPECT_EQ(std::count(fused.kinds.begin(), fused.kinds.end(), "mlp+add"), 4);
  EXPECT_EQ(std::count(fused.kinds.begin(), fused.kinds.end(), "linear+add"), 4);
  EXPECT_EQ(std::count(layers.kinds.begin(), layers.kinds.end(), "gelu"), 4);
  expect_same_step(fused, reference, "GPU fused vs oneDNN");
  expect_same_step(layers, reference, "GPU layers vs oneDNN");
#endif
}

// gpt-mini's step in BF16 with FP8 dense layers, the MLP fused into one layer or not (the projections'
// residual adds fused either way), its blocks recomputed or not: its loss, the raw bytes of its
// gradients, its layers' kinds and how many codes (x^T's and W^T's) the dense layers kept for the backward.
struct Fp8Step {
  float loss = 0;
  std::vector<uint8_t> gradient_bytes;
  std::vector<std::string> kinds;
  int kept_codes = 0;
  int layernorms_writing_codes = 0;
  int layernorm_outputs_held_for_backward = 0;  // ln_1's and ln_2's values live past the forward
};

Fp8Step fp8_step(Backend& backend, bool fuse_mlp, bool fp8 = true, bool recompute = false,
                 std::optional<bool> layernorm_codes = std::nullopt) {
  NetworkOptions options;
  options.batch = 4;
  options.dtype = DType::bf16;
  options.recompute = recompute;
  if (fp8) options.fp8 = Fp8Recipe{};
  options.fusions.dense_gelu_dense = fuse_mlp;
  options.fusions.dense_residual = true;
  options.fusions.layernorm_fp8_codes = layernorm_codes;
  const Model model = stepped_gpt(backend, options);
  Fp8Step s;
  backend.copy_to_host(&s.loss, model.loss->output()->value.data(), sizeof(float));
  // The gradients as the backward wrote them: in BF16 the compute copies' (the FP32 arena is filled only
  // for an exchange between ranks: read there, the tests below compared gradients no backward wrote).
  MemoryPlan& memory = model.net->memory();
  const Tensor& grads = memory.has_compute_copies() ? memory.compute_gradients() : memory.flat_gradients();
  s.gradient_bytes.resize(grads.bytes());
  backend.copy_to_host(s.gradient_bytes.data(), grads.data(), grads.bytes());
  EXPECT_TRUE(std::any_of(s.gradient_bytes.begin(), s.gradient_bytes.end(), [](uint8_t b) { return b != 0; }))
      << "no gradient was written where they are read";
  for (const auto& layer : model.net->layers()) {
    s.kinds.push_back(layer->kind());
    if (auto* norm = dynamic_cast<const LayerNormLayer*>(layer.get()); norm && norm->writes_fp8_codes())
      ++s.layernorms_writing_codes;
  }
  for (const Placement& p : model.net->memory().placements()) {
    if (p.name.ends_with(".input_codes_t") || p.name.ends_with(".weight_codes_t")) ++s.kept_codes;
    const bool layernorm_output = p.name.ends_with(".ln_1.out") || p.name.ends_with(".ln_2.out");
    if (layernorm_output && !p.always && p.last >= static_cast<int>(model.net->layers().size()))
      ++s.layernorm_outputs_held_for_backward;
  }
  return s;
}

// In FP8 the fused MLP stores no gelu(h): c_fc's GEMM writes h, c_proj's quantize passes take GELU on
// their way from h, and c_fc's output gradient is quantized with GELU's gradient taken on the way. Each
// of those passes makes the codes the separate GELU layer's output would have: the fused step must equal
// the step of the separate layers (c_fc, gelu, c_proj with its residual) to the bit, and differ from the
// BF16 step (it ran in FP8).
TEST(GpuGptModel, Fp8MlpTakingGeluOnTheWayIsTheSeparateLayersStepToTheBit) {
#ifndef DLBENCH_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU: the FP8 MLP step check needs one";
  auto gpu = make_cuda_backend(0);
  const Fp8Step fused = fp8_step(*gpu, true), layers = fp8_step(*gpu, false),
                bf16 = fp8_step(*gpu, true, false);
  EXPECT_EQ(std::count(fused.kinds.begin(), fused.kinds.end(), "mlp+add"), 4);
  EXPECT_EQ(std::count(layers.kinds.begin(), layers.kinds.end(), "gelu"), 4);
  EXPECT_EQ(fused.loss, layers.loss);
  ASSERT_EQ(fused.gradient_bytes.size(), layers.gradient_bytes.size());
  EXPECT_TRUE(fused.gradient_bytes == layers.gradient_bytes) << "the fused FP8 MLP's gradients differ";
  EXPECT_NE(fused.loss, bf16.loss) << "the FP8 step equals the BF16 one: nothing ran in FP8";
  EXPECT_NEAR(fused.loss, bf16.loss, 0.02 * std::fabs(bf16.loss));
#endif
}

// The dense layers keep x^T's and W^T's FP8 codes from the forward for the backward's GEMMs, except under
// --recompute, where the backward quantizes x and W again: the same codes, so the same step to the bit.
TEST(GpuGptModel, Fp8InputCodesKeptFromTheForwardAreTheBackwardsToTheBit) {
#ifndef DLBENCH_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU: the FP8 kept-codes step check needs one";
  auto gpu = make_cuda_backend(0);
  for (const bool fuse_mlp : {true, false}) {
    SCOPED_TRACE(fuse_mlp ? "MLP fused" : "MLP as layers");
    const Fp8Step kept = fp8_step(*gpu, fuse_mlp), quantized_again = fp8_step(*gpu, fuse_mlp, true, true);
    EXPECT_EQ(kept.kept_codes, 32);  // x^T's and W^T's of 4 blocks of 4 dense layers
    EXPECT_EQ(quantized_again.kept_codes, 0);
    EXPECT_EQ(kept.loss, quantized_again.loss);
    ASSERT_EQ(kept.gradient_bytes.size(), quantized_again.gradient_bytes.size());
    EXPECT_TRUE(kept.gradient_bytes == quantized_again.gradient_bytes)
        << "the step with kept codes differs from the one that quantizes x again";
  }
#endif
}

// Where an FP8 dense layer alone reads a layer norm's output (ln_1's c_attn, ln_2's MLP), the layer norm
// writes the codes of its output for it, in both layouts, and the dense layer quantizes no input: the same
// codes, so the same step to the bit as the two passes, MLP fused or not. Under --recompute no codes are
// kept, and no layer norm writes them.
TEST(GpuGptModel, Fp8LayerNormsWritingCodesAreTheSeparatePassesStepToTheBit) {
#ifndef DLBENCH_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU: the FP8 layer-norm codes step check needs one";
  auto gpu = make_cuda_backend(0);
  for (const bool fuse_mlp : {true, false}) {
    SCOPED_TRACE(fuse_mlp ? "MLP fused" : "MLP as layers");
    const Fp8Step codes = fp8_step(*gpu, fuse_mlp), passes = fp8_step(*gpu, fuse_mlp, true, false, false);
    EXPECT_EQ(codes.layernorms_writing_codes, 8);  // ln_1 and ln_2 of 4 blocks; ln_f's reader is in BF16
    EXPECT_EQ(passes.layernorms_writing_codes, 0);
    // The dense layers that keep x^T's codes read no x in their backward: ln_1's and ln_2's outputs
    // (codes or values) are free after the forward, where BF16's weight GEMMs read them in the backward.
    EXPECT_EQ(codes.layernorm_outputs_held_for_backward, 0);
    EXPECT_EQ(passes.layernorm_outputs_held_for_backward, 0);
    EXPECT_EQ(fp8_step(*gpu, fuse_mlp, false).layernorm_outputs_held_for_backward, 8);
    EXPECT_EQ(codes.loss, passes.loss);
    ASSERT_EQ(codes.gradient_bytes.size(), passes.gradient_bytes.size());
    EXPECT_TRUE(codes.gradient_bytes == passes.gradient_bytes)
        << "the step whose layer norms write codes differs from the one that quantizes their outputs";
  }
  EXPECT_EQ(fp8_step(*gpu, true, true, true).layernorms_writing_codes, 0);
#endif
}

}  // namespace
}  // namespace dlbench
