// Finite-difference gradient checks of every layer, in double precision on the reference backend.
//
// Each check builds a small network around the layer under test (ending in average pool, linear and
// softmax cross-entropy, so the loss is a scalar of everything), computes all parameter gradients with one
// backward pass, and compares a sample of them with central differences of the loss. Layers that sit
// upstream of the one under test only get right gradients if its input gradient is right, so input
// gradients are checked too. Tolerance: |analytic - numeric| <= 1e-7 + 1e-5 |numeric|, with h = 1e-5
// (truncation error ~h^2, round-off ~1e-16/h: both far below it).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "models/resnet.h"
#include "nn/batchnorm.h"
#include "nn/conv.h"
#include "nn/linear.h"
#include "nn/network.h"
#include "nn/parameter_gradient_check.h"
#include "nn/pool.h"
#include "nn/relu.h"
#include "nn/softmax_cross_entropy.h"
#include "test_util.h"

namespace dlbench {
namespace {

struct Harness {
  std::unique_ptr<Backend> backend = make_reference_backend();
  std::unique_ptr<Network> net;
  Activation* images = nullptr;
  Activation* labels = nullptr;
  SoftmaxCrossEntropyLayer* loss = nullptr;

  Harness(int64_t batch, std::vector<int64_t> image_dims, Layout layout) {
    NetworkOptions options;
    options.dtype = DType::f64;
    options.layout = layout;
    options.batch = batch;
    net = std::make_unique<Network>(*backend, options);
    image_dims.insert(image_dims.begin(), batch);
    images = &net->new_input("images", image_dims, DType::f64);
    labels = &net->new_input("labels", {batch}, DType::i32);
  }

  // Average pool (if 4-D), linear to 3 classes, loss.
  void finish(Activation& features, float label_smoothing = 0.f) {
    Activation* x = &features;
    if (x->value.rank() == 4) x = net->add<GlobalAvgPoolLayer>("head.pool", *x).output();
    Activation& logits = *net->add<LinearLayer>("head.fc", *x, 3).output();
    loss = &net->add<SoftmaxCrossEntropyLayer>("loss", logits, *labels, label_smoothing);
    net->finalize(7);
    testing::fill_uniform(images->value, 11, -1, 1);
    for (int64_t i = 0; i < labels->value.numel(); ++i)
      labels->value.ptr<int32_t>()[i] = static_cast<int32_t>(i % 3);
  }

  double loss_value() {
    net->forward(Phase::train);
    return loss->output()->value.ptr<double>()[0];
  }

