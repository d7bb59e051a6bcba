#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "backend/reference/reference_backend.h"
#include "core/status.h"
#include "gradient_check.h"
#include "reference_test_util.h"

namespace dlbench {
namespace {

using testing::from_values;
using testing::gradient_matches;
using testing::random_buffer;
using testing::zeros;

HostBuffer labels_of(const std::vector<int32_t>& values) {
  HostBuffer labels({static_cast<int64_t>(values.size())}, DType::i32);
  for (size_t i = 0; i < values.size(); ++i) labels.ptr<int32_t>()[i] = values[i];
  return labels;
}

class SoftmaxCrossEntropyGradient : public ::testing::TestWithParam<float> {};

// The loss itself is the scalar: probs and loss in f64 (a reference-only extension) keep it exact enough
// for central differences; the backward with scale 1 is dL/dlogits.
TEST_P(SoftmaxCrossEntropyGradient, MatchesCentralDifferences) {
  const float smoothing = GetParam();
  ReferenceBackend backend;
  const int64_t N = 4, K = 6;
  HostBuffer logits = random_buffer({N, K}, DType::f64, Layout::nchw, 71, -3.0, 3.0);
  HostBuffer labels = labels_of({0, 5, 2, 2});
  HostBuffer probs = zeros({N, K}, DType::f64), loss_value = zeros({1}, DType::f64);
  HostBuffer dlogits = zeros({N, K}, DType::f64);
  backend.softmax_cross_entropy_forward(logits.tensor(), labels.tensor(), smoothing, probs.tensor(),
                                        loss_value.tensor());
  backend.softmax_cross_entropy_backward(probs.tensor(), labels.tensor(), smoothing, 1.0f, dlogits.tensor());
  auto loss = [&] {
    backend.softmax_cross_entropy_forward(logits.tensor(), labels.tensor(), smoothing, probs.tensor(),
                                          loss_value.tensor());
    return loss_value.ptr<double>()[0];
  };
  EXPECT_TRUE(gradient_matches(loss, logits.tensor(), dlogits.tensor(), testing::kGradientTolerance));
}

INSTANTIATE_TEST_SUITE_P(LabelSmoothing, SoftmaxCrossEntropyGradient, ::testing::Values(0.0f, 0.1f),
                         [](const auto& info) { return info.param == 0 ? "none" : "s0_1"; });

// logits [1 2 3], label 2: loss = logsumexp - 3 = log(1 + e^-1 + e^-2). With smoothing 0.1 over K = 3 the
// target is [1/30, 1/30, 28/30], and loss = logsumexp - sum(target * logits) = that + 0.1.
TEST(SoftmaxCrossEntropy, HandComputed) {
  ReferenceBackend backend;
  const double lse_minus_3 = std::log(1 + std::exp(-1.0) + std::exp(-2.0));
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    HostBuffer logits = from_values({2, 3}, dtype, {1, 2, 3, 3, 2, 1});
    HostBuffer labels = labels_of({2, 0});
    HostBuffer probs = zeros({2, 3}, DType::f32), loss = zeros({1}, DType::f32);
    backend.softmax_cross_entropy_forward(logits.tensor(), labels.tensor(), 0.0f, probs.tensor(),
                                          loss.tensor());
    EXPECT_FLOAT_EQ(loss.ptr<float>()[0], static_cast<float>(lse_minus_3));  // both rows have the same loss
    const double z = 1 + std::exp(1.0) + std::exp(2.0);
    EXPECT_FLOAT_EQ(probs.ptr<float>()[0], static_cast<float>(1 / z));
    EXPECT_FLOAT_EQ(probs.ptr<float>()[2], static_cast<float>(std::exp(2.0) / z));
    EXPECT_FLOAT_EQ(probs.ptr<float>()[3], static_cast<float>(std::exp(2.0) / z));

    backend.softmax_cross_entropy_forward(logits.tensor(), labels.tensor(), 0.1f, probs.tensor(),
                                          loss.tensor());
    EXPECT_NEAR(loss.ptr<float>()[0], lse_minus_3 + 0.1, 1e-6);

    // dlogits = scale * (probs - target) / N with N = 2, scale = 4.
    HostBuffer dlogits = zeros({2, 3}, dtype);
    backend.softmax_cross_entropy_backward(probs.tensor(), labels.tensor(), 0.1f, 4.0f, dlogits.tensor());
    const double target_label = 0.9 + 0.1 / 3, target_other = 0.1 / 3;
    EXPECT_NEAR(testing::get_element(dlogits.tensor(), 2), 4 * (std::exp(2.0) / z - target_label) / 2, 1e-6);
    EXPECT_NEAR(testing::get_element(dlogits.tensor(), 0), 4 * (1 / z - target_other) / 2, 1e-6);
    EXPECT_NEAR(testing::get_element(dlogits.tensor(), 3), 4 * (std::exp(2.0) / z - target_label) / 2, 1e-6);
  }
}

// log-sum-exp with the max subtracted: logits of 1000 neither overflow nor produce NaN.
TEST(SoftmaxCrossEntropy, StableForLargeLogits) {
  ReferenceBackend backend;
  HostBuffer logits = from_values({2, 2}, DType::f32, {1000, 0, 1000, 0});
  HostBuffer labels = labels_of({0, 1});
  HostBuffer probs = zeros({2, 2}, DType::f32), loss = zeros({1}, DType::f32);
  backend.softmax_cross_entropy_forward(logits.tensor(), labels.tensor(), 0.0f, probs.tensor(),
                                        loss.tensor());
  EXPECT_TRUE(testing::all_finite(probs.tensor()));
  EXPECT_FLOAT_EQ(probs.ptr<float>()[0], 1.0f);
  EXPECT_EQ(probs.ptr<float>()[1], 0.0f);
  EXPECT_FLOAT_EQ(loss.ptr<float>()[0], 500.0f);  // row 0: ~0, row 1: 1000; mean 500
}

TEST(SoftmaxCrossEntropy, LabelOutOfRangeThrows) {
  ReferenceBackend backend;
  HostBuffer logits = zeros({2, 3}, DType::f32), probs = zeros({2, 3}, DType::f32),
             loss = zeros({1}, DType::f32);
  HostBuffer dlogits = zeros({2, 3}, DType::f32);
  for (int32_t bad : {3, -1, 1000000}) {
    HostBuffer labels = labels_of({0, bad});
    try {
      backend.softmax_cross_entropy_forward(logits.tensor(), labels.tensor(), 0.0f, probs.tensor(),
                                            loss.tensor());
      FAIL() << "no throw for label " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("label " + std::to_string(bad) + " of row 1 is outside [0, 3)"),
                std::string::npos)
          << e.what();
    }
    EXPECT_THROW(
        backend.softmax_cross_entropy_backward(probs.tensor(), labels.tensor(), 0.0f, 1.0f, dlogits.tensor()),
        Error);
  }
  HostBuffer short_labels = labels_of({0});
  EXPECT_THROW(backend.softmax_cross_entropy_forward(logits.tensor(), short_labels.tensor(), 0.0f,
                                                     probs.tensor(), loss.tensor()),
               Error);
}

