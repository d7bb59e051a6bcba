// The transformer ops of the onednn backend against the reference backend (the oracle), forward and
// backward, on random inputs of GPT-like shapes: T below, at and past the attention's 64-query blocks and
// not a multiple of them, head sizes from 8 to 64, C not a multiple of a vector.
//
// Tolerances (max |a - b| / max |reference|, tests/test_util.h), 4-10x the largest error observed here:
//   embedding forward exact (one f32 add), backward 1e-6 (sums in another order; seen 2e-7)
//   layer norm y 1e-5 (seen 1.7e-6, |mean| >> std), dx 1e-5 (9e-7), dweight 3e-5 (2.8e-6)
//   gelu y 1e-6 (8e-8), dx 1e-5 (6e-7): oneDNN's JIT tanh
//   attention out 1e-5 (1.1e-6, peaked softmax), stats 3e-6 (2.6e-7), dqkv 1e-5 (1.1e-6)
//   padded cross-entropy 1e-6 (1e-7); sum of squares 1e-6 (0); AdamW 3e-6 after three steps (2.2e-7)
// A wrong mask, a missing scale, an unnormalised softmax or a dropped accumulation misses them by orders.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "test_util.h"

namespace dlbench {
namespace {

using testing::fill_uniform;
using testing::relative_error;

HostBuffer random_buffer(std::vector<int64_t> dims, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  HostBuffer b(std::move(dims), DType::f32);
  fill_uniform(b.tensor(), seed, lo, hi);
  return b;
}

HostBuffer copy_of(const HostBuffer& src) {
  HostBuffer b(src.tensor().dims(), src.tensor().dtype());
  std::memcpy(b.tensor().data(), src.tensor().data(), src.tensor().bytes());
  return b;
}

HostBuffer filled(std::vector<int64_t> dims, float value) {
  HostBuffer b(std::move(dims), DType::f32);
  for (int64_t i = 0; i < b.numel(); ++i) b.ptr<float>()[i] = value;
  return b;
}

struct GptShape {
  int64_t B, T, C, heads;
};

// T = 67 and 130: a partial last block of queries; T = 64: exactly one; T = 1: a single position.
const GptShape kShapes[] = {
    {2, 67, 96, 3},   // d = 32
    {1, 130, 64, 4},  // d = 16, three blocks
    {2, 64, 128, 2},  // d = 64
    {3, 1, 16, 2},    // d = 8
    {1, 200, 48, 6},  // d = 8, four blocks
};

std::string shape_name(const GptShape& s) {
  return fmt::format("B{} T{} C{} heads{}", s.B, s.T, s.C, s.heads);
}

class TransformerOpsOnOneDnn : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> onednn = make_onednn_backend(0);
  std::unique_ptr<Backend> ref = make_reference_backend();
};

// ---- embedding ----

HostBuffer tokens_with_repeats(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  HostBuffer tokens({B, T}, DType::i32);
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < B * T; ++i) tokens.ptr<int32_t>()[i] = static_cast<int32_t>(rng() % V);
  // One token at the start, the middle and the end (of different sequences where B > 1), so that its
  // row of dwte sums three positions' gradients.
  for (int64_t i : {int64_t{0}, B * T / 2, B * T - 1}) tokens.ptr<int32_t>()[i] = 3;
  return tokens;
}

void check_embedding(Backend& onednn, Backend& ref, const GptShape& s, int64_t V) {
  SCOPED_TRACE(shape_name(s));
  const int64_t positions = s.T + 3;  // rows past T receive no gradient
  HostBuffer tokens = tokens_with_repeats(s.B, s.T, V, 5);
  HostBuffer wte = random_buffer({V, s.C}, 6), wpe = random_buffer({positions, s.C}, 7);
  HostBuffer out({s.B, s.T, s.C}, DType::f32), out_ref({s.B, s.T, s.C}, DType::f32);
  onednn.embedding_forward(tokens.tensor(), wte.tensor(), wpe.tensor(), out.tensor());
  ref.embedding_forward(tokens.tensor(), wte.tensor(), wpe.tensor(), out_ref.tensor());
  EXPECT_EQ(relative_error(out.tensor(), out_ref.tensor()), 0.0);

  HostBuffer dout = random_buffer({s.B, s.T, s.C}, 8);
  for (Accumulate acc : {Accumulate::overwrite, Accumulate::add}) {
    SCOPED_TRACE(acc == Accumulate::add ? "add" : "overwrite");
    // Overwrite must clear what was there (7 everywhere); add must keep it.
    HostBuffer dwte = acc == Accumulate::add ? random_buffer({V, s.C}, 9) : filled({V, s.C}, 7.f);
    HostBuffer dwpe =
        acc == Accumulate::add ? random_buffer({positions, s.C}, 10) : filled({positions, s.C}, 7.f);
    HostBuffer dwte_ref = copy_of(dwte), dwpe_ref = copy_of(dwpe);
    onednn.embedding_backward(tokens.tensor(), dout.tensor(), dwte.tensor(), dwpe.tensor(), acc);
    ref.embedding_backward(tokens.tensor(), dout.tensor(), dwte_ref.tensor(), dwpe_ref.tensor(), acc);
    EXPECT_LT(relative_error(dwte.tensor(), dwte_ref.tensor()), 1e-6);
    EXPECT_LT(relative_error(dwpe.tensor(), dwpe_ref.tensor()), 1e-6);
  }
}

