// Causal multi-head self-attention on the CPU, f32: per batch b and head h (d = C / heads, scale =
// 1/sqrt(d)), s = scale q.k^T masked to j <= t, p = softmax(s), out = p.v, and lse[t] = log sum exp s[t, :]
// saved for the backward, which rebuilds p = exp(s - lse) rather than storing [T, T] (as the reference
// and cuDNN's SDPA do). The backward, with D[t] = dout[t] . out[t]:
//   dv = p^T dout,  dp = dout v^T,  ds = p * (dp - D),  dq = scale ds k,  dk = scale ds^T q.
//
// The products run on oneDNN's sgemm straight on the strided heads of qkv [B, T, 3C] (a head's q, k or v
// is a [T, d] matrix with leading dimension 3C), so no head is copied out. Rows are taken in blocks of
// kQueryBlock queries: a block's scores are [rows, keys] with keys = the block's last position + 1 (the
// causal mask leaves the rest out entirely), one such block per thread at a time, never [T, T].
//
// Threads: the forward shares out (b, h, query block) items, each independent; the backward shares out
// (b, h) pairs, since every query block of a head adds into the same dk and dv rows. sgemm called inside
// the OpenMP region runs on its calling thread. oneDNN's matmul primitive would do the same products
// through the same sgemm on CPUs without AVX-512 (2.6 has its brgemm f32 kernels there only), with a
// primitive per block shape; sgemm takes each block's shape at the call.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backend/onednn/onednn_common.h"

namespace dlbench {
namespace onednn {
namespace {

// Queries per block: a [64, keys] block of scores stays in L2 for T up to a few thousand, and 64 rows
// keep sgemm's kernels busy.
constexpr int64_t kQueryBlock = 64;

struct AttentionShape {
  int64_t B, T, C, heads, d;
  int64_t blocks() const { return ceil_div(T, kQueryBlock); }
};

AttentionShape check_attention(const char* op, const Tensor& qkv, int64_t heads, const Tensor& out,
                               const Tensor& stats) {
  require_f32(qkv, op, "qkv");
  require_f32(out, op, "out");
  require_f32(stats, op, "stats");
  DLB_CHECK(qkv.rank() == 3 && qkv.dim(2) % 3 == 0 && qkv.dim(2) > 0, "{}: qkv is {}, expected [B, T, 3C]",
            op, qkv.describe());
  const int64_t B = qkv.dim(0), T = qkv.dim(1), C = qkv.dim(2) / 3;
  DLB_CHECK(heads > 0 && C % heads == 0, "{}: {} heads do not divide C = {}", op, heads, C);
  DLB_CHECK(out.dims() == (std::vector<int64_t>{B, T, C}), "{}: out is {}, expected [{}, {}, {}]", op,
            out.describe(), B, T, C);
  DLB_CHECK(stats.dims() == (std::vector<int64_t>{B, heads, T}), "{}: stats is {}, expected [{}, {}, {}]", op,
            stats.describe(), B, heads, T);
  return {B, T, C, heads, C / heads};
}

// Row-major c[m, n] = alpha * op(a) op(b) + beta * c on oneDNN's sgemm, with leading dimensions.
void sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const dnnl::status status = dnnl::sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  DLB_CHECK(status == dnnl::status::success, "attention: dnnl_sgemm failed with status {}",
            static_cast<int>(status));
}

// Where head h of position (b, t) starts, in qkv-shaped ([B, T, 3C]: part 0 q, 1 k, 2 v) and out-shaped
// ([B, T, C]) buffers.
struct HeadPointers {
  const AttentionShape& s;
  int64_t qkv_offset(int64_t b, int64_t t, int64_t h, int part) const {
    return (b * s.T + t) * 3 * s.C + part * s.C + h * s.d;
  }
  int64_t out_offset(int64_t b, int64_t t, int64_t h) const { return (b * s.T + t) * s.C + h * s.d; }
};

// One block of queries [t0, t0 + rows) against keys [0, keys), keys = t0 + rows: the scores of row i
// (position t0 + i) end at column t0 + i. Turns `scores` (scaled, leading dimension keys) into the
// softmax in place, zero past each row's end, and writes each row's log-sum-exp.
void softmax_rows(float* scores, int64_t t0, int64_t rows, int64_t keys, float* lse) {
  for (int64_t i = 0; i < rows; ++i) {
    float* row = scores + i * keys;
    const int64_t n = t0 + i + 1;
    const float max = max_of(row, n);
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j) {
      row[j] = exp_for_simd(row[j] - max);
      sum += row[j];
    }
    const float inv = 1.f / sum;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) row[j] *= inv;
    std::fill(row + n, row + keys, 0.f);
    lse[i] = max + std::log(sum);
  }
}

}  // namespace

