// FP8 dense layers (--precision fp8; NetworkOptions::fp8, nn/fp8_scaling.h) on the reference backend,
// whose FP8 dense ops are their definition (each GEMM operand's round trip through FP8, backend.h):
//   * the round trip rounds as core/fp8 does, to the bit, and folds max |x| into the amax;
//   * an FP8 dense forward is the double-precision product of the operands' FP8 values, and not the
//     unquantized product;
//   * the step's end moves the amaxes into the histories and makes power-of-two scales;
//   * gpt-mini in FP8: every dense layer's three operands are counted; an inference pass counts nothing;
//     recomputed blocks and fused dense layers compute the same step to the bit; the step differs from
//     the unquantized one, but not by much;
//   * on a backend whose GEMMs run in FP8, every dense layer keeps its input's codes from the forward
//     for the backward (one byte an element), except under --recompute, and the step is the same.
#include "core/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/reference/reference_backend.h"
#include "core/status.h"
#include "gpt_test_util.h"
#include "models/gpt.h"
#include "nn/fp8_scaling.h"
#include "nn/memory_plan.h"
#include "nn/network.h"

namespace dlbench {
namespace {

Tensor host_tensor(std::vector<float>& values, std::vector<int64_t> dims) {
  return Tensor(values.data(), std::move(dims), DType::f32);
}

std::vector<float> uniform(size_t n, float low, float high, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

float fp8_value(float v, float scale, Fp8Format format) {
  return fp8_to_float(float_to_fp8(v * scale, format), format) / scale;
}

TEST(Fp8RoundTrip, RoundsAsTheHostConversionAndFoldsTheAmax) {
  auto backend = make_reference_backend();
  std::vector<float> x = uniform(1000, -600.f, 600.f, 3), y(x.size());
  x[5] = NAN;
  for (Fp8Format format : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    const float scale = 0.5f;
    float amax = 1.f;
    Tensor tx = host_tensor(x, {1000}), ty = host_tensor(y, {1000});
    backend->fp8_round_trip(tx, format, &scale, &amax, ty);
    float largest = 1.f;
    for (size_t i = 0; i < x.size(); ++i) {
      if (i == 5) {
        EXPECT_TRUE(std::isnan(y[i]));
        continue;
      }
      largest = std::max(largest, std::fabs(x[i]));
      ASSERT_EQ(y[i], fp8_value(x[i], scale, format)) << i;
    }
    EXPECT_EQ(amax, largest);  // the NaN left out
  }
}

TEST(Fp8Dense, ForwardIsTheProductOfTheFp8Values) {
  auto backend = make_reference_backend();
  const int64_t rows = 5, in = 48, out = 7;
  std::vector<float> x = uniform(rows * in, -2.f, 2.f, 4), w = uniform(out * in, -0.3f, 0.3f, 5),
                     b = uniform(out, -1.f, 1.f, 6), y(rows * out), plain(rows * out);
  // x times 64 stays within E4M3's 448 for |x| < 7; w times 512 for |w| < 0.875.
  std::vector<float> scale = {64.f, 512.f, 1.f}, amax = {0.f, 0.f, 0.f}, inverse(3 * kFp8InverseScaleStride);
  for (int i = 0; i < 3; ++i) inverse[static_cast<size_t>(i * kFp8InverseScaleStride)] = 1.f / scale[i];
  const Fp8DenseScaling fp8{scale.data(), inverse.data(), amax.data()};
  Tensor tx = host_tensor(x, {rows, in}), tw = host_tensor(w, {out, in}), tb = host_tensor(b, {out}),
         ty = host_tensor(y, {rows, out}), tplain = host_tensor(plain, {rows, out});
  backend->dense_forward(tx, tw, tb, DenseActivation::none, nullptr, ty, nullptr, &fp8);
  backend->dense_forward(tx, tw, tb, DenseActivation::none, nullptr, tplain, nullptr);
  double largest_change = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double sum = b[static_cast<size_t>(o)];
      for (int64_t i = 0; i < in; ++i)
        sum += double(fp8_value(x[static_cast<size_t>(r * in + i)], 64.f, Fp8Format::e4m3)) *
               fp8_value(w[static_cast<size_t>(o * in + i)], 512.f, Fp8Format::e4m3);
      const size_t at = static_cast<size_t>(r * out + o);
      EXPECT_NEAR(y[at], sum, 1e-5 * (1 + std::fabs(sum))) << r << ", " << o;
      largest_change = std::max(largest_change, std::fabs(double(y[at]) - plain[at]));
    }
  }
  EXPECT_GT(largest_change, 1e-3) << "the FP8 forward equals the unquantized one: nothing was quantized";
  float x_amax = 0, w_amax = 0;
  for (float v : x) x_amax = std::max(x_amax, std::fabs(v));
  for (float v : w) w_amax = std::max(w_amax, std::fabs(v));
  EXPECT_EQ(amax[kFp8X], x_amax);
  EXPECT_EQ(amax[kFp8W], w_amax);
  EXPECT_EQ(amax[kFp8Dy], 0.f);  // no backward ran
}

TEST(Fp8Scales, StepEndShiftsTheHistoriesAndMakesPowerOfTwoScales) {
  auto backend = make_reference_backend();
  const int count = 3, length = 2;
  std::vector<float> scale(count, 1.f), inverse(count * kFp8InverseScaleStride, 1.f),
      amax = {3.f, 0.f, 1e-3f}, history = {100.f, 0.5f, 0.f, 0.f, 2.f, 9.f};
  const std::vector<Fp8Format> formats = {Fp8Format::e4m3, Fp8Format::e4m3, Fp8Format::e5m2};
  backend->update_fp8_scales(
      {scale.data(), inverse.data(), amax.data(), history.data(), formats.data(), count, length, 0});
  EXPECT_EQ(history, (std::vector<float>{3.f, 100.f, 0.f, 0.f, 1e-3f, 2.f}));
  EXPECT_EQ(amax, (std::vector<float>{0.f, 0.f, 0.f}));
  EXPECT_EQ(scale[0], 4.f);      // max 100: 448 / 100 = 4.48 -> 4
  EXPECT_EQ(scale[1], 1.f);      // nothing seen: kept
  EXPECT_EQ(scale[2], 16384.f);  // max 2 in E5M2: 57344 / 2 = 28672 -> 16384
  for (int i = 0; i < count; ++i)
    EXPECT_EQ(inverse[static_cast<size_t>(i * kFp8InverseScaleStride)], 1.f / scale[static_cast<size_t>(i)]);
}

struct Fp8Step {
  float loss = 0;
  std::vector<float> gradients, scales;
};

// One forward and backward pass of gpt-mini on fixed tokens (seed 7's weights) in FP8 or not, then the
// step end's scale update.
Fp8Step mini_step(Backend& backend, bool fp8, bool recompute = false, bool fuse = false) {
  NetworkOptions options;
  options.batch = 2;
  options.recompute = recompute;
  options.fusions.dense_gelu_dense = fuse;
  options.fusions.dense_residual = fuse;
  if (fp8) options.fp8 = Fp8Recipe{};
  Model model = build_gpt("gpt-mini", backend, options, 32);
  Network& net = *model.net;
  net.finalize(7);
  testing::feed_fixed_tokens(backend, model);
  net.forward(Phase::train);
  net.backward();
  net.update_fp8_scales();
  Fp8Step s;
  s.loss = model.loss->output()->value.ptr<float>()[0];
  const Tensor& g = net.memory().flat_gradients();
  s.gradients.assign(g.ptr<float>(), g.ptr<float>() + g.numel());
  if (net.fp8()) s.scales = net.fp8()->read_scales();
  return s;
}

TEST(Fp8Gpt, EveryDenseOperandIsCountedAndTheStepIsNearTheUnquantizedOne) {
  auto backend = make_reference_backend();
  const Fp8Step fp8 = mini_step(*backend, true), plain = mini_step(*backend, false);
  // gpt-mini: 4 blocks of 4 dense layers, 3 operands each.
  ASSERT_EQ(fp8.scales.size(), 4u * 4 * 3);
  for (size_t i = 0; i < fp8.scales.size(); ++i) {
    int exponent = 0;
    EXPECT_EQ(std::frexp(fp8.scales[i], &exponent), 0.5f) << "operand " << i << ": not a power of two";
    EXPECT_NE(fp8.scales[i], 1.f) << "operand " << i << " saw nothing (or an amax in (224, 448])";
  }
  EXPECT_NE(fp8.loss, plain.loss);
  EXPECT_NEAR(fp8.loss, plain.loss, 0.02 * plain.loss);
  double dot = 0, norm_fp8 = 0, norm_plain = 0;
  for (size_t i = 0; i < plain.gradients.size(); ++i) {
    dot += double(fp8.gradients[i]) * plain.gradients[i];
    norm_fp8 += double(fp8.gradients[i]) * fp8.gradients[i];
    norm_plain += double(plain.gradients[i]) * plain.gradients[i];
  }
  // The first step runs with scales of 1: E5M2 loses the smallest gradients, but the direction holds.
  EXPECT_GT(dot / std::sqrt(norm_fp8 * norm_plain), 0.9);
}

TEST(Fp8Gpt, RecomputedAndFusedLayersComputeTheSameStep) {
  auto backend = make_reference_backend();
  const Fp8Step kept = mini_step(*backend, true), again = mini_step(*backend, true, true),
                fused = mini_step(*backend, true, false, true),
                fused_again = mini_step(*backend, true, true, true);
  for (const Fp8Step* s : {&again, &fused, &fused_again}) {
    EXPECT_EQ(s->loss, kept.loss);
    ASSERT_EQ(s->gradients.size(), kept.gradients.size());
    EXPECT_EQ(std::memcmp(s->gradients.data(), kept.gradients.data(), kept.gradients.size() * sizeof(float)),
              0);
    EXPECT_EQ(s->scales, kept.scales);
  }
}

// The reference backend, saying that its GEMMs run in FP8: layers then keep their input codes for it
// (which its round-trip ops ignore, reading x: it says so, and the layers keep x too).
class Fp8GemmReference final : public ReferenceBackend {
 public:
  bool runs_fp8_gemms() const override { return true; }
  bool reads_kept_codes_for_x() const override { return false; }
};

// The names of the network's planned values that end in `suffix`, with their bytes.
std::vector<std::pair<std::string, size_t>> planned(Network& net, const std::string& suffix) {
  std::vector<std::pair<std::string, size_t>> found;
  for (const Placement& p : net.memory().placements())
    if (p.name.size() > suffix.size() && p.name.ends_with(suffix)) found.emplace_back(p.name, p.bytes);
  return found;
}

TEST(Fp8Gpt, LayersKeepTheirInputAndWeightCodesWhereFp8GemmsRunExceptUnderRecompute) {
  Fp8GemmReference fp8_gemms;
  auto reference = make_reference_backend();
  for (bool fuse : {false, true}) {
    SCOPED_TRACE(fuse ? "fused" : "separate layers");
    // gpt-mini (d 128, batch 2 x 32 tokens): 4 blocks of c_attn (out 384), attn.c_proj, mlp.c_fc (in 128,
    // out 512) and mlp.c_proj (in 512), each keeping x^T's and W^T's codes, one byte an element.
    auto count_codes = [&](Backend& backend, bool recompute, const std::string& suffix) {
      NetworkOptions options;
      options.batch = 2;
      options.recompute = recompute;
      options.fusions.dense_gelu_dense = fuse;
      options.fusions.dense_residual = fuse;
      options.fp8 = Fp8Recipe{};
      Model model = build_gpt("gpt-mini", backend, options, 32);
      model.net->finalize(7);
      return planned(*model.net, suffix);
    };
    auto in_features = [](const std::string& name) {
      return name.find("mlp.c_proj") != std::string::npos ? 512 : 128;
    };
    auto out_features = [](const std::string& name) {
      if (name.find("c_attn") != std::string::npos) return 384;
      return name.find("mlp.c_fc") != std::string::npos ? 512 : 128;
    };
    const auto inputs = count_codes(fp8_gemms, false, ".input_codes_t");
    ASSERT_EQ(inputs.size(), 16u);
    for (const auto& [name, bytes] : inputs) EXPECT_EQ(bytes, size_t(2 * 32 * in_features(name))) << name;
    const auto weights = count_codes(fp8_gemms, false, ".weight_codes_t");
    ASSERT_EQ(weights.size(), 16u);
    for (const auto& [name, bytes] : weights)
      EXPECT_EQ(bytes, size_t(out_features(name) * in_features(name))) << name;
    for (const char* suffix : {".input_codes_t", ".weight_codes_t"}) {
      EXPECT_TRUE(count_codes(fp8_gemms, true, suffix).empty()) << suffix << " kept under --recompute";
      EXPECT_TRUE(count_codes(*reference, false, suffix).empty()) << suffix << " kept where no FP8 GEMM runs";
    }
  }
  // The codes change nothing the round-trip ops compute.
  const Fp8Step keeping = mini_step(fp8_gemms, true, false, true),
                plain = mini_step(*reference, true, false, true);
  EXPECT_EQ(keeping.loss, plain.loss);
  EXPECT_EQ(keeping.gradients, plain.gradients);
  EXPECT_EQ(keeping.scales, plain.scales);
}

// gpt-mini in FP8 with `recipe` (batch 2, sequence 32, seed 7's weights) on fixed tokens.
Model fp8_mini(Backend& backend, Fp8Recipe recipe = {}) {
  NetworkOptions options;
  options.batch = 2;
  options.fp8 = recipe;
  Model model = build_gpt("gpt-mini", backend, options, 32);
  model.net->finalize(7);
  testing::feed_fixed_tokens(backend, model);
  return model;
}

TEST(Fp8Gpt, AnInferencePassMovesNoScale) {
  auto backend = make_reference_backend();
  Model model = fp8_mini(*backend);
  model.net->forward(Phase::inference);
  model.net->update_fp8_scales();
  for (float s : model.net->fp8()->read_scales()) EXPECT_EQ(s, 1.f);
}

// What a checkpoint keeps of the scaling (Trainer puts it after the buffers) brings back the same scales
// and histories in a new network.
TEST(Fp8Gpt, TheScalingStateComesBackFromItsFloats) {
  auto backend = make_reference_backend();
  auto build = [&] { return fp8_mini(*backend, Fp8Recipe{4, 1}); };
  Model first = build();
  for (int step = 0; step < 2; ++step) {
    first.net->forward(Phase::train);
    first.net->backward();
    first.net->update_fp8_scales();
  }
  const std::vector<float> state = first.net->fp8()->state();
  ASSERT_EQ(state.size(), first.net->fp8()->state_floats());
  // The floats checkpoints hold: scales, then their inverses, then the amaxes and histories.
  const size_t n = static_cast<size_t>(first.net->fp8()->operands());
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(state[n + i], 1.f / state[i]) << "operand " << i;
  Model second = build();
  EXPECT_NE(second.net->fp8()->state(), state);
  second.net->fp8()->load_state(state.data(), state.size());
  EXPECT_EQ(second.net->fp8()->state(), state);
  EXPECT_EQ(second.net->fp8()->read_scales(), first.net->fp8()->read_scales());
  EXPECT_THROW(second.net->fp8()->load_state(state.data(), state.size() - 1), Error);
}

// cuBLASLt's FP8 GEMMs take the inverse scales as their A/B scale pointers and refuse them unless 16-byte
// aligned: every dense layer's three lie 16 bytes apart, each equal to 1 / its scale after a step.
TEST(Fp8Gpt, EveryInverseScaleIs16ByteAlignedAndFollowsItsScale) {
  auto backend = make_reference_backend();
  Model model = fp8_mini(*backend);
  model.net->forward(Phase::train);
  model.net->backward();
  model.net->update_fp8_scales();
  const Fp8Scaling& fp8 = *model.net->fp8();
  for (int first = 0; first < fp8.operands(); first += kFp8OperandsPerDense) {
    const Fp8DenseScaling dense = fp8.dense(first, false);
    for (Fp8Operand operand : {kFp8X, kFp8W, kFp8Dy}) {
      const float* inverse = dense.inverse_scale_of(operand);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(inverse) % 16, 0u) << "operand " << first + operand;
      EXPECT_NE(dense.scale[operand], 1.f) << "operand " << first + operand << " saw nothing";
      EXPECT_EQ(*inverse, 1.f / dense.scale[operand]) << "operand " << first + operand;
    }
  }
}

}  // namespace
}  // namespace dlbench