TEST_F(TransformerOpsOnOneDnn, EmbeddingMatchesReference) {
  for (const GptShape& s : kShapes) check_embedding(*onednn, *ref, s, 50);
}

TEST_F(TransformerOpsOnOneDnn, EmbeddingRejectsATokenOutsideTheVocabulary) {
  HostBuffer tokens({1, 2}, DType::i32);
  tokens.ptr<int32_t>()[0] = 1;
  tokens.ptr<int32_t>()[1] = 5;
  HostBuffer wte = random_buffer({5, 4}, 1), wpe = random_buffer({2, 4}, 2), out({1, 2, 4}, DType::f32);
  EXPECT_THROW(onednn->embedding_forward(tokens.tensor(), wte.tensor(), wpe.tensor(), out.tensor()), Error);
}

// ---- layer norm ----

void check_layernorm(Backend& onednn, Backend& ref, int64_t N, int64_t C, double offset) {
  SCOPED_TRACE(fmt::format("N{} C{} offset {}", N, C, offset));
  const float eps = 1e-5f;
  HostBuffer x = random_buffer({N, C}, 21, offset - 1.0, offset + 1.0);
  HostBuffer weight = random_buffer({C}, 22, 0.5, 1.5), bias = random_buffer({C}, 23);
  HostBuffer y({N, C}, DType::f32), y_ref({N, C}, DType::f32);
  HostBuffer mean({N}, DType::f32), mean_ref({N}, DType::f32), rstd({N}, DType::f32),
      rstd_ref({N}, DType::f32);
  onednn.layernorm_forward(x.tensor(), weight.tensor(), bias.tensor(), eps, y.tensor(), mean.tensor(),
                           rstd.tensor());
  ref.layernorm_forward(x.tensor(), weight.tensor(), bias.tensor(), eps, y_ref.tensor(), mean_ref.tensor(),
                        rstd_ref.tensor());
  EXPECT_LT(relative_error(y.tensor(), y_ref.tensor()), 1e-5);
  EXPECT_LT(relative_error(mean.tensor(), mean_ref.tensor()), 1e-6);
  EXPECT_LT(relative_error(rstd.tensor(), rstd_ref.tensor()), 1e-5);

  HostBuffer dy = random_buffer({N, C}, 24);
  for (Accumulate acc : {Accumulate::overwrite, Accumulate::add}) {
    SCOPED_TRACE(acc == Accumulate::add ? "add" : "overwrite");
    HostBuffer dx = filled({N, C}, 7.f), dx_ref = filled({N, C}, 7.f);
    HostBuffer dweight = random_buffer({C}, 25), dbias = random_buffer({C}, 26);
    HostBuffer dweight_ref = copy_of(dweight), dbias_ref = copy_of(dbias);
    onednn.layernorm_backward(x.tensor(), weight.tensor(), mean.tensor(), rstd.tensor(), dy.tensor(),
                              dx.tensor(), dweight.tensor(), dbias.tensor(), acc, Accumulate::overwrite);
    ref.layernorm_backward(x.tensor(), weight.tensor(), mean_ref.tensor(), rstd_ref.tensor(), dy.tensor(),
                           dx_ref.tensor(), dweight_ref.tensor(), dbias_ref.tensor(), acc,
                           Accumulate::overwrite);
    EXPECT_LT(relative_error(dx.tensor(), dx_ref.tensor()), 1e-5);
    EXPECT_LT(relative_error(dweight.tensor(), dweight_ref.tensor()), 3e-5);
    EXPECT_LT(relative_error(dbias.tensor(), dbias_ref.tensor()), 1e-5);
  }
}

