// attention_forward / attention_backward: causal multi-head self-attention over qkv [B, T, 3C].
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/reference/reference_backend.h"
#include "core/status.h"
#include "gradient_check.h"
#include "reference_test_util.h"
#include "transformer_test_util.h"

namespace dlbench {
namespace {

using namespace testing;

constexpr int64_t kHeadDim = kChannels / kHeads;

struct AttentionBuffers {
  HostBuffer qkv, out, stats;
  AttentionBuffers(DType dtype, DType stats_dtype, uint64_t seed)
      : qkv(f32_exact_buffer({kBatch, kSeq, 3 * kChannels}, dtype, seed, -1.5, 1.5)),
        out(zeros({kBatch, kSeq, kChannels}, dtype)),
        stats(zeros({kBatch, kHeads, kSeq}, stats_dtype)) {}
  void forward(Backend& backend) {
    backend.attention_forward(qkv.tensor(), kHeads, out.tensor(), stats.tensor());
  }
  // Element i of head h of q (part 0), k (1) or v (2) at (b, t).
  double at(int64_t b, int64_t t, int64_t part, int64_t h, int64_t i) const {
    return get_element(qkv.tensor(), (b * kSeq + t) * 3 * kChannels + part * kChannels + h * kHeadDim + i);
  }
};

TEST(AttentionGradient, MatchesCentralDifferences) {
  ReferenceBackend backend;
  AttentionBuffers a(DType::f64, DType::f64, 61);
  HostBuffer r = random_buffer({kBatch, kSeq, kChannels}, DType::f64, Layout::nchw, 62);
  HostBuffer dqkv = filled(a.qkv.tensor().dims(), DType::f64, 3.0);  // overwritten
  a.forward(backend);
  backend.attention_backward(a.qkv.tensor(), a.out.tensor(), a.stats.tensor(), r.tensor(), kHeads,
                             dqkv.tensor());
  auto loss = [&] {
    HostBuffer out = zeros({kBatch, kSeq, kChannels}, DType::f64),
               stats = zeros({kBatch, kHeads, kSeq}, DType::f64);
    backend.attention_forward(a.qkv.tensor(), kHeads, out.tensor(), stats.tensor());
    return weighted_sum(out.tensor(), r.tensor());
  };
  EXPECT_TRUE(gradient_matches(loss, a.qkv.tensor(), dqkv.tensor(), kGradientTolerance));
}

// The FP32 stats of the contract (not the reference's f64 extension) still give the gradient to ~1e-7.
TEST(AttentionGradient, MatchesCentralDifferencesWithF32Stats) {
  ReferenceBackend backend;
  AttentionBuffers a(DType::f64, DType::f32, 63);
  HostBuffer r = random_buffer({kBatch, kSeq, kChannels}, DType::f64, Layout::nchw, 64);
  HostBuffer dqkv = zeros(a.qkv.tensor().dims(), DType::f64);
  a.forward(backend);
  backend.attention_backward(a.qkv.tensor(), a.out.tensor(), a.stats.tensor(), r.tensor(), kHeads,
                             dqkv.tensor());
  auto loss = [&] {
    a.forward(backend);
    return weighted_sum(a.out.tensor(), r.tensor());
  };
  EXPECT_TRUE(gradient_matches(loss, a.qkv.tensor(), dqkv.tensor(), 1e-5));
}

// softmax(Q K^T / sqrt(d) + M) V with M = -inf above the diagonal, written the naive way (no max
// subtraction: the scores are small), and the stats as log(sum_j exp(s_j)) of each row.
TEST(Attention, EqualsNaiveMaskedSoftmaxAndStatsAreLogSumExp) {
  ReferenceBackend backend;
  AttentionBuffers a(DType::f64, DType::f64, 65);
  a.forward(backend);
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t h = 0; h < kHeads; ++h) {
      std::vector<std::vector<double>> p(kSeq, std::vector<double>(kSeq));
      for (int64_t t = 0; t < kSeq; ++t) {
        double sum = 0;
        for (int64_t j = 0; j < kSeq; ++j) {
          double s = 0;
          for (int64_t i = 0; i < kHeadDim; ++i) s += a.at(b, t, 0, h, i) * a.at(b, j, 1, h, i);
          s = s / std::sqrt(double(kHeadDim)) + (j > t ? -INFINITY : 0.0);
          p[t][j] = std::exp(s);
          sum += p[t][j];
        }
        for (int64_t j = 0; j < kSeq; ++j) p[t][j] /= sum;
        EXPECT_NEAR(get_element(a.stats.tensor(), (b * kHeads + h) * kSeq + t), std::log(sum), 1e-13);
        for (int64_t i = 0; i < kHeadDim; ++i) {
          double expected = 0;
          for (int64_t j = 0; j < kSeq; ++j) expected += p[t][j] * a.at(b, j, 2, h, i);
          EXPECT_NEAR(get_element(a.out.tensor(), (b * kSeq + t) * kChannels + h * kHeadDim + i), expected,
                      1e-13)
              << "b " << b << " h " << h << " t " << t << " i " << i;
        }
      }
    }
}

// Changing position 3's query, key and value in sequence 0 leaves every earlier output and stat of that
// sequence, and all of sequence 1, bit-identical; position 3's own output changes.
TEST(Attention, FuturePositionsDoNotReachThePast) {
  ReferenceBackend backend;
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    AttentionBuffers a(dtype, DType::f32, 66), changed(dtype, DType::f32, 66);
    const int64_t future = 3;
    for (int64_t c = 0; c < 3 * kChannels; ++c) {
      const int64_t i = future * 3 * kChannels + c;
      set_element(changed.qkv.tensor(), i, get_element(changed.qkv.tensor(), i) + 0.75);
    }
    a.forward(backend);
    changed.forward(backend);
    EXPECT_TRUE(bit_identical(a.out.tensor(), changed.out.tensor(), 0, future * kChannels));
    EXPECT_FALSE(
        bit_identical(a.out.tensor(), changed.out.tensor(), future * kChannels, (future + 1) * kChannels));
    EXPECT_TRUE(bit_identical(a.out.tensor(), changed.out.tensor(), kSeq * kChannels, 2 * kSeq * kChannels));
    for (int64_t h = 0; h < kHeads; ++h)
      EXPECT_TRUE(bit_identical(a.stats.tensor(), changed.stats.tensor(), h * kSeq, h * kSeq + future));
    EXPECT_TRUE(bit_identical(a.stats.tensor(), changed.stats.tensor(), kHeads * kSeq, 2 * kHeads * kSeq));
  }
}

