// The CUDA backend's transformer ops (GPT-2) against the reference backend, forward and backward, in f32,
// f16 and bf16 on GPT-like shapes: embedding (repeated tokens, accumulate and overwrite), layer norm, GELU,
// causal attention (cuDNN's fused attention in f16/bf16, the own kernels where cuDNN refuses, GEMMs in f32,
// on TF32 tensor cores where allowed), the padded softmax cross-entropy (50,304 columns, 50,257 valid), the
// gradient norm and AdamW with its step count, scales and clipping read from device memory, both updates
// with the FP16/BF16 copies folded in. Also: the deterministic reductions give the same bits twice, attention
// forward + backward recorded in a CUDA graph replays the eager results, and bad arguments are refused with
// one line. Every failure names the op, the shape and the dtype.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cuda/cuda_backend.h"
#include "compute_copies_check.h"
#include "cuda_test_util.h"

namespace dlbench {
namespace {

using namespace cuda_testing;

class TransformerOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU: cuda_device_count() == 0";
  }
  std::unique_ptr<Backend> ref = make_reference_backend();
};

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

std::string dtype_label(const ::testing::TestParamInfo<DType>& info) { return dtype_name(info.param); }

// Host i32 data.
HostBuffer host_ints(std::vector<int64_t> dims, const std::vector<int32_t>& values) {
  HostBuffer b(std::move(dims), DType::i32);
  EXPECT_EQ(static_cast<size_t>(b.numel()), values.size());
  std::memcpy(b.tensor().data(), values.data(), values.size() * sizeof(int32_t));
  return b;
}

std::vector<int32_t> random_ints(int64_t n, int32_t below, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, below - 1);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// The same host data as the reference sees it (f32 for f16/bf16 data).
HostBuffer wide(Backend& ref, const HostBuffer& x) {
  return converted(ref, x, reference_dtype(x.tensor().dtype()));
}

// ---------------------------------------------------------------------------------------------------------
// Embedding

struct EmbeddingCase {
  int64_t B, T, C, V, positions;
  int32_t distinct_tokens;  // tokens drawn from [0, distinct): small values repeat tokens often
};

const EmbeddingCase kEmbeddingCases[] = {
    {2, 64, 64, 1000, 64, 1000},
    {4, 100, 96, 500, 128, 7},      // T not a multiple of 64, rows t >= T of wpe, many repeats
    {2, 256, 768, 2000, 1024, 50},  // GPT-2's width
    {2, 64, 64, 50304, 64, 50304},  // GPT-2's padded vocabulary
};

class EmbeddingTest : public TransformerOpsTest, public ::testing::WithParamInterface<DType> {};