TEST_F(TransformerOpsOnOneDnn, LayerNormMatchesReference) {
  for (const GptShape& s : kShapes) check_layernorm(*onednn, *ref, s.B * s.T, s.C, 0.0);
  check_layernorm(*onednn, *ref, 5, 37, 0.0);    // C not a multiple of any vector width
  check_layernorm(*onednn, *ref, 9, 768, 0.0);   // GPT-2 small's width
  check_layernorm(*onednn, *ref, 33, 64, 20.0);  // |mean| >> std: no cancellation in the variance
}

TEST_F(TransformerOpsOnOneDnn, LayerNormOfARankThreeTensor) {
  // [B, T, C] rows, as the model hands them over.
  const int64_t B = 2, T = 3, C = 40;
  HostBuffer x = random_buffer({B, T, C}, 31), weight = random_buffer({C}, 32), bias = random_buffer({C}, 33);
  HostBuffer y({B, T, C}, DType::f32), y_ref({B, T, C}, DType::f32);
  HostBuffer mean({B * T}, DType::f32), rstd({B * T}, DType::f32), mean_ref({B * T}, DType::f32),
      rstd_ref({B * T}, DType::f32);
  onednn->layernorm_forward(x.tensor(), weight.tensor(), bias.tensor(), 1e-5f, y.tensor(), mean.tensor(),
                            rstd.tensor());
  ref->layernorm_forward(x.tensor(), weight.tensor(), bias.tensor(), 1e-5f, y_ref.tensor(), mean_ref.tensor(),
                         rstd_ref.tensor());
  EXPECT_LT(relative_error(y.tensor(), y_ref.tensor()), 1e-5);
}

// ---- gelu ----

TEST_F(TransformerOpsOnOneDnn, GeluMatchesReference) {
  for (int64_t n : {int64_t{7}, int64_t{4099}, int64_t{70001}}) {
    SCOPED_TRACE(fmt::format("{} elements", n));
    HostBuffer x = random_buffer({n}, 41, -6.0, 6.0), dy = random_buffer({n}, 42);
    HostBuffer y({n}, DType::f32), y_ref({n}, DType::f32), dx({n}, DType::f32), dx_ref({n}, DType::f32);
    onednn->gelu_forward(x.tensor(), y.tensor());
    ref->gelu_forward(x.tensor(), y_ref.tensor());
    EXPECT_LT(relative_error(y.tensor(), y_ref.tensor()), 1e-6);
    onednn->gelu_backward(x.tensor(), dy.tensor(), dx.tensor());
    ref->gelu_backward(x.tensor(), dy.tensor(), dx_ref.tensor());
    EXPECT_LT(relative_error(dx.tensor(), dx_ref.tensor()), 1e-5);
  }
}

// ---- attention ----

void check_attention(Backend& onednn, Backend& ref, const GptShape& s, double spread) {
  SCOPED_TRACE(fmt::format("{}, qkv in [-{}, {}]", shape_name(s), spread, spread));
  HostBuffer qkv = random_buffer({s.B, s.T, 3 * s.C}, 51, -spread, spread);
  HostBuffer out({s.B, s.T, s.C}, DType::f32), out_ref({s.B, s.T, s.C}, DType::f32);
  HostBuffer stats({s.B, s.heads, s.T}, DType::f32), stats_ref({s.B, s.heads, s.T}, DType::f32);
  onednn.attention_forward(qkv.tensor(), s.heads, out.tensor(), stats.tensor());
  ref.attention_forward(qkv.tensor(), s.heads, out_ref.tensor(), stats_ref.tensor());
  EXPECT_LT(relative_error(out.tensor(), out_ref.tensor()), 1e-5);
  EXPECT_LT(relative_error(stats.tensor(), stats_ref.tensor()), 3e-6);

  HostBuffer dout = random_buffer({s.B, s.T, s.C}, 52);
  HostBuffer dqkv = filled({s.B, s.T, 3 * s.C}, 7.f), dqkv_ref({s.B, s.T, 3 * s.C}, DType::f32);
  onednn.attention_backward(qkv.tensor(), out.tensor(), stats.tensor(), dout.tensor(), s.heads,
                            dqkv.tensor());
  ref.attention_backward(qkv.tensor(), out_ref.tensor(), stats_ref.tensor(), dout.tensor(), s.heads,
                         dqkv_ref.tensor());
  EXPECT_LT(relative_error(dqkv.tensor(), dqkv_ref.tensor()), 1e-5);
}

