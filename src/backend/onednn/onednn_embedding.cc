// GPT-2's input embedding, out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :], and its scatter backward. f32.
//
// The forward gathers one row per (b, t): rows are independent, so threads share them out. The backward
// adds dout[b, t, :] into row tokens[b, t] of dwte, and a token may occur many times, so threads owning
// (b, t) would race on its row; instead each thread owns a block of columns of both tables and walks every
// (b, t) in order. No two threads touch one element, and each element's sum runs in the same order at any
// thread count (the results do not depend on it). dwpe's row t sums over b in the same walk.
#include <algorithm>
#include <cstring>

#include "backend/onednn/onednn_common.h"

namespace dlbench {
namespace onednn {
namespace {

struct EmbeddingShape {
  int64_t B, T, C, V, positions;
};

// tokens i32 [B, T] in [0, V); table [V, C]; positions [>= T, C]; rows [B, T, C].
EmbeddingShape check_embedding(const char* op, const Tensor& tokens, const Tensor& table,
                               const Tensor& positions, const Tensor& rows) {
  require_f32(table, op, "the token table");
  require_f32(positions, op, "the position table");
  require_f32(rows, op, "the embedded rows");
  DLB_CHECK(tokens.rank() == 2 && tokens.dtype() == DType::i32, "{}: tokens are {}, expected i32[B, T]", op,
            tokens.describe());
  DLB_CHECK(table.rank() == 2, "{}: the token table is {}, expected [V, C]", op, table.describe());
  const int64_t B = tokens.dim(0), T = tokens.dim(1), V = table.dim(0), C = table.dim(1);
  DLB_CHECK(positions.rank() == 2 && positions.dim(0) >= T && positions.dim(1) == C,
            "{}: the position table is {}, expected [>= {}, {}]", op, positions.describe(), T, C);
  DLB_CHECK(rows.dims() == (std::vector<int64_t>{B, T, C}), "{}: {} should be [{}, {}, {}]", op,
            rows.describe(), B, T, C);
  const int32_t* ids = tokens.ptr<int32_t>();
  const int64_t n = B * T;
  int64_t bad = -1;
  for (int64_t i = 0; i < n && bad < 0; ++i)
    if (ids[i] < 0 || ids[i] >= V) bad = i;
  DLB_CHECK(bad < 0, "{}: token {} at position {} is outside [0, {})", op, ids[bad], bad, V);
  return {B, T, C, V, positions.dim(0)};
}

// Columns per unit of work in the backward: 16 floats, one cache line, so that threads never share one.
constexpr int64_t kColumnBlock = 16;

}  // namespace

void OneDnnBackend::embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                                      Tensor& out) {
  const EmbeddingShape s = check_embedding("embedding_forward", tokens, wte, wpe, out);
  const int32_t* ids = tokens.ptr<int32_t>();
  const float* token_table = wte.ptr<float>();
  const float* position_table = wpe.ptr<float>();
  float* y = out.ptr<float>();
  const int64_t C = s.C;
#pragma omp parallel for schedule(static) num_threads(threads_) if (s.B * s.T * C > kParallelThreshold)
  for (int64_t row = 0; row < s.B * s.T; ++row) {
    const float* token_row = token_table + ids[row] * C;
    const float* position_row = position_table + (row % s.T) * C;
    float* y_row = y + row * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y_row[c] = token_row[c] + position_row[c];
  }
}

void OneDnnBackend::embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dwte, Tensor& dwpe,
                                       Accumulate accumulate) {
  const EmbeddingShape s = check_embedding("embedding_backward", tokens, dwte, dwpe, dout);
  const int32_t* ids = tokens.ptr<int32_t>();
  const float* dy = dout.ptr<float>();
  float* token_grad = dwte.ptr<float>();
  float* position_grad = dwpe.ptr<float>();
  const int64_t C = s.C;
  if (accumulate == Accumulate::overwrite) {
    // Every row of both tables is defined afterwards, including tokens and positions no (b, t) names.
    fill(dwte, 0.0);
    fill(dwpe, 0.0);
  }
  const int64_t blocks = ceil_div(C, kColumnBlock);
#pragma omp parallel for schedule(static) num_threads(threads_) if (s.B * s.T * C > kParallelThreshold)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t c0 = block * kColumnBlock, c1 = std::min(C, c0 + kColumnBlock);
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t t = 0; t < s.T; ++t) {
        const int64_t row = b * s.T + t;
        const float* dy_row = dy + row * C;
        float* token_row = token_grad + ids[row] * C;
        float* position_row = position_grad + t * C;
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) {
          token_row[c] += dy_row[c];
          position_row[c] += dy_row[c];
        }
      }
  }
}

}  // namespace onednn
}  // namespace dlbench