TEST(Attention, F32MatchesF64) {
  ReferenceBackend backend;
  AttentionBuffers a64(DType::f64, DType::f64, 67), a32(DType::f32, DType::f32, 67);
  a64.forward(backend);
  a32.forward(backend);
  EXPECT_LT(relative_error(a32.out.tensor(), a64.out.tensor()), kF32VsF64Tolerance);
  EXPECT_LT(relative_error(a32.stats.tensor(), a64.stats.tensor()), kF32VsF64Tolerance);
  HostBuffer dout64 = f32_exact_buffer({kBatch, kSeq, kChannels}, DType::f64, 68);
  HostBuffer dout32 = as_dtype(dout64.tensor(), DType::f32);
  HostBuffer d64 = zeros(a64.qkv.tensor().dims(), DType::f64),
             d32 = zeros(a64.qkv.tensor().dims(), DType::f32);
  backend.attention_backward(a64.qkv.tensor(), a64.out.tensor(), a64.stats.tensor(), dout64.tensor(), kHeads,
                             d64.tensor());
  backend.attention_backward(a32.qkv.tensor(), a32.out.tensor(), a32.stats.tensor(), dout32.tensor(), kHeads,
                             d32.tensor());
  EXPECT_LT(relative_error(d32.tensor(), d64.tensor()), kF32VsF64Tolerance);
}

TEST(Attention, HeadsMustDivideTheChannels) {
  ReferenceBackend backend;
  AttentionBuffers a(DType::f32, DType::f32, 69);
  HostBuffer stats = zeros({kBatch, 3, kSeq}, DType::f32);
  try {
    backend.attention_forward(a.qkv.tensor(), 3, a.out.tensor(), stats.tensor());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 heads do not divide C = 8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dlbench