TEST_F(TransformerOpsOnOneDnn, AttentionMatchesReference) {
  for (const GptShape& s : kShapes) check_attention(*onednn, *ref, s, 1.0);
}

TEST_F(TransformerOpsOnOneDnn, AttentionWithPeakedSoftmax) {
  // Scores of several units: rows whose softmax is nearly one-hot, where exp(s - lse) must not overflow.
  check_attention(*onednn, *ref, {2, 67, 96, 3}, 4.0);
}

TEST(TransformerOpsThreads, AgreeWithReferenceAtOneAndThreeThreads) {
  // Three threads over 2 x 3 head pairs and their blocks: an uneven split, each thread with its own
  // block of scores; the embedding's 96 columns are six blocks of 16.
  std::unique_ptr<Backend> ref = make_reference_backend();
  for (int threads : {1, 3}) {
    SCOPED_TRACE(fmt::format("{} threads", threads));
    std::unique_ptr<Backend> onednn = make_onednn_backend(threads);
    check_attention(*onednn, *ref, {2, 130, 96, 3}, 1.0);
    check_embedding(*onednn, *ref, {2, 67, 96, 3}, 20);
  }
}

// ---- padded cross-entropy ----

TEST_F(TransformerOpsOnOneDnn, PaddedCrossEntropyMatchesReference) {
  const int64_t N = 13, K = 24;
  for (int64_t V : {int64_t{19}, K}) {
    // The padded columns hold logits far above the real ones: counted, they would take all the mass.
    HostBuffer logits = random_buffer({N, K}, 61, -4.0, 4.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = V; j < K; ++j) logits.ptr<float>()[n * K + j] = 50.f;
    HostBuffer labels({N}, DType::i32);
    for (int64_t n = 0; n < N; ++n) labels.ptr<int32_t>()[n] = static_cast<int32_t>((n * 5) % V);
    for (float smoothing : {0.f, 0.1f}) {
      SCOPED_TRACE(fmt::format("V {} of K {}, smoothing {}", V, K, smoothing));
      HostBuffer probs({N, K}, DType::f32), probs_ref({N, K}, DType::f32);
      HostBuffer loss({1}, DType::f32), loss_ref({1}, DType::f32);
      onednn->softmax_cross_entropy_padded_forward(logits.tensor(), labels.tensor(), V, smoothing,
                                                   probs.tensor(), loss.tensor());
      ref->softmax_cross_entropy_padded_forward(logits.tensor(), labels.tensor(), V, smoothing,
                                                probs_ref.tensor(), loss_ref.tensor());
      EXPECT_LT(relative_error(probs.tensor(), probs_ref.tensor()), 1e-6);
      EXPECT_LT(relative_error(loss.tensor(), loss_ref.tensor()), 1e-6);
      const float loss_scale = 8.f;
      HostBuffer d = filled({N, K}, 7.f), d_ref({N, K}, DType::f32);
      onednn->softmax_cross_entropy_padded_backward(probs.tensor(), labels.tensor(), V, smoothing, 0.5f,
                                                    d.tensor(), &loss_scale);
      ref->softmax_cross_entropy_padded_backward(probs_ref.tensor(), labels.tensor(), V, smoothing, 0.5f,
                                                 d_ref.tensor(), &loss_scale);
      EXPECT_LT(relative_error(d.tensor(), d_ref.tensor()), 1e-6);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t j = V; j < K; ++j) {
          ASSERT_EQ(probs.ptr<float>()[n * K + j], 0.f);
          ASSERT_EQ(d.ptr<float>()[n * K + j], 0.f);
        }
    }
  }
}