  // Checks `samples` evenly spread parameter gradients (every one if samples >= count).
  void check_parameter_gradients(int samples = 60) {
    testing::check_parameter_gradients(
        *net, [this] { return loss_value(); }, samples);
  }
};

class LayerGradient : public ::testing::TestWithParam<Layout> {};

TEST_P(LayerGradient, ConvolutionStridedPaddedAndItsInputGradient) {
  Harness h(2, {3, 7, 9}, GetParam());
  // conv1's weight gradient needs conv2's input gradient (backward data) to be right.
  auto& c1 = h.net->add<ConvLayer>("conv1", *h.images, ConvOptions{4, 3, 2, 1});
  auto& c2 = h.net->add<ConvLayer>("conv2", *c1.output(), ConvOptions{5, 3, 1, 1});
  auto& c3 = h.net->add<ConvLayer>("conv3", *c2.output(), ConvOptions{3, 1, 2, 0});
  h.finish(*c3.output());
  h.check_parameter_gradients(200);
}

TEST_P(LayerGradient, BatchNormPlainAndRelu) {
  for (BatchNormFusion fusion : {BatchNormFusion::none, BatchNormFusion::relu}) {
    Harness h(3, {2, 5, 5}, GetParam());
    auto& conv = h.net->add<ConvLayer>("conv", *h.images, ConvOptions{4, 3, 1, 1});
    auto& bn = h.net->add<BatchNormLayer>("bn", *conv.output(), fusion);
    auto& conv2 = h.net->add<ConvLayer>("conv2", *bn.output(), ConvOptions{3, 1, 1, 0});
    h.finish(*conv2.output());
    h.check_parameter_gradients(200);
  }
}

TEST_P(LayerGradient, BatchNormWithFusedResidualAddAndRelu) {
  // a = bn1(conv1(x)); y = relu(bn2(conv2(a)) + a): `a` feeds conv2 and the residual, so its gradient is
  // written by bn2's backward and then accumulated by conv2's.
  Harness h(2, {3, 6, 6}, GetParam());
  auto& c1 = h.net->add<ConvLayer>("conv1", *h.images, ConvOptions{4, 3, 1, 1});
  auto& a = *h.net->add<BatchNormLayer>("bn1", *c1.output(), BatchNormFusion::relu).output();
  auto& c2 = h.net->add<ConvLayer>("conv2", a, ConvOptions{4, 3, 1, 1});
  auto& y = *h.net->add<BatchNormLayer>("bn2", *c2.output(), BatchNormFusion::add_relu, &a).output();
  h.finish(y);
  h.check_parameter_gradients(300);
}

TEST_P(LayerGradient, ReluAndMaxPool) {
  Harness h(2, {2, 9, 8}, GetParam());
  auto& conv = h.net->add<ConvLayer>("conv", *h.images, ConvOptions{3, 3, 1, 1});
  auto& relu = h.net->add<ReluLayer>("relu", *conv.output());
  auto& pool = h.net->add<MaxPoolLayer>("pool", *relu.output(), 3, 2, 1);
  auto& conv2 = h.net->add<ConvLayer>("conv2", *pool.output(), ConvOptions{3, 1, 1, 0});
  h.finish(*conv2.output());
  h.check_parameter_gradients(200);
}

TEST_P(LayerGradient, LinearOnFlattenedFeaturesWithLabelSmoothing) {
  Harness h(4, {2, 3, 3}, GetParam());
  auto& conv = h.net->add<ConvLayer>("conv", *h.images, ConvOptions{2, 3, 1, 1});
  auto& fc1 = h.net->add<LinearLayer>("fc1", *conv.output(), 6);  // flattens [N, 2, 3, 3]
  h.finish(*fc1.output(), /*label_smoothing=*/0.1f);
  h.check_parameter_gradients(200);
}

TEST_P(LayerGradient, WholeResNet20) {
  auto backend = make_reference_backend();
  NetworkOptions options;
  options.dtype = DType::f64;
  options.layout = GetParam();
  options.batch = 2;
  ModelOptions model_options;
  model_options.input = {1, 8, 8};
  model_options.num_classes = 10;
  // The projection shortcuts' batch norms folded into their blocks' closing ones: their gradients then
  // come from Backend::batchnorm_shortcut_backward.
  options.fusions.shortcut_batchnorm = true;
  Model model = build_model("resnet20", *backend, options, model_options);
  model.net->finalize(3);
  testing::fill_uniform(model.images->value, 5);
  model.labels->value.ptr<int32_t>()[0] = 3;
  model.labels->value.ptr<int32_t>()[1] = 8;
  auto loss = [&] {
    model.net->forward(Phase::train);
    return model.loss->output()->value.ptr<double>()[0];
  };
  loss();
  model.net->backward();
  Tensor& params = model.net->memory().flat_parameters();
  std::vector<double> analytic(model.net->memory().flat_gradients().ptr<double>(),
                               model.net->memory().flat_gradients().ptr<double>() + params.numel());
  // One weight from every parameter tensor: every layer's backward is on some path to each.
  for (const auto& p : model.net->memory().parameters()) {
    int64_t i = p.value->numel() / 2;
    double& w = params.ptr<double>()[p.offset + i];
    double saved = w;
    const double step = 1e-6;  // small: a deep ReLU net has kinks near any point
    w = saved + step;
    double up = loss();
    w = saved - step;
    double down = loss();
    w = saved;
    double numeric = (up - down) / (2 * step);
    EXPECT_NEAR(analytic[static_cast<size_t>(p.offset + i)], numeric, 1e-7 + 1e-5 * std::abs(numeric))
        << p.name;
  }
}

TEST(ParameterGradients, AccumulateModeAddsMicroBatches) {
  Harness h(2, {2, 4, 4}, Layout::nchw);
  auto& conv = h.net->add<ConvLayer>("conv", *h.images, ConvOptions{3, 3, 1, 1});
  auto& bn = h.net->add<BatchNormLayer>("bn", *conv.output(), BatchNormFusion::relu);
  h.finish(*bn.output());
  Tensor& grads = h.net->memory().flat_gradients();
  h.loss_value();
  h.net->backward();
  std::vector<double> once(grads.ptr<double>(), grads.ptr<double>() + grads.numel());
  h.net->set_parameter_grad_mode(Accumulate::add);
  h.loss_value();
  h.net->backward();
  for (int64_t i = 0; i < grads.numel(); ++i)
    EXPECT_NEAR(grads.ptr<double>()[i], 2 * once[static_cast<size_t>(i)], 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Layouts, LayerGradient, ::testing::Values(Layout::nchw, Layout::nhwc),
                         [](const auto& info) { return std::string(layout_name(info.param)); });

}  // namespace
}  // namespace dlbench
