#include "models/resnet.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "test_util.h"

namespace dlbench {
namespace {

struct Expected {
  const char* name;
  int64_t parameters;  // torchvision's counts for the ImageNet models
  int64_t classes;
};

class ResNetShapes : public ::testing::TestWithParam<Expected> {};

TEST_P(ResNetShapes, ParameterCountAndOutputShape) {
  const Expected& e = GetParam();
  auto backend = make_reference_backend();
  NetworkOptions options;
  options.batch = 2;
  ModelOptions model_options;
  model_options.input = default_input_shape(e.name);
  model_options.num_classes = default_num_classes(e.name);
  Model model = build_model(e.name, *backend, options, model_options);
  model.net->finalize(1);
  EXPECT_EQ(model.net->parameter_count(), e.parameters);
  EXPECT_EQ(model.logits->value.dims(), (std::vector<int64_t>{2, e.classes}));
  EXPECT_EQ(model.images->value.dims(),
            (std::vector<int64_t>{2, model_options.input.channels, model_options.input.height,
                                  model_options.input.width}));
}

INSTANTIATE_TEST_SUITE_P(AllModels, ResNetShapes,
                         ::testing::Values(Expected{"resnet18", 11689512, 1000},
                                           Expected{"resnet34", 21797672, 1000},
                                           Expected{"resnet50", 25557032, 1000},
                                           Expected{"resnet101", 44549160, 1000},
                                           Expected{"resnet152", 60192808, 1000},
                                           // 1x28x28 input, projection shortcuts at the two stage changes
                                           Expected{"resnet20", 272186, 10}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ResNet, SpatialSizesFollowTheStrides) {
  auto backend = make_reference_backend();
  NetworkOptions options;
  options.batch = 1;
  ModelOptions model_options;
  model_options.input = {3, 224, 224};
  Model model = build_model("resnet50", *backend, options, model_options);
  // The last stage's output before pooling is 7x7x2048.
  const auto& layers = model.net->layers();
  const Layer& pool = *layers[layers.size() - 3];
  ASSERT_STREQ(pool.kind(), "avgpool");
  EXPECT_EQ(pool.inputs()[0]->value.dims(), (std::vector<int64_t>{1, 2048, 7, 7}));
  // ResNet-50's forward pass is 4.09 GMAC per image (the figure usually quoted as "4.1 GFLOPs").
  EXPECT_NEAR(static_cast<double>(model.net->forward_macs()) / 1e9, 4.09, 0.02);
}

TEST(ResNet, ResNet20TakesCifarInputs) {
  auto backend = make_reference_backend();
  NetworkOptions options;
  options.batch = 3;
  ModelOptions model_options;
  model_options.input = {3, 32, 32};
  model_options.num_classes = 10;
  Model model = build_model("resnet20", *backend, options, model_options);
  model.net->finalize(1);
  EXPECT_EQ(model.net->parameter_count(), 272474);  // the 3-channel stem has 288 more weights
  EXPECT_EQ(model.logits->value.dims(), (std::vector<int64_t>{3, 10}));
}

TEST(ResNet, RejectsUnknownNamesAndTinyInputs) {
  auto backend = make_reference_backend();
  NetworkOptions options;
  ModelOptions model_options;
  EXPECT_THROW(build_model("resnet51", *backend, options, model_options), UserError);
  model_options.input = {1, 28, 28};
  EXPECT_THROW(build_model("resnet50", *backend, options, model_options), UserError);
}

// One training step of `model` (default: resnet20 on a batch 4 of 1x12x12 images; 10 classes, fixed inputs
// and seed) on the reference backend in f64 or oneDNN in f32, with the fusions `fusions` forces; the
// backend outlives the model.
struct OneStep {
  std::unique_ptr<Backend> backend;
  Model model;
};
OneStep one_training_step(bool onednn, const FusionChoices& fusions, const std::string& model = "resnet20",
                          ImageShape input = {1, 12, 12}) {
  OneStep s;
  s.backend = onednn ? make_onednn_backend(2) : make_reference_backend();
  NetworkOptions options;
  options.dtype = onednn ? DType::f32 : DType::f64;
  options.batch = 4;
  options.fusions = fusions;
  ModelOptions model_options;
  model_options.input = input;
  model_options.num_classes = 10;
  s.model = build_model(model, *s.backend, options, model_options);
  Network& net = *s.model.net;
  net.finalize(7);
  testing::fill_uniform(s.model.images->value, 11);
  for (int i = 0; i < 4; ++i) s.model.labels->value.ptr<int32_t>()[i] = 2 * i + 1;
  net.forward(Phase::train);
  net.backward();
  return s;
}

// What a training step leaves, byte for byte: the layers' kinds, the parameters' names, the loss, the
// parameter gradients, the running statistics (buffers) and then the inference logits.
struct StepBytes {
  std::vector<std::string> kinds, names;
  std::vector<uint8_t> loss, gradients, buffers, logits;
};
StepBytes step_bytes(OneStep& one) {
  auto bytes = [](const Tensor& t) {
    const auto* p = static_cast<const uint8_t*>(t.data());
    return std::vector<uint8_t>(p, p + t.bytes());
  };
  Model& model = one.model;
  StepBytes s;
  for (const auto& layer : model.net->layers()) s.kinds.push_back(layer->kind());
  for (const auto& p : model.net->memory().parameters()) s.names.push_back(p.name);
  s.loss = bytes(model.loss->output()->value);
  s.gradients = bytes(model.net->memory().flat_gradients());
  s.buffers = bytes(model.net->memory().flat_buffers());
  model.net->forward(Phase::inference);
  s.logits = bytes(model.logits->value);
  return s;
}

// Whether two steps computed the same, bit for bit, under the same parameter names.
void expect_same_step(const StepBytes& a, const StepBytes& b) {
  EXPECT_EQ(a.names, b.names);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.gradients, b.gradients);
  EXPECT_EQ(a.buffers, b.buffers);
  EXPECT_EQ(a.logits, b.logits);
}

// Folding the projection shortcuts' batch norms into their blocks' closing ones changes nothing a
// training step computes: on the reference backend (f64) and on oneDNN (f32), one step of resnet20 with
// the shortcuts folded and one without give the same loss, parameter gradients, running statistics
// (buffers) and inference logits, bit for bit (the backends compose the folded op from the single ones).
// The parameters keep their names and order.
TEST(ResNet, FoldedShortcutBatchNormsComputeWhatTheLayersDo) {
  for (const bool onednn : {false, true}) {
    SCOPED_TRACE(onednn ? "onednn" : "reference");
    auto step = [&](bool fold) {
      FusionChoices fusions;
      fusions.shortcut_batchnorm = fold;
      OneStep one = one_training_step(onednn, fusions);
      return step_bytes(one);
    };
    const StepBytes layers = step(false), folded = step(true);
    EXPECT_EQ(folded.kinds.size() + 2, layers.kinds.size());  // resnet20's two projection shortcuts, folded
    expect_same_step(folded, layers);
  }
}

// The ImageNet stem's batch norm + ReLU and max pool as one layer (BatchNormMaxPoolLayer) changes nothing a
// training step computes: on the reference backend (f64) and on oneDNN (f32), which compose the single ops,
// one step of resnet18 (33x33 inputs: a 17x17 stem output, so the pool's last windows are cut by the
// border) with the layer and one with the two layers give the same loss, parameter gradients, running
// statistics and inference logits, bit for bit. The parameters keep their names and order.
TEST(ResNet, StemBatchNormAndMaxPoolAsOneLayerComputeWhatTheLayersDo) {
  for (const bool onednn : {false, true}) {
    SCOPED_TRACE(onednn ? "onednn" : "reference");
    auto step = [&](bool fuse) {
      FusionChoices fusions;
      fusions.batchnorm_max_pool = fuse;
      OneStep one = one_training_step(onednn, fusions, "resnet18", {3, 33, 33});
      return step_bytes(one);
    };
    const StepBytes layers = step(false), fused = step(true);
    ASSERT_EQ(fused.kinds.size() + 1, layers.kinds.size());
    EXPECT_EQ(fused.kinds[1], "batchnorm+maxpool");
    EXPECT_EQ(layers.kinds[1], "batchnorm");
    EXPECT_EQ(layers.kinds[2], "maxpool");
    expect_same_step(fused, layers);
  }
}

// The batch norms' statistics taken from the convolutions before them (each convolution sums its output
// in its forward, FusionChoices::conv_statistics) change no more than rounding: one step of resnet20 on the
// reference backend (f64) with them and without, folded and not, gives the same loss, parameter gradients,
// running statistics and inference logits to 1e-10 (E[x^2] - E[x]^2 against two passes over x); every
// batch norm takes its statistics from its convolution (the plans say so). On oneDNN, which sums no
// convolution's output, asking changes nothing, bit for bit.
TEST(ResNet, ConvolutionsHandTheBatchNormsTheirStatistics) {
  struct Step {
    std::vector<double> loss, gradients, buffers, logits;
    int batch_norms = 0, with_statistics = 0;
  };
  auto values = [](const Tensor& t) {
    std::vector<double> v(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = t.dtype() == DType::f64 ? t.ptr<double>()[i] : t.ptr<float>()[i];
    return v;
  };
  auto step = [&](bool onednn, bool fold, bool statistics) {
    FusionChoices fusions;
    fusions.shortcut_batchnorm = fold;
    fusions.conv_statistics = statistics;
    OneStep one = one_training_step(onednn, fusions);
    Model& model = one.model;
    Step s;
    for (const auto& layer : model.net->layers()) {
      if (std::string(layer->kind()) != "batchnorm") continue;
      ++s.batch_norms;
      const std::string summary = layer->plan_summary();
      // A folded batch norm takes both its inputs' statistics.
      for (size_t at = summary.find("statistics from"); at != std::string::npos;
           at = summary.find("statistics from", at + 1))
        ++s.with_statistics;
    }
    s.loss = values(model.loss->output()->value);
    s.gradients = values(model.net->memory().flat_gradients());
    s.buffers = values(model.net->memory().flat_buffers());
    model.net->forward(Phase::inference);
    s.logits = values(model.logits->value);
    return s;
  };
  auto expect_near = [](const std::vector<double>& a, const std::vector<double>& b, double tol,
                        const char* what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    double worst = 0, scale = 1e-30;
    for (size_t i = 0; i < a.size(); ++i) {
      worst = std::max(worst, std::abs(a[i] - b[i]));
      scale = std::max(scale, std::abs(b[i]));
    }
    EXPECT_LE(worst / scale, tol) << what;
  };
  for (const bool fold : {false, true}) {
    SCOPED_TRACE(fold ? "folded" : "unfolded");
    const Step plain = step(false, fold, false), summed = step(false, fold, true);
    EXPECT_EQ(plain.with_statistics, 0);
    // resnet20: 19 batch norms, and 2 projection shortcuts' (separate layers or folded in).
    EXPECT_EQ(summed.with_statistics, 21);
    EXPECT_EQ(summed.batch_norms, fold ? 19 : 21);
    expect_near(summed.loss, plain.loss, 1e-10, "loss");
    expect_near(summed.gradients, plain.gradients, 1e-10, "gradients");
    expect_near(summed.buffers, plain.buffers, 1e-10, "running statistics");
    expect_near(summed.logits, plain.logits, 1e-10, "inference logits");
    // The sums differ from two passes only by rounding: a step that ignored them would match exactly.
    EXPECT_NE(summed.gradients, plain.gradients);
  }
  const Step plain = step(true, false, false), asked = step(true, false, true);
  EXPECT_EQ(asked.with_statistics, 0);
  EXPECT_EQ(asked.gradients, plain.gradients);
  EXPECT_EQ(asked.buffers, plain.buffers);
}

}  // namespace
}  // namespace dlbench