// The fused loss: its loss and the gradient it writes over the logits match the reference's fused op.
TEST_F(TransformerOpsOnOneDnn, FusedCrossEntropyMatchesReference) {
  const int64_t N = 13, K = 24, V = 19;
  HostBuffer labels({N}, DType::i32);
  for (int64_t n = 0; n < N; ++n) labels.ptr<int32_t>()[n] = static_cast<int32_t>((n * 5) % V);
  for (float smoothing : {0.f, 0.1f}) {
    SCOPED_TRACE(fmt::format("smoothing {}", smoothing));
    HostBuffer logits = random_buffer({N, K}, 63, -4.0, 4.0),
               logits_ref = random_buffer({N, K}, 63, -4.0, 4.0);
    HostBuffer rows({N}, DType::f32), rows_ref({N}, DType::f32), loss({1}, DType::f32),
        loss_ref({1}, DType::f32);
    const float loss_scale = 8.f;
    onednn->softmax_cross_entropy_fused(logits.tensor(), labels.tensor(), V, smoothing, rows.tensor(),
                                        loss.tensor(), 0.5f, &loss_scale);
    ref->softmax_cross_entropy_fused(logits_ref.tensor(), labels.tensor(), V, smoothing, rows_ref.tensor(),
                                     loss_ref.tensor(), 0.5f, &loss_scale);
    EXPECT_LT(relative_error(loss.tensor(), loss_ref.tensor()), 1e-6);
    EXPECT_LT(relative_error(rows.tensor(), rows_ref.tensor()), 1e-6);
    EXPECT_LT(relative_error(logits.tensor(), logits_ref.tensor()), 1e-5);  // the gradients
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = V; j < K; ++j) ASSERT_EQ(logits.ptr<float>()[n * K + j], 0.f);
  }
}

TEST_F(TransformerOpsOnOneDnn, PaddedCrossEntropyRejectsALabelInThePadding) {
  HostBuffer logits = random_buffer({2, 8}, 62), labels({2}, DType::i32), probs({2, 8}, DType::f32),
             loss({1}, DType::f32);
  labels.ptr<int32_t>()[0] = 1;
  labels.ptr<int32_t>()[1] = 6;  // a real class of K = 8, but padding where V = 5
  EXPECT_NO_THROW(onednn->softmax_cross_entropy_padded_forward(logits.tensor(), labels.tensor(), 8, 0.f,
                                                               probs.tensor(), loss.tensor()));
  EXPECT_THROW(onednn->softmax_cross_entropy_padded_forward(logits.tensor(), labels.tensor(), 5, 0.f,
                                                            probs.tensor(), loss.tensor()),
               Error);
}

// ---- sum of squares and AdamW ----

TEST_F(TransformerOpsOnOneDnn, SumOfSquaresMatchesReference) {
  HostBuffer x = random_buffer({100003}, 71), y = random_buffer({77}, 72);
  HostBuffer out({1}, DType::f32), out_ref({1}, DType::f32);
  onednn->sum_of_squares(x.tensor(), out.tensor(), Accumulate::overwrite);
  onednn->sum_of_squares(y.tensor(), out.tensor(), Accumulate::add);
  ref->sum_of_squares(x.tensor(), out_ref.tensor(), Accumulate::overwrite);
  ref->sum_of_squares(y.tensor(), out_ref.tensor(), Accumulate::add);
  EXPECT_LT(relative_error(out.tensor(), out_ref.tensor()), 1e-6);
}

void check_adamw(Backend& onednn, Backend& ref, float max_grad_norm, StepScalars* scalars) {
  const int64_t count = 40000;
  // Matrices decay, the vector in the middle does not, the last 1000 are in no segment (never updated).
  const ParamSegment segments[] = {{0, 25000, true}, {25000, 4000, false}, {29000, 10000, true}};
  HostBuffer p = random_buffer({count}, 81), g = random_buffer({count}, 82, -3.0, 3.0),
             m = random_buffer({count}, 83, -0.1, 0.1), v = random_buffer({count}, 84, 0.0, 0.1);
  HostBuffer p_ref = copy_of(p), m_ref = copy_of(m), v_ref = copy_of(v);
  HostBuffer norm({1}, DType::f32);
  ref.sum_of_squares(g.tensor(), norm.tensor(), Accumulate::overwrite);
  AdamWStep step;
  step.lr = 1e-2f, step.grad_scale = 0.5f, step.max_grad_norm = max_grad_norm;
  step.grad_norm_squared = norm.ptr<float>();
  StepScalars ref_scalars = scalars ? *scalars : StepScalars{};
  for (int64_t t = 1; t <= 3; ++t) {
    step.step = t;
    onednn.adamw_update(p.tensor(), g.tensor(), m.tensor(), v.tensor(), segments, step, scalars);
    ref.adamw_update(p_ref.tensor(), g.tensor(), m_ref.tensor(), v_ref.tensor(), segments, step,
                     scalars ? &ref_scalars : nullptr);
  }
  EXPECT_LT(relative_error(p.tensor(), p_ref.tensor()), 3e-6);
  EXPECT_LT(relative_error(m.tensor(), m_ref.tensor()), 3e-6);
  EXPECT_LT(relative_error(v.tensor(), v_ref.tensor()), 3e-6);
}