TEST_P(EmbeddingTest, ForwardAndBackwardMatchReference) {
  const DType dtype = GetParam();
  Backend& gpu = shared_gpu();
  for (const EmbeddingCase& c : kEmbeddingCases) {
    const std::string where =
        fmt::format("B={} T={} C={} V={} Tmax={} {}", c.B, c.T, c.C, c.V, c.positions, dtype_name(dtype));
    SCOPED_TRACE(where);
    std::printf("  embedding %s\n", where.c_str());
    std::vector<int32_t> ids = random_ints(c.B * c.T, c.distinct_tokens, 11);
    ids[1] = ids[0];  // at least one repeated token in every case
    const HostBuffer tokens = host_ints({c.B, c.T}, ids);
    const HostBuffer wte = random_host(*ref, {c.V, c.C}, dtype, 12),
                     wpe = random_host(*ref, {c.positions, c.C}, dtype, 13);
    const HostBuffer dout = random_host(*ref, {c.B, c.T, c.C}, dtype, 14);
    DeviceTensor d_tokens(gpu, tokens), d_wte(gpu, wte), d_wpe(gpu, wpe), d_dout(gpu, dout);
    DeviceTensor d_out(gpu, {c.B, c.T, c.C}, dtype);

    HostBuffer ref_wte = wide(*ref, wte), ref_wpe = wide(*ref, wpe),
               ref_out({c.B, c.T, c.C}, reference_dtype(dtype));
    gpu.embedding_forward(d_tokens.tensor(), d_wte.tensor(), d_wpe.tensor(), d_out.tensor());
    ref->embedding_forward(tokens.tensor(), ref_wte.tensor(), ref_wpe.tensor(), ref_out.tensor());
    expect_close(("embedding_forward out " + where).c_str(), download_wide(*ref, d_out).tensor(),
                 ref_out.tensor(), tolerance(dtype));

    // Accumulate adds into what is there; overwrite must replace it (both start from the same values).
    for (Accumulate accumulate : {Accumulate::overwrite, Accumulate::add}) {
      const char* mode = accumulate == Accumulate::add ? "add" : "overwrite";
      const HostBuffer dwte0 = random_host(*ref, {c.V, c.C}, dtype, 15),
                       dwpe0 = random_host(*ref, {c.positions, c.C}, dtype, 16);
      DeviceTensor d_dwte(gpu, dwte0), d_dwpe(gpu, dwpe0);
      HostBuffer ref_dwte = wide(*ref, dwte0), ref_dwpe = wide(*ref, dwpe0), ref_dout = wide(*ref, dout);
      gpu.embedding_backward(d_tokens.tensor(), d_dout.tensor(), d_dwte.tensor(), d_dwpe.tensor(),
                             accumulate);
      ref->embedding_backward(tokens.tensor(), ref_dout.tensor(), ref_dwte.tensor(), ref_dwpe.tensor(),
                              accumulate);
      // A frequent token's row sums up to B * T / distinct values: the tolerance grows with the sum.
      const double factor = accumulate == Accumulate::add ? 2.0 : 1.0;
      expect_close(fmt::format("embedding_backward dwte ({}) {}", mode, where).c_str(),
                   download_wide(*ref, d_dwte).tensor(), ref_dwte.tensor(), tolerance(dtype, false, factor));
      expect_close(fmt::format("embedding_backward dwpe ({}) {}", mode, where).c_str(),
                   download_wide(*ref, d_dwpe).tensor(), ref_dwpe.tensor(), tolerance(dtype, false, factor));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EmbeddingTest, ::testing::ValuesIn(kDtypes), dtype_label);

// The scatter-add sums a token's rows in one fixed order: the same bits on every run.
TEST_F(TransformerOpsTest, EmbeddingBackwardIsDeterministic) {
  Backend& gpu = shared_gpu();
  const int64_t B = 4, T = 512, C = 128, V = 64;
  const HostBuffer tokens = host_ints({B, T}, random_ints(B * T, 3, 21));  // each token ~700 times
  DeviceTensor d_tokens(gpu, tokens), d_dout(gpu, random_host(*ref, {B, T, C}, DType::f32, 22));
  DeviceTensor d_dwte(gpu, {V, C}, DType::f32), d_dwpe(gpu, {T, C}, DType::f32);
  gpu.embedding_backward(d_tokens.tensor(), d_dout.tensor(), d_dwte.tensor(), d_dwpe.tensor(),
                         Accumulate::overwrite);
  const HostBuffer first = d_dwte.download();
  gpu.embedding_backward(d_tokens.tensor(), d_dout.tensor(), d_dwte.tensor(), d_dwpe.tensor(),
                         Accumulate::overwrite);
  EXPECT_TRUE(same_bits(first, d_dwte.download())) << "embedding_backward dwte B=4 T=512 C=128 V=64 f32";
}

// ---------------------------------------------------------------------------------------------------------
// Layer norm

struct LayerNormCase {
  int64_t B, T, C;
};

// The one-pass kernel's chunks of 128 channels: partial (64, 100), whole (768, 1280, 2048), 13 with a
// 14th idle (gpt2-xl's 1600); rows it does not take (30: not a multiple of 4; 2560: wider) take two kernels.
const LayerNormCase kLayerNormCases[] = {{2, 64, 64},   {4, 100, 768}, {2, 1024, 768},
                                         {3, 33, 100},  {2, 64, 1280}, {2, 64, 1600},
                                         {1, 40, 2048}, {2, 8, 30},    {2, 16, 2560}};

class LayerNormTest : public TransformerOpsTest, public ::testing::WithParamInterface<DType> {};

TEST_P(LayerNormTest, ForwardAndBackwardMatchReference) {
  const DType dtype = GetParam();
  Backend& gpu = shared_gpu();
  const float eps = 1e-5f;
  for (const LayerNormCase& c : kLayerNormCases) {
    const std::string where = fmt::format("B={} T={} C={} {}", c.B, c.T, c.C, dtype_name(dtype));
    SCOPED_TRACE(where);
    std::printf("  layernorm %s\n", where.c_str());
    const int64_t N = c.B * c.T;
    // An offset mean, as activations have: a variance formula that cancels would show.
    const HostBuffer x = random_host(*ref, {c.B, c.T, c.C}, dtype, 31, Layout::nchw, 2.0, 4.0);
    const HostBuffer weight = random_host(*ref, {c.C}, dtype, 32, Layout::nchw, 0.5, 1.5);
    const HostBuffer bias = random_host(*ref, {c.C}, dtype, 33);
    const HostBuffer dy = random_host(*ref, {c.B, c.T, c.C}, dtype, 34);
    DeviceTensor d_x(gpu, x), d_w(gpu, weight), d_b(gpu, bias), d_dy(gpu, dy);
    DeviceTensor d_y(gpu, {c.B, c.T, c.C}, dtype), d_mean(gpu, {N}, DType::f32), d_rstd(gpu, {N}, DType::f32);
    const HostBuffer rx = wide(*ref, x), rw = wide(*ref, weight), rb = wide(*ref, bias), rdy = wide(*ref, dy);
    HostBuffer ry({c.B, c.T, c.C}, DType::f32), rmean({N}, DType::f32), rrstd({N}, DType::f32);

    gpu.layernorm_forward(d_x.tensor(), d_w.tensor(), d_b.tensor(), eps, d_y.tensor(), d_mean.tensor(),
                          d_rstd.tensor());
    ref->layernorm_forward(rx.tensor(), rw.tensor(), rb.tensor(), eps, ry.tensor(), rmean.tensor(),
                           rrstd.tensor());
    expect_close(("layernorm_forward y " + where).c_str(), download_wide(*ref, d_y).tensor(), ry.tensor(),
                 tolerance(dtype));
    // The statistics are f32 from the same inputs in every dtype.
    expect_close(("layernorm_forward mean " + where).c_str(), d_mean.download().tensor(), rmean.tensor(),
                 1e-5);
    expect_close(("layernorm_forward rstd " + where).c_str(), d_rstd.download().tensor(), rrstd.tensor(),
                 1e-5);

    for (Accumulate accumulate : {Accumulate::overwrite, Accumulate::add}) {
      const char* mode = accumulate == Accumulate::add ? "add" : "overwrite";
      // dx too is added to (a residual stream's gradient) or overwritten.
      const HostBuffer dw0 = random_host(*ref, {c.C}, dtype, 35), db0 = random_host(*ref, {c.C}, dtype, 36),
                       dx0 = random_host(*ref, {c.B, c.T, c.C}, dtype, 37);
      DeviceTensor d_dx(gpu, dx0), d_dw(gpu, dw0), d_db(gpu, db0);
      HostBuffer rdx = wide(*ref, dx0), rdw = wide(*ref, dw0), rdb = wide(*ref, db0);
      gpu.layernorm_backward(d_x.tensor(), d_w.tensor(), d_mean.tensor(), d_rstd.tensor(), d_dy.tensor(),
                             d_dx.tensor(), d_dw.tensor(), d_db.tensor(), accumulate, accumulate);
      ref->layernorm_backward(rx.tensor(), rw.tensor(), rmean.tensor(), rrstd.tensor(), rdy.tensor(),
                              rdx.tensor(), rdw.tensor(), rdb.tensor(), accumulate, accumulate);
      expect_close(fmt::format("layernorm_backward dx ({}) {}", mode, where).c_str(),
                   download_wide(*ref, d_dx).tensor(), rdx.tensor(), tolerance(dtype, false, 2));
      // Sums over up to 2048 rows in f32.
      expect_close(fmt::format("layernorm_backward dweight ({}) {}", mode, where).c_str(),
                   download_wide(*ref, d_dw).tensor(), rdw.tensor(), tolerance(dtype, false, 4));
      expect_close(fmt::format("layernorm_backward dbias ({}) {}", mode, where).c_str(),
                   download_wide(*ref, d_db).tensor(), rdb.tensor(), tolerance(dtype, false, 4));
      // Summing dx as written, for the dense layer whose output x is: dx, dweight and dbias the same bits
      // as without, and the sums (added to, or overwritten) those of that dx.
      const HostBuffer sums0 = random_host(*ref, {c.C}, dtype, 38);
      DeviceTensor s_dx(gpu, dx0), s_dw(gpu, dw0), s_db(gpu, db0), s_sums(gpu, sums0);
      gpu.layernorm_backward_summing_dx(d_x.tensor(), d_w.tensor(), d_mean.tensor(), d_rstd.tensor(),
                                        d_dy.tensor(), s_dx.tensor(), s_dw.tensor(), s_db.tensor(),
                                        s_sums.tensor(), accumulate, accumulate);
      EXPECT_TRUE(same_bits(d_dx.download(), s_dx.download())) << "dx summing dx (" << mode << ")";
      EXPECT_TRUE(same_bits(d_dw.download(), s_dw.download())) << "dweight summing dx (" << mode << ")";
      EXPECT_TRUE(same_bits(d_db.download(), s_db.download())) << "dbias summing dx (" << mode << ")";
      HostBuffer written_dx = download_wide(*ref, s_dx), rsums = wide(*ref, sums0);
      ref->bias_backward(written_dx.tensor().reshaped({N, c.C}), rsums.tensor(), accumulate);
      expect_close(fmt::format("layernorm_backward_summing_dx sums ({}) {}", mode, where).c_str(),
                   download_wide(*ref, s_sums).tensor(), rsums.tensor(), tolerance(dtype, false, 4));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LayerNormTest, ::testing::ValuesIn(kDtypes), dtype_label);

TEST_F(TransformerOpsTest, LayerNormBackwardIsDeterministic) {
  Backend& gpu = shared_gpu();
  const int64_t N = 4096, C = 768;
  DeviceTensor x(gpu, random_host(*ref, {N, C}, DType::f32, 41)),
      w(gpu, random_host(*ref, {C}, DType::f32, 42));
  DeviceTensor b(gpu, random_host(*ref, {C}, DType::f32, 43)),
      dy(gpu, random_host(*ref, {N, C}, DType::f32, 44));
  DeviceTensor y(gpu, {N, C}, DType::f32), mean(gpu, {N}, DType::f32), rstd(gpu, {N}, DType::f32);
  DeviceTensor dx(gpu, {N, C}, DType::f32), dw(gpu, {C}, DType::f32), db(gpu, {C}, DType::f32);
  gpu.layernorm_forward(x.tensor(), w.tensor(), b.tensor(), 1e-5f, y.tensor(), mean.tensor(), rstd.tensor());
  gpu.layernorm_backward(x.tensor(), w.tensor(), mean.tensor(), rstd.tensor(), dy.tensor(), dx.tensor(),
                         dw.tensor(), db.tensor(), Accumulate::overwrite, Accumulate::overwrite);
  const HostBuffer first_dw = dw.download(), first_db = db.download();
  gpu.layernorm_backward(x.tensor(), w.tensor(), mean.tensor(), rstd.tensor(), dy.tensor(), dx.tensor(),
                         dw.tensor(), db.tensor(), Accumulate::overwrite, Accumulate::overwrite);
  EXPECT_TRUE(same_bits(first_dw, dw.download())) << "layernorm_backward dweight N=4096 C=768 f32";
  EXPECT_TRUE(same_bits(first_db, db.download())) << "layernorm_backward dbias N=4096 C=768 f32";
}

// ---------------------------------------------------------------------------------------------------------
// GELU

class GeluTest : public TransformerOpsTest, public ::testing::WithParamInterface<DType> {};

TEST_P(GeluTest, ForwardAndBackwardMatchReference) {
  const DType dtype = GetParam();
  Backend& gpu = shared_gpu();
  for (const std::vector<int64_t>& dims :
       {std::vector<int64_t>{2, 64, 3072}, std::vector<int64_t>{3, 37, 11}}) {
    const std::string where = fmt::format("[{}] {}", fmt::join(dims, ", "), dtype_name(dtype));
    SCOPED_TRACE(where);
    const HostBuffer x = random_host(*ref, dims, dtype, 51, Layout::nchw, -5.0, 5.0),
                     dy = random_host(*ref, dims, dtype, 52);
    DeviceTensor d_x(gpu, x), d_dy(gpu, dy), d_y(gpu, dims, dtype), d_dx(gpu, dims, dtype);
    const HostBuffer rx = wide(*ref, x), rdy = wide(*ref, dy);
    HostBuffer ry(dims, DType::f32), rdx(dims, DType::f32);
    gpu.gelu_forward(d_x.tensor(), d_y.tensor());
    gpu.gelu_backward(d_x.tensor(), d_dy.tensor(), d_dx.tensor());
    ref->gelu_forward(rx.tensor(), ry.tensor());
    ref->gelu_backward(rx.tensor(), rdy.tensor(), rdx.tensor());
    expect_close(("gelu_forward y " + where).c_str(), download_wide(*ref, d_y).tensor(), ry.tensor(),
                 tolerance(dtype));
    expect_close(("gelu_backward dx " + where).c_str(), download_wide(*ref, d_dx).tensor(), rdx.tensor(),
                 tolerance(dtype));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GeluTest, ::testing::ValuesIn(kDtypes), dtype_label);

// ---------------------------------------------------------------------------------------------------------
// Attention

struct AttentionCase {
  int64_t B, T, C, heads;
};

const AttentionCase kAttentionCases[] = {
    {2, 64, 128, 2},    // d = 64
    {2, 200, 256, 4},   // T not a multiple of 64
    {4, 128, 768, 12},  // GPT-2 small's heads
    {2, 1024, 128, 2},  // GPT-2's context
    {2, 77, 96, 3},     // d = 32: cuDNN or the own kernels, whichever takes it
};

class AttentionTest : public TransformerOpsTest, public ::testing::WithParamInterface<DType> {};

TEST_P(AttentionTest, ForwardAndBackwardMatchReference) {
  const DType dtype = GetParam();
  Backend& gpu = shared_gpu();
  for (const AttentionCase& c : kAttentionCases) {
    const std::string where =
        fmt::format("B={} T={} C={} heads={} {}", c.B, c.T, c.C, c.heads, dtype_name(dtype));
    SCOPED_TRACE(where);
    const std::string how = describe_cuda_attention(gpu, dtype, c.B, c.T, c.C, c.heads);
    std::printf("  attention %s: %s\n", where.c_str(), how.c_str());
    // f16/bf16 with d = 64 is what cuDNN's fused attention is for: a silent fall-back would be a bug.
    if (dtype != DType::f32 && c.C / c.heads == 64) {
      EXPECT_EQ(how.find("own kernels"), std::string::npos) << "attention " << where << " ran " << how;
    }
    const HostBuffer qkv = random_host(*ref, {c.B, c.T, 3 * c.C}, dtype, 61, Layout::nchw, -2.0, 2.0);
    const HostBuffer dout = random_host(*ref, {c.B, c.T, c.C}, dtype, 62);
    DeviceTensor d_qkv(gpu, qkv), d_dout(gpu, dout), d_out(gpu, {c.B, c.T, c.C}, dtype);
    DeviceTensor d_stats(gpu, {c.B, c.heads, c.T}, DType::f32), d_dqkv(gpu, {c.B, c.T, 3 * c.C}, dtype);
    const HostBuffer rqkv = wide(*ref, qkv), rdout = wide(*ref, dout);
    HostBuffer rout({c.B, c.T, c.C}, DType::f32), rstats({c.B, c.heads, c.T}, DType::f32),
        rdqkv({c.B, c.T, 3 * c.C}, DType::f32);

    gpu.attention_forward(d_qkv.tensor(), c.heads, d_out.tensor(), d_stats.tensor());
    ref->attention_forward(rqkv.tensor(), c.heads, rout.tensor(), rstats.tensor());
    expect_close(("attention_forward out " + where).c_str(), download_wide(*ref, d_out).tensor(),
                 rout.tensor(), tolerance(dtype, false, 2));
    // Stats: the natural-log log-sum-exp of the scaled scores, whatever computed it.
    expect_close(("attention_forward stats " + where).c_str(), d_stats.download().tensor(), rstats.tensor(),
                 tolerance(dtype, false, 2));

    // The backward from the GPU's own forward (as training runs it), against the reference's from its own.
    gpu.attention_backward(d_qkv.tensor(), d_out.tensor(), d_stats.tensor(), d_dout.tensor(), c.heads,
                           d_dqkv.tensor());
    ref->attention_backward(rqkv.tensor(), rout.tensor(), rstats.tensor(), rdout.tensor(), c.heads,
                            rdqkv.tensor());
    // f16/bf16: P and dS pass through the data's dtype inside cuDNN's kernels.
    expect_close(("attention_backward dqkv " + where).c_str(), download_wide(*ref, d_dqkv).tensor(),
                 rdqkv.tensor(), tolerance(dtype, false, dtype == DType::f32 ? 10 : 4));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AttentionTest, ::testing::ValuesIn(kDtypes), dtype_label);

// f32 attention runs as GEMMs around row kernels; where the backend allows TF32 its GEMMs run on TF32
// tensor cores, and match the reference to TF32's precision.
TEST_F(TransformerOpsTest, F32AttentionOnTf32MatchesReference) {
  Backend& gpu = shared_gpu(/*allow_tf32=*/true);
  for (const AttentionCase& c : kAttentionCases) {
    const std::string where =
        fmt::format("B={} T={} C={} heads={} f32, TF32 allowed", c.B, c.T, c.C, c.heads);
    SCOPED_TRACE(where);
    EXPECT_EQ(describe_cuda_attention(gpu, DType::f32, c.B, c.T, c.C, c.heads),
              "cuBLAS GEMMs (TF32) + own softmax rows");
    const HostBuffer qkv = random_host(*ref, {c.B, c.T, 3 * c.C}, DType::f32, 63, Layout::nchw, -2.0, 2.0);
    const HostBuffer dout = random_host(*ref, {c.B, c.T, c.C}, DType::f32, 64);
    DeviceTensor d_qkv(gpu, qkv), d_dout(gpu, dout), d_out(gpu, {c.B, c.T, c.C}, DType::f32);
    DeviceTensor d_stats(gpu, {c.B, c.heads, c.T}, DType::f32), d_dqkv(gpu, {c.B, c.T, 3 * c.C}, DType::f32);
    HostBuffer rout({c.B, c.T, c.C}, DType::f32), rstats({c.B, c.heads, c.T}, DType::f32),
        rdqkv({c.B, c.T, 3 * c.C}, DType::f32);
    gpu.attention_forward(d_qkv.tensor(), c.heads, d_out.tensor(), d_stats.tensor());
    ref->attention_forward(qkv.tensor(), c.heads, rout.tensor(), rstats.tensor());
    expect_close(("attention_forward out " + where).c_str(), d_out.download().tensor(), rout.tensor(),
                 tolerance(DType::f32, true, 2));
    expect_close(("attention_forward stats " + where).c_str(), d_stats.download().tensor(), rstats.tensor(),
                 tolerance(DType::f32, true, 2));
    gpu.attention_backward(d_qkv.tensor(), d_out.tensor(), d_stats.tensor(), d_dout.tensor(), c.heads,
                           d_dqkv.tensor());
    ref->attention_backward(qkv.tensor(), rout.tensor(), rstats.tensor(), dout.tensor(), c.heads,
                            rdqkv.tensor());
    expect_close(("attention_backward dqkv " + where).c_str(), d_dqkv.download().tensor(), rdqkv.tensor(),
                 tolerance(DType::f32, true, 10));
  }
}

// Forward + backward recorded once (Backend::capture: a host synchronisation or an allocation inside fails
// it) and replayed: the replay gives the eager results, and follows new data in the same buffers.
class AttentionGraphTest : public TransformerOpsTest, public ::testing::WithParamInterface<DType> {};

TEST_P(AttentionGraphTest, CapturedStepReplaysEagerResults) {
  const DType dtype = GetParam();
  Backend& gpu = shared_gpu();
  const int64_t B = 2, T = 256, C = 256, heads = 4;
  const std::string where = fmt::format("B={} T={} C={} heads={} {}", B, T, C, heads, dtype_name(dtype));
  SCOPED_TRACE(where);
  DeviceTensor qkv(gpu, random_host(*ref, {B, T, 3 * C}, dtype, 71)),
      dout(gpu, random_host(*ref, {B, T, C}, dtype, 72));
  DeviceTensor out(gpu, {B, T, C}, dtype), stats(gpu, {B, heads, T}, DType::f32),
      dqkv(gpu, {B, T, 3 * C}, dtype);
  const auto step = [&] {
    gpu.attention_forward(qkv.tensor(), heads, out.tensor(), stats.tensor());
    gpu.attention_backward(qkv.tensor(), out.tensor(), stats.tensor(), dout.tensor(), heads, dqkv.tensor());
  };
  step();  // eager: builds the plans, outside the capture
  const HostBuffer eager_out = download_wide(*ref, out), eager_dqkv = download_wide(*ref, dqkv);
  std::unique_ptr<CapturedWork> graph = gpu.capture(step);
  ASSERT_NE(graph, nullptr) << "attention " << where << ": the cuda backend records graphs";
  gpu.fill(out.tensor(), 0.0);
  gpu.fill(dqkv.tensor(), 0.0);
  graph->replay();
  gpu.synchronize();
  // cuDNN's backward sums dQ with atomics: equal to rounding, not bit for bit.
  expect_close(("captured attention out " + where).c_str(), download_wide(*ref, out).tensor(),
               eager_out.tensor(), tolerance(dtype));
  expect_close(("captured attention dqkv " + where).c_str(), download_wide(*ref, dqkv).tensor(),
               eager_dqkv.tensor(), tolerance(dtype));

  // New inputs in the same buffers: the replay computes them (the eager run is the oracle).
  qkv.upload(random_host(*ref, {B, T, 3 * C}, dtype, 73));
  graph->replay();
  gpu.synchronize();
  const HostBuffer replayed_out = download_wide(*ref, out), replayed_dqkv = download_wide(*ref, dqkv);
  step();
  expect_close(("replayed attention out, new data " + where).c_str(), replayed_out.tensor(),
               download_wide(*ref, out).tensor(), tolerance(dtype));
  expect_close(("replayed attention dqkv, new data " + where).c_str(), replayed_dqkv.tensor(),
               download_wide(*ref, dqkv).tensor(), tolerance(dtype));
  EXPECT_GT(relative_error(replayed_out.tensor(), eager_out.tensor()), tolerance(dtype))
      << "attention " << where << ": the replay did not follow the new data";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AttentionGraphTest, ::testing::ValuesIn(kDtypes), dtype_label);

// ---------------------------------------------------------------------------------------------------------
// The padded softmax cross-entropy

struct PaddedLossCase {
  int64_t N, K, valid;
  float smoothing;
};

const PaddedLossCase kPaddedLossCases[] = {
    {6, 50304, 50257, 0.f},   // GPT-2's padded vocabulary (one block per row)
    {5, 50304, 50257, 0.1f},  // with smoothing over the valid columns alone
    {9, 100, 90, 0.1f},       // a warp per row, padded
    {4, 1000, 1000, 0.f},     // no padding
};

class PaddedLossTest : public TransformerOpsTest, public ::testing::WithParamInterface<DType> {};

TEST_P(PaddedLossTest, ForwardAndBackwardMatchReference) {
  const DType dtype = GetParam();
  Backend& gpu = shared_gpu();
  for (const PaddedLossCase& c : kPaddedLossCases) {
    const std::string where =
        fmt::format("N={} K={} valid={} smoothing={} {}", c.N, c.K, c.valid, c.smoothing, dtype_name(dtype));
    SCOPED_TRACE(where);
    std::vector<int32_t> ids = random_ints(c.N, static_cast<int32_t>(c.valid), 81);
    ids[0] = static_cast<int32_t>(c.valid - 1);  // the last valid class: its smoothing stash wraps to 0
    const HostBuffer labels = host_ints({c.N}, ids);
    // Large padded logits: a kernel that lets them in moves the whole softmax.
    HostBuffer logits = random_host(*ref, {c.N, c.K}, dtype, 82, Layout::nchw, -4.0, 4.0);
    const HostBuffer rlogits = wide(*ref, logits);
    DeviceTensor d_logits(gpu, logits), d_labels(gpu, labels);
    DeviceTensor d_probs(gpu, {c.N, c.K}, DType::f32), d_loss(gpu, {1}, DType::f32),
        d_dlogits(gpu, {c.N, c.K}, dtype);
    HostBuffer rprobs({c.N, c.K}, DType::f32), rloss({1}, DType::f32), rdlogits({c.N, c.K}, DType::f32);
    gpu.fill(d_probs.tensor(), 7.0);  // every column, padded ones included, must be written
    gpu.softmax_cross_entropy_padded_forward(d_logits.tensor(), d_labels.tensor(), c.valid, c.smoothing,
                                             d_probs.tensor(), d_loss.tensor());
    ref->softmax_cross_entropy_padded_forward(rlogits.tensor(), labels.tensor(), c.valid, c.smoothing,
                                              rprobs.tensor(), rloss.tensor());
    const HostBuffer probs = d_probs.download();
    expect_close(("padded cross-entropy probs " + where).c_str(), probs.tensor(), rprobs.tensor(), 1e-5);
    expect_close(("padded cross-entropy loss " + where).c_str(), d_loss.download().tensor(), rloss.tensor(),
                 1e-5);
    int64_t nonzero_padding = 0;
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t j = c.valid; j < c.K; ++j) nonzero_padding += probs.ptr<float>()[n * c.K + j] != 0.f;
    EXPECT_EQ(nonzero_padding, 0) << "padded cross-entropy " << where << ": padded probabilities are not 0";

    // The loss scale read from device memory, times the caller's scale.
    const float host_scale = 256.f;
    DeviceTensor d_loss_scale(gpu, {1}, DType::f32);
    gpu.fill(d_loss_scale.tensor(), host_scale);
    gpu.softmax_cross_entropy_padded_backward(d_probs.tensor(), d_labels.tensor(), c.valid, c.smoothing, 0.5f,
                                              d_dlogits.tensor(), d_loss_scale.tensor().ptr<float>());
    ref->softmax_cross_entropy_padded_backward(rprobs.tensor(), labels.tensor(), c.valid, c.smoothing, 0.5f,
                                               rdlogits.tensor(), &host_scale);
    const HostBuffer dlogits = download_wide(*ref, d_dlogits);
    expect_close(("padded cross-entropy dlogits " + where).c_str(), dlogits.tensor(), rdlogits.tensor(),
                 tolerance(dtype));
    int64_t nonzero_gradient = 0;
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t j = c.valid; j < c.K; ++j) nonzero_gradient += dlogits.ptr<float>()[n * c.K + j] != 0.f;
    EXPECT_EQ(nonzero_gradient, 0) << "padded cross-entropy " << where << ": padded gradients are not 0";
  }
}

// The fused loss (the language model's): loss, row losses and the gradient written over the logits match
// the reference's fused op; inference leaves the logits as they were.
TEST_P(PaddedLossTest, FusedMatchesReference) {
  const DType dtype = GetParam();
  Backend& gpu = shared_gpu();
  for (const PaddedLossCase& c : kPaddedLossCases) {
    const std::string where =
        fmt::format("N={} K={} valid={} smoothing={} {}", c.N, c.K, c.valid, c.smoothing, dtype_name(dtype));
    SCOPED_TRACE(where);
    const HostBuffer labels = host_ints({c.N}, random_ints(c.N, static_cast<int32_t>(c.valid), 83));
    HostBuffer logits = random_host(*ref, {c.N, c.K}, dtype, 84, Layout::nchw, -4.0, 4.0);
    HostBuffer rlogits = wide(*ref, logits);
    DeviceTensor d_logits(gpu, logits), d_labels(gpu, labels);
    DeviceTensor d_rows(gpu, {c.N}, DType::f32), d_loss(gpu, {1}, DType::f32), d_scale(gpu, {1}, DType::f32);
    HostBuffer rrows({c.N}, DType::f32), rloss({1}, DType::f32);
    const float host_scale = 256.f;
    gpu.fill(d_scale.tensor(), host_scale);
    gpu.softmax_cross_entropy_fused(d_logits.tensor(), d_labels.tensor(), c.valid, c.smoothing,
                                    d_rows.tensor(), d_loss.tensor(), std::nullopt);
    expect_close(("fused loss, inference " + where).c_str(), download_wide(*ref, d_logits).tensor(),
                 rlogits.tensor(), 0.0);
    gpu.softmax_cross_entropy_fused(d_logits.tensor(), d_labels.tensor(), c.valid, c.smoothing,
                                    d_rows.tensor(), d_loss.tensor(), 0.5f, d_scale.tensor().ptr<float>());
    ref->softmax_cross_entropy_fused(rlogits.tensor(), labels.tensor(), c.valid, c.smoothing, rrows.tensor(),
                                     rloss.tensor(), 0.5f, &host_scale);
    expect_close(("fused loss " + where).c_str(), d_loss.download().tensor(), rloss.tensor(), 1e-5);
    expect_close(("fused row losses " + where).c_str(), d_rows.download().tensor(), rrows.tensor(), 1e-5);
    const HostBuffer gradient = download_wide(*ref, d_logits);
    expect_close(("fused gradient " + where).c_str(), gradient.tensor(), rlogits.tensor(), tolerance(dtype));
    int64_t nonzero_padding = 0;
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t j = c.valid; j < c.K; ++j) nonzero_padding += gradient.ptr<float>()[n * c.K + j] != 0.f;
    EXPECT_EQ(nonzero_padding, 0) << "fused " << where << ": padded gradients are not 0";
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PaddedLossTest, ::testing::ValuesIn(kDtypes), dtype_label);

// ---------------------------------------------------------------------------------------------------------
// The gradient norm and AdamW

TEST_F(TransformerOpsTest, SumOfSquaresMatchesReferenceAndAccumulates) {
  Backend& gpu = shared_gpu();
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1000003}}) {
    const std::string where = fmt::format("n={} f32", n);
    SCOPED_TRACE(where);
    const HostBuffer x = random_host(*ref, {n}, DType::f32, 91);
    DeviceTensor d_x(gpu, x), d_out(gpu, {1}, DType::f32);
    HostBuffer rout({1}, DType::f32);
    gpu.sum_of_squares(d_x.tensor(), d_out.tensor(), Accumulate::overwrite);
    ref->sum_of_squares(x.tensor(), rout.tensor(), Accumulate::overwrite);
    expect_close(("sum_of_squares (overwrite) " + where).c_str(), d_out.download().tensor(), rout.tensor(),
                 1e-6);
    gpu.sum_of_squares(d_x.tensor(), d_out.tensor(), Accumulate::add);
    ref->sum_of_squares(x.tensor(), rout.tensor(), Accumulate::add);
    expect_close(("sum_of_squares (add) " + where).c_str(), d_out.download().tensor(), rout.tensor(), 1e-6);
  }
}

// The gradients as a BF16 step keeps them: the sum of their squares is the same, bit for bit, as that of
// their FP32 widening (the partition into partial sums depends on the count alone), read 16 bytes at a
// time or, one element off the alignment, one by one; and within f32's rounding of the reference.
TEST_F(TransformerOpsTest, SumOfSquaresOfBf16IsThatOfItsWidening) {
  Backend& gpu = shared_gpu();
  const int64_t n = 1000003;
  const HostBuffer x = random_host(*ref, {n + 1}, DType::bf16, 92);
  const HostBuffer widened = wide(*ref, x);
  DeviceTensor d16(gpu, x), d32(gpu, widened), out16(gpu, {1}, DType::f32), out32(gpu, {1}, DType::f32),
      off16(gpu, {1}, DType::f32), off32(gpu, {1}, DType::f32);
  HostBuffer rout({1}, DType::f32);
  auto first_n = [&](DeviceTensor& t, int64_t skip) {
    return Tensor(static_cast<char*>(t.tensor().data()) + skip * dtype_size(t.tensor().dtype()), {n},
                  t.tensor().dtype(), Layout::nchw, t.tensor().device());
  };
  Tensor a16 = first_n(d16, 0), a32 = first_n(d32, 0), u16 = first_n(d16, 1), u32 = first_n(d32, 1);
  gpu.sum_of_squares(a16, out16.tensor(), Accumulate::overwrite);
  gpu.sum_of_squares(a32, out32.tensor(), Accumulate::overwrite);
  gpu.sum_of_squares(u16, off16.tensor(), Accumulate::overwrite);
  gpu.sum_of_squares(u32, off32.tensor(), Accumulate::overwrite);
  EXPECT_TRUE(same_bits(out16.download(), out32.download())) << "aligned";
  EXPECT_TRUE(same_bits(off16.download(), off32.download())) << "one element off the alignment";
  HostBuffer first({n}, DType::f32);
  std::memcpy(first.tensor().data(), widened.tensor().data(), static_cast<size_t>(n) * sizeof(float));
  ref->sum_of_squares(first.tensor(), rout.tensor(), Accumulate::overwrite);
  expect_close("sum_of_squares bf16", out16.download().tensor(), rout.tensor(), 1e-6);
}

// AdamW with everything a recorded step reads from device memory: the rate, the loss scale and the
// overflow flag (StepScalars), the clipping norm and the step count.
TEST_F(TransformerOpsTest, AdamWMatchesReferenceWithDeviceScalars) {
  Backend& gpu = shared_gpu();
  const int64_t n = 10100;
  const std::vector<ParamSegment> segments = {
      {0, 5001, true}, {5001, 3, false}, {5004, 5000, true}};  // 10004..: none
  const HostBuffer p0 = random_host(*ref, {n}, DType::f32, 101),
                   g = random_host(*ref, {n}, DType::f32, 102, Layout::nchw, -50, 50);
  const HostBuffer m0 = random_host(*ref, {n}, DType::f32, 103, Layout::nchw, -0.1, 0.1);
  const HostBuffer v0 = random_host(*ref, {n}, DType::f32, 104, Layout::nchw, 0.0, 0.01);
  DeviceTensor p(gpu, p0), grads(gpu, g), m(gpu, m0), v(gpu, v0), norm(gpu, {1}, DType::f32);
  HostBuffer rp = copy_of(p0), rm = copy_of(m0), rv = copy_of(v0), rnorm({1}, DType::f32);

  StepScalars host_scalars;
  host_scalars.lr = 3e-4f;
  host_scalars.loss_scale = 1024.f;
  auto* scalars = static_cast<StepScalars*>(gpu.allocate(sizeof(StepScalars)));
  gpu.copy_to_device(scalars, &host_scalars, sizeof host_scalars);
  DeviceTensor count(gpu, {1}, DType::i32);
  gpu.fill(count.tensor(), 4.0);  // four updates so far: this one is t = 5

  gpu.sum_of_squares(grads.tensor(), norm.tensor(), Accumulate::overwrite);
  ref->sum_of_squares(g.tensor(), rnorm.tensor(), Accumulate::overwrite);
  AdamWStep step;
  step.grad_scale = 0.5f;
  step.max_grad_norm = 1.f;  // the gradients' norm is far above: the clip acts
  step.step = 1;             // ignored: the count is in device memory
  step.grad_norm_squared = norm.tensor().ptr<float>();
  step.step_count = count.tensor().ptr<int32_t>();
  gpu.adamw_update(p.tensor(), grads.tensor(), m.tensor(), v.tensor(), segments, step, scalars);

  AdamWStep ref_step = step;
  ref_step.step_count = nullptr;
  ref_step.step = 5;
  ref_step.grad_norm_squared = rnorm.tensor().ptr<float>();
  ref->adamw_update(rp.tensor(), g.tensor(), rm.tensor(), rv.tensor(), segments, ref_step, &host_scalars);
  expect_close("adamw_update params n=10100 f32", p.download().tensor(), rp.tensor(), 1e-6);
  expect_close("adamw_update m n=10100 f32", m.download().tensor(), rm.tensor(), 1e-6);
  expect_close("adamw_update v n=10100 f32", v.download().tensor(), rv.tensor(), 1e-6);
  const HostBuffer count_after = count.download();
  EXPECT_EQ(count_after.ptr<int32_t>()[0], 5) << "adamw_update: the step count did not advance to 5";
  // Elements outside every segment are not touched.
  const HostBuffer params = p.download();
  EXPECT_EQ(std::memcmp(params.ptr<float>() + 10004, p0.ptr<float>() + 10004, (n - 10004) * sizeof(float)), 0)
      << "adamw_update touched parameters outside the segments";

  // The reference keeps the same count rule in its own memory (the interface's step_count).
  HostBuffer rp2 = copy_of(p0), rm2 = copy_of(m0), rv2 = copy_of(v0);
  int32_t host_count = 4;
  AdamWStep counted = ref_step;
  counted.step = 1;
  counted.step_count = &host_count;
  ref->adamw_update(rp2.tensor(), g.tensor(), rm2.tensor(), rv2.tensor(), segments, counted, &host_scalars);
  EXPECT_EQ(host_count, 5) << "reference adamw_update: the step count did not advance";
  EXPECT_TRUE(same_bits(rp, rp2)) << "reference adamw_update: step_count 4 and step 5 differ";

  // An overflowed step changes nothing, the count included.
  const int32_t overflow = 1;
  gpu.copy_to_device(reinterpret_cast<std::byte*>(scalars) + offsetof(StepScalars, overflow), &overflow,
                     sizeof overflow);
  gpu.adamw_update(p.tensor(), grads.tensor(), m.tensor(), v.tensor(), segments, step, scalars);
  EXPECT_TRUE(same_bits(params, p.download())) << "adamw_update ran on an overflowed step";
  EXPECT_EQ(count.download().ptr<int32_t>()[0], 5) << "adamw_update: an overflowed step advanced the count";
  gpu.deallocate(scalars);
}

// SGD and AdamW with the compute copies folded in (ComputeCopies): the same bits as the three passes they
// replace, on the GPU (the vector paths, the scalar heads and tails, the copies' end inside a segment).
TEST_F(TransformerOpsTest, UpdatesFoldTheComputeCopiesBitForBit) {
  Backend& gpu = shared_gpu();
  using compute_copies_check::Update;
  for (Update update : {Update::sgd, Update::adamw}) {
    for (DType compute : {DType::f16, DType::bf16}) {
      compute_copies_check::expect_update_folds_copies(gpu, update, compute, 100003, 65536, false);
      compute_copies_check::expect_update_folds_copies(gpu, update, compute, 65536, 65536, false);
      compute_copies_check::expect_update_folds_copies(gpu, update, compute, 65536, 65536, true);
    }
  }
  compute_copies_check::expect_bad_copies_refused(gpu);
}

// AdamW recorded once and replayed: t advances with every replay (the bias corrections change).
TEST_F(TransformerOpsTest, AdamWReplaysWithRisingStepCount) {
  Backend& gpu = shared_gpu();
  const int64_t n = 4096;
  const std::vector<ParamSegment> segments = {{0, n, true}};
  const HostBuffer p0 = random_host(*ref, {n}, DType::f32, 111), g = random_host(*ref, {n}, DType::f32, 112);
  DeviceTensor p(gpu, p0), grads(gpu, g), m(gpu, {n}, DType::f32), v(gpu, {n}, DType::f32),
      count(gpu, {1}, DType::i32);
  gpu.fill(m.tensor(), 0.0);
  gpu.fill(v.tensor(), 0.0);
  gpu.fill(count.tensor(), 0.0);
  AdamWStep step;
  step.lr = 1e-3f;
  step.step_count = count.tensor().ptr<int32_t>();
  gpu.adamw_update(p.tensor(), grads.tensor(), m.tensor(), v.tensor(), segments, step);  // t = 1, eager
  std::unique_ptr<CapturedWork> graph = gpu.capture(
      [&] { gpu.adamw_update(p.tensor(), grads.tensor(), m.tensor(), v.tensor(), segments, step); });
  ASSERT_NE(graph, nullptr);
  graph->replay();  // t = 2
  graph->replay();  // t = 3
  gpu.synchronize();
  HostBuffer rp = copy_of(p0), rm({n}, DType::f32), rv({n}, DType::f32);
  ref->fill(rm.tensor(), 0.0);
  ref->fill(rv.tensor(), 0.0);
  for (int64_t t = 1; t <= 3; ++t) {
    AdamWStep r = step;
    r.step_count = nullptr;
    r.step = t;
    ref->adamw_update(rp.tensor(), g.tensor(), rm.tensor(), rv.tensor(), segments, r);
  }
  EXPECT_EQ(count.download().ptr<int32_t>()[0], 3) << "adamw_update replayed: the count is not 3";
  expect_close("adamw_update replayed params n=4096 f32", p.download().tensor(), rp.tensor(), 1e-6);
}

// ---------------------------------------------------------------------------------------------------------
// Bad arguments: one clear error, nothing launched

TEST_F(TransformerOpsTest, BadArgumentsAreRefused) {
  Backend& gpu = shared_gpu();
  DeviceTensor qkv(gpu, {2, 16, 3 * 96}, DType::f16), out(gpu, {2, 16, 96}, DType::f16),
      stats(gpu, {2, 5, 16}, DType::f32);
  EXPECT_THROW(gpu.attention_forward(qkv.tensor(), 5, out.tensor(), stats.tensor()),
               Error);  // 5 does not divide 96
  DeviceTensor x(gpu, {4, 8}, DType::f32), w(gpu, {7}, DType::f32), mean(gpu, {4}, DType::f32),
      rstd(gpu, {4}, DType::f32);
  EXPECT_THROW(gpu.layernorm_forward(x.tensor(), w.tensor(), w.tensor(), 1e-5f, x.tensor(), mean.tensor(),
                                     rstd.tensor()),
               Error);  // weight [7] for rows of 8
  DeviceTensor params(gpu, {8}, DType::f32);
  const std::vector<ParamSegment> segments = {{0, 8, true}};
  AdamWStep step;
  step.step = 0;
  EXPECT_THROW(
      gpu.adamw_update(params.tensor(), params.tensor(), params.tensor(), params.tensor(), segments, step),
      Error);
  DeviceTensor logits(gpu, {2, 10}, DType::f32), labels(gpu, {2}, DType::i32),
      probs(gpu, {2, 10}, DType::f32), loss(gpu, {1}, DType::f32);
  EXPECT_THROW(gpu.softmax_cross_entropy_padded_forward(logits.tensor(), labels.tensor(), 11, 0.f,
                                                        probs.tensor(), loss.tensor()),
               Error);  // more valid classes than columns
}

}  // namespace
}  // namespace dlbench
