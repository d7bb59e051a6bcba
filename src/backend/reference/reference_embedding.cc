// GPT-2's input embedding: each position's vector is its token's row of wte plus its position's row of wpe,
//   out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :].
// The forward gathers rows, so the backward scatters: every (b, t) adds dout[b, t, :] into its token's row
// of dwte (a token that occurs twice gets both) and into row t of dwpe.
#include <vector>

#include "backend/reference/reference_backend.h"
#include "backend/reference/reference_common.h"

namespace dlbench {
namespace {

using reference::View2;

struct EmbeddingShape {
  int64_t B, T, C, V, positions;
};

// tokens i32 [B, T] in [0, V); table [V, C] and positions [>= T, C] in the dtype of `out` [B, T, C].
EmbeddingShape check_embedding(const char* op, const Tensor& tokens, const Tensor& table,
                               const Tensor& positions, const Tensor& out) {
  reference::check_host(op, "tokens", tokens);
  DLB_CHECK(tokens.rank() == 2 && tokens.dtype() == DType::i32, "{}: tokens is {}, expected i32[B, T]", op,
            tokens.describe());
  const int64_t B = tokens.dim(0), T = tokens.dim(1);
  reference::check_host(op, "wte", table);
  DLB_CHECK(table.rank() == 2, "{}: the token table is {}, expected [V, C]", op, table.describe());
  const int64_t V = table.dim(0), C = table.dim(1);
  reference::check_host(op, "wpe", positions);
  DLB_CHECK(positions.rank() == 2 && positions.dim(0) >= T && positions.dim(1) == C &&
                positions.dtype() == table.dtype(),
            "{}: the position table is {}, expected {}[>= {}, {}]", op, positions.describe(),
            dtype_name(table.dtype()), T, C);
  reference::check_tensor(op, "out", out, {B, T, C}, table.dtype());
  for (int64_t i = 0; i < B * T; ++i) {
    const int32_t token = tokens.ptr<int32_t>()[i];
    DLB_CHECK(token >= 0 && token < V, "{}: token {} at position {} is outside [0, {})", op, token, i, V);
  }
  return {B, T, C, V, positions.dim(0)};
}

}  // namespace

void ReferenceBackend::embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                                         Tensor& out) {
  const char* op = "embedding_forward";
  const EmbeddingShape s = check_embedding(op, tokens, wte, wpe, out);
  reference::dispatch_float(wte.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const View2<T> token_table(wte, s.C), position_table(wpe, s.C), y(out, s.C);
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t t = 0; t < s.T; ++t) {
        const int64_t row = b * s.T + t, token = tokens.ptr<int32_t>()[row];
        for (int64_t c = 0; c < s.C; ++c)
          y(row, c) = static_cast<T>(double(token_table(token, c)) + double(position_table(t, c)));
      }
  });
}

void ReferenceBackend::embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dwte,
                                          Tensor& dwpe, Accumulate accumulate) {
  const char* op = "embedding_backward";
  const EmbeddingShape s = check_embedding(op, tokens, dwte, dwpe, dout);
  reference::dispatch_float(dwte.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const View2<T> token_grad(dwte, s.C), position_grad(dwpe, s.C), dy(dout, s.C);
    // Sums in double, one per table row, so that a token seen many times loses nothing to rounding.
    std::vector<double> token_sum(static_cast<size_t>(s.V * s.C)),
        position_sum(static_cast<size_t>(s.positions * s.C));
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t t = 0; t < s.T; ++t) {
        const int64_t row = b * s.T + t, token = tokens.ptr<int32_t>()[row];
        for (int64_t c = 0; c < s.C; ++c) {
          token_sum[static_cast<size_t>(token * s.C + c)] += double(dy(row, c));
          position_sum[static_cast<size_t>(t * s.C + c)] += double(dy(row, c));
        }
      }
    // Rows no position touched keep their gradient (add) or become zero (overwrite): store() does both.
    for (int64_t v = 0; v < s.V; ++v)
      for (int64_t c = 0; c < s.C; ++c)
        reference::store(token_grad(v, c), token_sum[static_cast<size_t>(v * s.C + c)], accumulate);
    for (int64_t t = 0; t < s.positions; ++t)
      for (int64_t c = 0; c < s.C; ++c)
        reference::store(position_grad(t, c), position_sum[static_cast<size_t>(t * s.C + c)], accumulate);
  });
}

}  // namespace dlbench
