#include "models/resnet.h"

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "core/status.h"

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

}  // namespace
}  // namespace dlbench