// ---- GPT-2's cross-entropy over a vocabulary padded to K columns, the first V of them real ----

// The padded columns hold large logits that would dominate a softmax over all K: the loss, probabilities
// and gradient must equal the unpadded op's on the first V columns, with 0 in the padded ones.
class TransformerCrossEntropy : public ::testing::TestWithParam<float> {};

TEST_P(TransformerCrossEntropy, PaddedColumnsAreAbsent) {
  const float smoothing = GetParam();
  ReferenceBackend backend;
  const int64_t N = 4, V = 6, K = 8;
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    HostBuffer padded = random_buffer({N, K}, dtype, Layout::nchw, 81, -3.0, 3.0);
    HostBuffer plain = zeros({N, V}, dtype);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t j = 0; j < V; ++j)
        testing::set_element(plain.tensor(), n * V + j, testing::get_element(padded.tensor(), n * K + j));
      for (int64_t j = V; j < K; ++j) testing::set_element(padded.tensor(), n * K + j, 50.0);
    }
    HostBuffer labels = labels_of({0, 5, 2, 5});
    HostBuffer padded_probs = zeros({N, K}, dtype), padded_loss = zeros({1}, dtype);
    HostBuffer plain_probs = zeros({N, V}, dtype), plain_loss = zeros({1}, dtype);
    backend.softmax_cross_entropy_padded_forward(padded.tensor(), labels.tensor(), V, smoothing,
                                                 padded_probs.tensor(), padded_loss.tensor());
    backend.softmax_cross_entropy_forward(plain.tensor(), labels.tensor(), smoothing, plain_probs.tensor(),
                                          plain_loss.tensor());
    EXPECT_EQ(testing::get_element(padded_loss.tensor(), 0), testing::get_element(plain_loss.tensor(), 0));
    HostBuffer padded_dlogits = testing::filled({N, K}, dtype, 9.0), plain_dlogits = zeros({N, V}, dtype);
    backend.softmax_cross_entropy_padded_backward(padded_probs.tensor(), labels.tensor(), V, smoothing, 2.0f,
                                                  padded_dlogits.tensor());
    backend.softmax_cross_entropy_backward(plain_probs.tensor(), labels.tensor(), smoothing, 2.0f,
                                           plain_dlogits.tensor());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < K; ++j) {
        const double prob = j < V ? testing::get_element(plain_probs.tensor(), n * V + j) : 0.0;
        const double grad = j < V ? testing::get_element(plain_dlogits.tensor(), n * V + j) : 0.0;
        EXPECT_EQ(testing::get_element(padded_probs.tensor(), n * K + j), prob) << n << ", " << j;
        EXPECT_EQ(testing::get_element(padded_dlogits.tensor(), n * K + j), grad) << n << ", " << j;
      }
  }
}