void OneDnnBackend::attention_forward(const Tensor& qkv, int64_t heads, Tensor& out, Tensor& stats) {
  const AttentionShape s = check_attention("attention_forward", qkv, heads, out, stats);
  if (s.B * s.T == 0) return;
  const HeadPointers at{s};
  const float* x = qkv.ptr<float>();
  float* y = out.ptr<float>();
  float* lse = stats.ptr<float>();
  const float scale = 1.f / std::sqrt(static_cast<float>(s.d));
  const int64_t block_floats = kQueryBlock * s.T, blocks = s.blocks();
  float* scratch_all = scratch().floats(static_cast<size_t>(threads_ * block_floats));
  // Item i: head pair i / blocks, its blocks from the last (the most keys) down, so that the dynamic
  // schedule hands out the long items first.
#pragma omp parallel for schedule(dynamic) num_threads(threads_)
  for (int64_t item = 0; item < s.B * s.heads * blocks; ++item) {
    const int64_t pair = item / blocks, block = blocks - 1 - item % blocks;
    const int64_t b = pair / s.heads, h = pair % s.heads;
    const int64_t t0 = block * kQueryBlock, rows = std::min(kQueryBlock, s.T - t0), keys = t0 + rows;
    float* scores = scratch_all + omp_get_thread_num() * block_floats;
    sgemm('N', 'T', rows, keys, s.d, scale, x + at.qkv_offset(b, t0, h, 0), 3 * s.C,
          x + at.qkv_offset(b, 0, h, 1), 3 * s.C, 0.f, scores, keys);
    softmax_rows(scores, t0, rows, keys, lse + pair * s.T + t0);
    sgemm('N', 'N', rows, s.d, keys, 1.f, scores, keys, x + at.qkv_offset(b, 0, h, 2), 3 * s.C, 0.f,
          y + at.out_offset(b, t0, h), s.C);
  }
}

void OneDnnBackend::attention_backward(const Tensor& qkv, const Tensor& out, const Tensor& stats,
                                       const Tensor& dout, int64_t heads, Tensor& dqkv) {
  const char* op = "attention_backward";
  const AttentionShape s = check_attention(op, qkv, heads, out, stats);
  require_f32(dout, op, "dout");
  require_f32(dqkv, op, "dqkv");
  DLB_CHECK(dout.dims() == out.dims() && dqkv.dims() == qkv.dims(), "{}: dout {} or dqkv {} differ from {}",
            op, dout.describe(), dqkv.describe(), out.describe());
  if (s.B * s.T == 0) return;
  const HeadPointers at{s};
  const float* x = qkv.ptr<float>();
  const float* y = out.ptr<float>();
  const float* dy = dout.ptr<float>();
  const float* lse = stats.ptr<float>();
  float* dx = dqkv.ptr<float>();
  const float scale = 1.f / std::sqrt(static_cast<float>(s.d));
  const int64_t ld = 3 * s.C, block_floats = kQueryBlock * s.T, blocks = s.blocks();
  float* scratch_all = scratch().floats(static_cast<size_t>(threads_ * 2 * block_floats));
#pragma omp parallel for schedule(dynamic) num_threads(threads_)
  for (int64_t pair = 0; pair < s.B * s.heads; ++pair) {
    const int64_t b = pair / s.heads, h = pair % s.heads;
    float* p = scratch_all + omp_get_thread_num() * 2 * block_floats;
    float* dp = p + block_floats;
    const float *q = x + at.qkv_offset(b, 0, h, 0), *k = x + at.qkv_offset(b, 0, h, 1),
                *v = x + at.qkv_offset(b, 0, h, 2);
    float *dq = dx + at.qkv_offset(b, 0, h, 0), *dk = dx + at.qkv_offset(b, 0, h, 1),
          *dv = dx + at.qkv_offset(b, 0, h, 2);
    // The last block reaches every key, so it writes dk and dv (beta 0) and the earlier ones add.
    for (int64_t block = blocks - 1; block >= 0; --block) {
      const int64_t t0 = block * kQueryBlock, rows = std::min(kQueryBlock, s.T - t0), keys = t0 + rows;
      const float beta = block == blocks - 1 ? 0.f : 1.f;
      const float* row_lse = lse + pair * s.T + t0;
      const float* dy_block = dy + at.out_offset(b, t0, h);
      sgemm('N', 'T', rows, keys, s.d, scale, q + t0 * ld, ld, k, ld, 0.f, p, keys);
      for (int64_t i = 0; i < rows; ++i) {
        float* row = p + i * keys;
        const int64_t n = t0 + i + 1;
        const float row_lse_i = row_lse[i];
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) row[j] = exp_for_simd(row[j] - row_lse_i);
        std::fill(row + n, row + keys, 0.f);
      }
      sgemm('T', 'N', keys, s.d, rows, 1.f, p, keys, dy_block, s.C, beta, dv, ld);
      sgemm('N', 'T', rows, keys, s.d, 1.f, dy_block, s.C, v, ld, 0.f, dp, keys);
      for (int64_t i = 0; i < rows; ++i) {
        const float* dy_row = dy_block + i * s.C;
        const float* y_row = y + at.out_offset(b, t0 + i, h);
        float D = 0;
#pragma omp simd reduction(+ : D)
        for (int64_t c = 0; c < s.d; ++c) D += dy_row[c] * y_row[c];
        const float* p_row = p + i * keys;
        float* ds_row = dp + i * keys;
#pragma omp simd
        for (int64_t j = 0; j < keys; ++j) ds_row[j] = scale * p_row[j] * (ds_row[j] - D);
      }
      sgemm('N', 'N', rows, s.d, keys, 1.f, dp, keys, k, ld, 0.f, dq + t0 * ld, ld);
      sgemm('T', 'N', keys, s.d, rows, 1.f, dp, keys, q + t0 * ld, ld, beta, dk, ld);
    }
  }
}

}  // namespace onednn
}  // namespace dlbench
