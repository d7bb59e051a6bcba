// One whole ResNet-50 training step on the GPU against the same step on the CPU (oneDNN), in fp32 with
// TF32 off: the loss and every parameter's gradient must agree to a relative error below 1e-3.
//
// The relative error of a gradient tensor is ||gpu - cpu||_2 / ||cpu||_2. (A max-norm per element is the
// wrong measure across 50 layers: the two backends' last-bit differences flip a few ReLU masks where a
// pre-activation sits within ~1e-6 of zero, and each flip moves one term of a batch-norm channel's sum, a
// percent-level change of that one channel that says nothing about the rest.)
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "models/resnet.h"
#include "test_util.h"
#ifdef DLBENCH_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace dlbench {
namespace {

struct StepResult {
  float loss = 0;
  std::vector<float> gradients;  // the flat FP32 gradient buffer
  std::vector<std::string> names;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // offset, count per parameter
};

StepResult one_step(Backend& backend, Layout layout, const std::vector<float>& images,
                    const std::vector<int32_t>& labels, int64_t batch, int64_t size) {
  NetworkOptions options;
  options.batch = batch;
  options.layout = layout;
  ModelOptions model_options;
  model_options.input = {3, size, size};
  model_options.num_classes = 1000;
  Model model = build_model("resnet50", backend, options, model_options);
  model.net->finalize(/*seed=*/123);
  // Images are given in NCHW; convert to the network layout on the host.
  const Tensor& in = model.images->value;
  std::vector<float> laid(images.size());
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < size; ++h)
        for (int64_t w = 0; w < size; ++w)
          laid[static_cast<size_t>(in.offset(n, c, h, w))] =
              images[static_cast<size_t>(((n * 3 + c) * size + h) * size + w)];
  backend.copy_to_device(in.data(), laid.data(), laid.size() * sizeof(float));
  backend.copy_to_device(model.labels->value.data(), labels.data(), labels.size() * sizeof(int32_t));
  model.net->forward(Phase::train);
  model.net->backward();
  backend.synchronize();
  StepResult r;
  backend.copy_to_host(&r.loss, model.loss->output()->value.data(), sizeof(float));
  Tensor& grads = model.net->memory().flat_gradients();
  r.gradients.resize(static_cast<size_t>(grads.numel()));
  backend.copy_to_host(r.gradients.data(), grads.data(), grads.bytes());
  for (const auto& p : model.net->memory().parameters()) {
    r.names.push_back(p.name);
    r.ranges.emplace_back(p.offset, p.value->numel());
  }
  return r;
}

TEST(GpuModel, ResNet50StepMatchesOneDnnInFp32) {
#ifndef DLBENCH_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU: the GPU-vs-oneDNN step check needs one";
  // Small, but the last stage keeps 4x4 pixels: batch norm there averages 128 values per channel, not a
  // handful whose statistics make its backward ill-conditioned.
  const int64_t batch = 8, size = 112;
  HostBuffer images({batch, 3, size, size}, DType::f32);
  testing::fill_uniform(images.tensor(), 99, -2, 2);
  std::vector<float> image_values(images.ptr<float>(), images.ptr<float>() + images.numel());
  std::vector<int32_t> labels{3, 141, 592, 999, 0, 17, 404, 808};

  auto cpu = make_onednn_backend(0);
  auto gpu = make_cuda_backend(0, /*allow_tf32=*/false);
  for (Layout layout : {Layout::nhwc, Layout::nchw}) {
    SCOPED_TRACE(layout_name(layout));
    StepResult a = one_step(*cpu, layout, image_values, labels, batch, size);
    StepResult b = one_step(*gpu, layout, image_values, labels, batch, size);
    EXPECT_NEAR(b.loss, a.loss, 1e-3 * std::abs(a.loss));
    ASSERT_EQ(a.gradients.size(), b.gradients.size());
    int checked = 0;
    double worst = 0;
    for (size_t i = 0; i < a.names.size(); ++i) {
      auto [offset, count] = a.ranges[i];
      double diff2 = 0, ref2 = 1e-30;
      for (int64_t k = offset; k < offset + count; ++k) {
        double x = a.gradients[static_cast<size_t>(k)], y = b.gradients[static_cast<size_t>(k)];
        ASSERT_FALSE(std::isnan(y)) << a.names[i];
        diff2 += (x - y) * (x - y);
        ref2 += x * x;
      }
      double relative = std::sqrt(diff2 / ref2);
      worst = std::max(worst, relative);
      EXPECT_LT(relative, 1e-3) << a.names[i];
      ++checked;
    }
    EXPECT_EQ(checked, 161);  // every parameter tensor of ResNet-50
    std::printf("%s: loss %.6f vs %.6f, worst gradient relative error %.2e\n", layout_name(layout), b.loss,
                a.loss, worst);
  }
#endif
}

}  // namespace
}  // namespace dlbench
