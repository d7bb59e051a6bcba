#include "models/resnet.h"

#include <gtest/gtest.h>

#include <cstring>
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

// Folding the projection shortcuts' batch norms into their blocks' closing ones changes nothing a
// training step computes: on the reference backend (f64) and on oneDNN (f32), one step of resnet20 with
// the shortcuts folded and one without give the same loss, parameter gradients, running statistics
// (buffers) and inference logits, bit for bit (the backends compose the folded op from the single ones).
// The parameters keep their names and order.
TEST(ResNet, FoldedShortcutBatchNormsComputeWhatTheLayersDo) {
  struct Step {
    std::vector<std::string> names;
    std::vector<uint8_t> loss, gradients, buffers, logits;
    size_t layers = 0;
  };
  auto bytes = [](const Tensor& t) {
    const auto* p = static_cast<const uint8_t*>(t.data());
    return std::vector<uint8_t>(p, p + t.bytes());
  };
  for (const bool onednn : {false, true}) {
    SCOPED_TRACE(onednn ? "onednn" : "reference");
    auto step = [&](bool fold) {
      std::unique_ptr<Backend> backend = onednn ? make_onednn_backend(2) : make_reference_backend();
      NetworkOptions options;
      options.dtype = onednn ? DType::f32 : DType::f64;
      options.batch = 4;
      ModelOptions model_options;
      model_options.input = {1, 12, 12};
      model_options.num_classes = 10;
      model_options.fold_shortcut_bn = fold;
      Model model = build_model("resnet20", *backend, options, model_options);
      model.net->finalize(7);
      testing::fill_uniform(model.images->value, 11);
      for (int i = 0; i < 4; ++i) model.labels->value.ptr<int32_t>()[i] = 2 * i + 1;
      model.net->forward(Phase::train);
      model.net->backward();
      Step s;
      s.layers = model.net->layers().size();
      for (const auto& p : model.net->memory().parameters()) s.names.push_back(p.name);
      s.loss = bytes(model.loss->output()->value);
      s.gradients = bytes(model.net->memory().flat_gradients());
      s.buffers = bytes(model.net->memory().flat_buffers());
      model.net->forward(Phase::inference);
      s.logits = bytes(model.logits->value);
      return s;
    };
    const Step layers = step(false), folded = step(true);
    EXPECT_EQ(folded.layers + 2, layers.layers);  // resnet20's two projection shortcuts, folded
    EXPECT_EQ(folded.names, layers.names);
    EXPECT_EQ(folded.loss, layers.loss);
    EXPECT_EQ(folded.gradients, layers.gradients);
    EXPECT_EQ(folded.buffers, layers.buffers);
    EXPECT_EQ(folded.logits, layers.logits);
  }
}

}  // namespace
}  // namespace dlbench