TEST_P(TransformerCrossEntropy, GradientMatchesCentralDifferences) {
  const float smoothing = GetParam();
  ReferenceBackend backend;
  const int64_t N = 4, V = 6, K = 8;
  HostBuffer logits = random_buffer({N, K}, DType::f64, Layout::nchw, 82, -3.0, 3.0);
  HostBuffer labels = labels_of({1, 5, 0, 3});
  HostBuffer probs = zeros({N, K}, DType::f64), loss_value = zeros({1}, DType::f64);
  HostBuffer dlogits = zeros({N, K}, DType::f64);
  backend.softmax_cross_entropy_padded_forward(logits.tensor(), labels.tensor(), V, smoothing, probs.tensor(),
                                               loss_value.tensor());
  backend.softmax_cross_entropy_padded_backward(probs.tensor(), labels.tensor(), V, smoothing, 1.0f,
                                                dlogits.tensor());
  auto loss = [&] {
    backend.softmax_cross_entropy_padded_forward(logits.tensor(), labels.tensor(), V, smoothing,
                                                 probs.tensor(), loss_value.tensor());
    return loss_value.ptr<double>()[0];
  };
  EXPECT_TRUE(gradient_matches(loss, logits.tensor(), dlogits.tensor(), testing::kGradientTolerance));
}

