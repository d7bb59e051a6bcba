// embedding_forward / embedding_backward: token and position rows gathered, their gradients scattered.
#include <gtest/gtest.h>

#include <string>

#include "backend/reference/reference_backend.h"
#include "core/status.h"
#include "gradient_check.h"
#include "reference_test_util.h"
#include "transformer_test_util.h"

namespace dlbench {
namespace {

using namespace testing;

constexpr int64_t kPositions = 7;  // wpe has more rows than T: rows T.. receive no gradient

// Token 3 appears three times and token 0 twice: the scatter must sum them.
HostBuffer sample_tokens() { return tokens_of({kBatch, kSeq}, {3, 0, 7, 3, 10, 0, 3, 5, 1, 9}); }

TEST(Embedding, ForwardAddsTokenAndPositionRows) {
  ReferenceBackend backend;
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    HostBuffer tokens = sample_tokens();
    HostBuffer wte = f32_exact_buffer({kVocab, kChannels}, dtype, 1);
    HostBuffer wpe = f32_exact_buffer({kPositions, kChannels}, dtype, 2);
    HostBuffer out = zeros({kBatch, kSeq, kChannels}, dtype);
    backend.embedding_forward(tokens.tensor(), wte.tensor(), wpe.tensor(), out.tensor());
    for (int64_t b = 0; b < kBatch; ++b)
      for (int64_t t = 0; t < kSeq; ++t)
        for (int64_t c = 0; c < kChannels; ++c) {
          const int64_t token = tokens.ptr<int32_t>()[b * kSeq + t];
          const double expected =
              dtype == DType::f32
                  ? double(wte.ptr<float>()[token * kChannels + c] + wpe.ptr<float>()[t * kChannels + c])
                  : wte.ptr<double>()[token * kChannels + c] + wpe.ptr<double>()[t * kChannels + c];
          EXPECT_EQ(get_element(out.tensor(), (b * kSeq + t) * kChannels + c), expected);
        }
  }
}

TEST(Embedding, BackwardMatchesCentralDifferences) {
  ReferenceBackend backend;
  HostBuffer tokens = sample_tokens();
  HostBuffer wte = random_buffer({kVocab, kChannels}, DType::f64, Layout::nchw, 3);
  HostBuffer wpe = random_buffer({kPositions, kChannels}, DType::f64, Layout::nchw, 4);
  HostBuffer out = zeros({kBatch, kSeq, kChannels}, DType::f64);
  HostBuffer r = random_buffer({kBatch, kSeq, kChannels}, DType::f64, Layout::nchw, 5);
  HostBuffer dwte = filled({kVocab, kChannels}, DType::f64, 7.0);  // overwrite must clear this
  HostBuffer dwpe = filled({kPositions, kChannels}, DType::f64, 7.0);
  backend.embedding_backward(tokens.tensor(), r.tensor(), dwte.tensor(), dwpe.tensor(),
                             Accumulate::overwrite);
  auto loss = [&] {
    backend.embedding_forward(tokens.tensor(), wte.tensor(), wpe.tensor(), out.tensor());
    return weighted_sum(out.tensor(), r.tensor());
  };
  EXPECT_TRUE(gradient_matches(loss, wte.tensor(), dwte.tensor(), kGradientTolerance)) << "dwte";
  EXPECT_TRUE(gradient_matches(loss, wpe.tensor(), dwpe.tensor(), kGradientTolerance)) << "dwpe";
}

// Every position holds token 2 and dout is all ones: dwte[2] = B * T per feature, dwpe[t] = B, all else 0;
// Accumulate::add adds exactly that onto what was there.
TEST(Embedding, RepeatedTokensSumAndAccumulateAdds) {
  ReferenceBackend backend;
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    HostBuffer tokens = tokens_of({kBatch, kSeq}, std::vector<int32_t>(kBatch * kSeq, 2));
    HostBuffer dout = filled({kBatch, kSeq, kChannels}, dtype, 1.0);
    for (Accumulate accumulate : {Accumulate::overwrite, Accumulate::add}) {
      const double before = 0.5;
      HostBuffer dwte = filled({kVocab, kChannels}, dtype, before);
      HostBuffer dwpe = filled({kPositions, kChannels}, dtype, before);
      backend.embedding_backward(tokens.tensor(), dout.tensor(), dwte.tensor(), dwpe.tensor(), accumulate);
      const double base = accumulate == Accumulate::add ? before : 0.0;
      for (int64_t v = 0; v < kVocab; ++v)
        for (int64_t c = 0; c < kChannels; ++c)
          EXPECT_EQ(get_element(dwte.tensor(), v * kChannels + c), base + (v == 2 ? kBatch * kSeq : 0));
      for (int64_t t = 0; t < kPositions; ++t)
        for (int64_t c = 0; c < kChannels; ++c)
          EXPECT_EQ(get_element(dwpe.tensor(), t * kChannels + c), base + (t < kSeq ? kBatch : 0));
    }
  }
}

TEST(Embedding, F32MatchesF64) {
  ReferenceBackend backend;
  HostBuffer tokens = sample_tokens();
  HostBuffer dout64 = f32_exact_buffer({kBatch, kSeq, kChannels}, DType::f64, 6);
  HostBuffer dout32 = as_dtype(dout64.tensor(), DType::f32);
  HostBuffer dwte64 = zeros({kVocab, kChannels}, DType::f64),
             dwpe64 = zeros({kPositions, kChannels}, DType::f64);
  HostBuffer dwte32 = zeros({kVocab, kChannels}, DType::f32),
             dwpe32 = zeros({kPositions, kChannels}, DType::f32);
  backend.embedding_backward(tokens.tensor(), dout64.tensor(), dwte64.tensor(), dwpe64.tensor(),
                             Accumulate::overwrite);
  backend.embedding_backward(tokens.tensor(), dout32.tensor(), dwte32.tensor(), dwpe32.tensor(),
                             Accumulate::overwrite);
  EXPECT_LT(relative_error(dwte32.tensor(), dwte64.tensor()), kF32VsF64Tolerance);
  EXPECT_LT(relative_error(dwpe32.tensor(), dwpe64.tensor()), kF32VsF64Tolerance);
}

TEST(Embedding, TokenOutsideTheVocabularyThrows) {
  ReferenceBackend backend;
  HostBuffer tokens = tokens_of({1, 2}, {1, kVocab});
  HostBuffer wte = zeros({kVocab, kChannels}, DType::f32), wpe = zeros({kPositions, kChannels}, DType::f32);
  HostBuffer out = zeros({1, 2, kChannels}, DType::f32);
  try {
    backend.embedding_forward(tokens.tensor(), wte.tensor(), wpe.tensor(), out.tensor());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 11 at position 1 is outside [0, 11)"), std::string::npos)
        << e.what();
  }
  HostBuffer long_tokens = tokens_of({1, kPositions + 1}, std::vector<int32_t>(kPositions + 1, 0));
  HostBuffer long_out = zeros({1, kPositions + 1, kChannels}, DType::f32);
  EXPECT_THROW(backend.embedding_forward(long_tokens.tensor(), wte.tensor(), wpe.tensor(), long_out.tensor()),
               Error);  // more positions than wpe has rows
}

}  // namespace
}  // namespace dlbench