TEST_F(TransformerOpsOnOneDnn, AdamWMatchesReference) {
  {
    SCOPED_TRACE("no clipping");
    check_adamw(*onednn, *ref, 0.f, nullptr);
  }
  {
    SCOPED_TRACE("clipped to norm 1");  // the true gradients' norm is ~170: the clip bites
    check_adamw(*onednn, *ref, 1.f, nullptr);
  }
  {
    SCOPED_TRACE("scalars: lr and a loss scale of 1024 from backend memory");
    StepScalars scalars;
    scalars.lr = 3e-3f;
    scalars.loss_scale = 1024.f;
    check_adamw(*onednn, *ref, 1.f, &scalars);
  }
}

// A count in memory (what a recorded step reads) gives the same update as the host's step, advances with
// every update applied and stays where it was when a step overflows.
TEST_F(TransformerOpsOnOneDnn, AdamWStepCountInMemoryMatchesHostStep) {
  const ParamSegment segments[] = {{0, 500, true}, {500, 100, false}};
  HostBuffer p = random_buffer({600}, 95), g = random_buffer({600}, 96), m = random_buffer({600}, 97),
             v = random_buffer({600}, 98, 0.0, 1.0);
  HostBuffer p_host = copy_of(p), m_host = copy_of(m), v_host = copy_of(v);
  AdamWStep counted;
  counted.lr = 1e-2f;
  int32_t count = 3;
  counted.step_count = &count;
  AdamWStep host = counted;
  host.step_count = nullptr;
  host.step = 4;
  onednn->adamw_update(p.tensor(), g.tensor(), m.tensor(), v.tensor(), segments, counted, nullptr);
  onednn->adamw_update(p_host.tensor(), g.tensor(), m_host.tensor(), v_host.tensor(), segments, host,
                       nullptr);
  EXPECT_EQ(count, 4);
  EXPECT_EQ(relative_error(p.tensor(), p_host.tensor()), 0.0);
  EXPECT_EQ(relative_error(v.tensor(), v_host.tensor()), 0.0);
  StepScalars overflowed;
  overflowed.overflow = 1;
  onednn->adamw_update(p.tensor(), g.tensor(), m.tensor(), v.tensor(), segments, counted, &overflowed);
  EXPECT_EQ(count, 4) << "an overflowed step advanced the count";
}

TEST_F(TransformerOpsOnOneDnn, AdamWSkipsAnOverflowedStep) {
  HostBuffer p = random_buffer({100}, 91), g = random_buffer({100}, 92), m = random_buffer({100}, 93),
             v = random_buffer({100}, 94, 0.0, 1.0);
  HostBuffer p0 = copy_of(p), m0 = copy_of(m), v0 = copy_of(v);
  const ParamSegment segments[] = {{0, 100, true}};
  StepScalars scalars;
  scalars.lr = 0.1f;
  scalars.overflow = 1;
  onednn->adamw_update(p.tensor(), g.tensor(), m.tensor(), v.tensor(), segments, AdamWStep{}, &scalars);
  EXPECT_EQ(relative_error(p.tensor(), p0.tensor()), 0.0);
  EXPECT_EQ(relative_error(m.tensor(), m0.tensor()), 0.0);
  EXPECT_EQ(relative_error(v.tensor(), v0.tensor()), 0.0);
}

// ---- dtypes ----

TEST_F(TransformerOpsOnOneDnn, OtherDtypesAreAUserErrorNamingF32) {
  HostBuffer x({2, 8}, DType::bf16), y({2, 8}, DType::bf16);
  try {
    onednn->gelu_forward(x.tensor(), y.tensor());
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("f32 only"), std::string::npos) << e.what();
  }
  HostBuffer qkv({1, 2, 24}, DType::f16), out({1, 2, 8}, DType::f16), stats({1, 2, 2}, DType::f32);
  EXPECT_THROW(onednn->attention_forward(qkv.tensor(), 2, out.tensor(), stats.tensor()), UserError);
  HostBuffer w({8}, DType::bf16), mean({2}, DType::f32), rstd({2}, DType::f32);
  EXPECT_THROW(onednn->layernorm_forward(x.tensor(), w.tensor(), w.tensor(), 1e-5f, y.tensor(), mean.tensor(),
                                         rstd.tensor()),
               UserError);
}

}  // namespace
}  // namespace dlbench