// The fused op (the language model's loss): the loss and each row's loss from the logits, and, in
// training, the gradient written over them, equal to the padded ops' forward and backward; in double the
// gradient it writes is the loss's by central differences.
TEST_P(TransformerCrossEntropy, FusedOverTheLogitsEqualsForwardThenBackward) {
  const float smoothing = GetParam();
  ReferenceBackend backend;
  const int64_t N = 4, V = 6, K = 8;
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    HostBuffer logits = random_buffer({N, K}, dtype, Layout::nchw, 83, -3.0, 3.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = V; j < K; ++j) testing::set_element(logits.tensor(), n * K + j, 50.0);
    HostBuffer labels = labels_of({2, 5, 0, 5});
    HostBuffer probs = zeros({N, K}, dtype), loss = zeros({1}, dtype), dlogits = zeros({N, K}, dtype);
    const float loss_scale = 4.f;
    backend.softmax_cross_entropy_padded_forward(logits.tensor(), labels.tensor(), V, smoothing,
                                                 probs.tensor(), loss.tensor());
    backend.softmax_cross_entropy_padded_backward(probs.tensor(), labels.tensor(), V, smoothing, 0.5f,
                                                  dlogits.tensor(), &loss_scale);
    HostBuffer fused_loss = zeros({1}, dtype), rows = zeros({N}, DType::f32),
               inference_loss = zeros({1}, dtype);
    HostBuffer kept = zeros({N, K}, dtype);
    std::memcpy(kept.tensor().data(), logits.tensor().data(), logits.tensor().bytes());
    // Inference: the loss alone, the logits left as they were.
    backend.softmax_cross_entropy_fused(logits.tensor(), labels.tensor(), V, smoothing, rows.tensor(),
                                        inference_loss.tensor(), std::nullopt);
    EXPECT_EQ(std::memcmp(kept.tensor().data(), logits.tensor().data(), logits.tensor().bytes()), 0);
    backend.softmax_cross_entropy_fused(logits.tensor(), labels.tensor(), V, smoothing, rows.tensor(),
                                        fused_loss.tensor(), 0.5f, &loss_scale);
    const double tolerance = dtype == DType::f64 ? 1e-12 : 1e-6;
    EXPECT_NEAR(testing::get_element(fused_loss.tensor(), 0), testing::get_element(loss.tensor(), 0),
                tolerance);
    EXPECT_EQ(testing::get_element(inference_loss.tensor(), 0), testing::get_element(fused_loss.tensor(), 0));
    double row_sum = 0;
    for (int64_t n = 0; n < N; ++n) row_sum += rows.ptr<float>()[n];
    EXPECT_NEAR(row_sum / N, testing::get_element(loss.tensor(), 0), 1e-6);
    for (int64_t e = 0; e < N * K; ++e)
      EXPECT_NEAR(testing::get_element(logits.tensor(), e), testing::get_element(dlogits.tensor(), e),
                  tolerance * 8)
          << e;
  }
  HostBuffer logits = random_buffer({N, K}, DType::f64, Layout::nchw, 84, -3.0, 3.0);
  HostBuffer labels = labels_of({1, 5, 0, 3});
  HostBuffer rows = zeros({N}, DType::f32), loss_value = zeros({1}, DType::f64),
             gradient = zeros({N, K}, DType::f64);
  std::memcpy(gradient.tensor().data(), logits.tensor().data(), logits.tensor().bytes());
  backend.softmax_cross_entropy_fused(gradient.tensor(), labels.tensor(), V, smoothing, rows.tensor(),
                                      loss_value.tensor(), 1.0f);
  auto loss = [&] {
    backend.softmax_cross_entropy_fused(logits.tensor(), labels.tensor(), V, smoothing, rows.tensor(),
                                        loss_value.tensor(), std::nullopt);
    return loss_value.ptr<double>()[0];
  };
  EXPECT_TRUE(gradient_matches(loss, logits.tensor(), gradient.tensor(), testing::kGradientTolerance));
}

INSTANTIATE_TEST_SUITE_P(LabelSmoothing, TransformerCrossEntropy, ::testing::Values(0.0f, 0.1f),
                         [](const auto& info) { return info.param == 0 ? "none" : "s0_1"; });

TEST(TransformerCrossEntropyLabels, LabelInThePaddingThrows) {
  ReferenceBackend backend;
  HostBuffer logits = zeros({2, 8}, DType::f32), probs = zeros({2, 8}, DType::f32),
             loss = zeros({1}, DType::f32);
  HostBuffer labels = labels_of({0, 6});
  try {
    backend.softmax_cross_entropy_padded_forward(logits.tensor(), labels.tensor(), 6, 0.0f, probs.tensor(),
                                                 loss.tensor());
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("label 6 of row 1 is outside [0, 6)"), std::string::npos)
        << e.what();
  }
  HostBuffer ok_labels = labels_of({0, 1});
  EXPECT_THROW(backend.softmax_cross_entropy_padded_forward(logits.tensor(), ok_labels.tensor(), 9, 0.0f,
                                                            probs.tensor(), loss.tensor()),
               Error);  // more valid classes than columns
}

}  // namespace
}  // namespace dlbench
