// Causal multi-head self-attention, per batch b and head h (d = C / heads features, scale = 1/sqrt(d)):
//   s[t, j] = scale * q[t] . k[j]  for j <= t (later positions are masked out: a token sees only its past)
//   lse[t] = log sum_{j <= t} exp(s[t, j]),  p[t, j] = exp(s[t, j] - lse[t])   (the softmax of row t)
//   out[t] = sum_{j <= t} p[t, j] v[j]
// The forward saves lse (cuDNN's SDPA "Stats"), one float per row, rather than the [T, T] probabilities:
// p is exactly exp(s - lse), so the backward rebuilds it from q and k, as flash attention does. The
// backward, with D[t] = dout[t] . out[t] (= sum_j p[t, j] dp[t, j]):
//   dv[j] += p[t, j] dout[t],  dp[t, j] = dout[t] . v[j],  ds[t, j] = p[t, j] (dp[t, j] - D[t])
//   dq[t] += scale ds[t, j] k[j],  dk[j] += scale ds[t, j] q[t].
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/reference/reference_backend.h"
#include "backend/reference/reference_common.h"

namespace dlbench {
namespace {

struct AttentionShape {
  int64_t B, T, C, heads, d;
};

// qkv [B, T, 3C] with q, k, v side by side in each row, and head h at columns [h * d, (h + 1) * d) of
// each: element i of head h's query, key or value at (b, t). Also views dqkv, and its sums in double.
template <typename T>
class Heads {
 public:
  Heads(T* data, const AttentionShape& s) : data_(data), s_(s) {}
  T& q(int64_t b, int64_t t, int64_t h, int64_t i) const { return at(b, t, 0, h, i); }
  T& k(int64_t b, int64_t t, int64_t h, int64_t i) const { return at(b, t, 1, h, i); }
  T& v(int64_t b, int64_t t, int64_t h, int64_t i) const { return at(b, t, 2, h, i); }

 private:
  T& at(int64_t b, int64_t t, int64_t part, int64_t h, int64_t i) const {
    return data_[(b * s_.T + t) * 3 * s_.C + part * s_.C + h * s_.d + i];
  }
  T* data_;
  AttentionShape s_;
};

AttentionShape check_attention(const char* op, const Tensor& qkv, int64_t heads, const Tensor& out,
                               const Tensor& stats) {
  reference::check_host(op, "qkv", qkv);
  DLB_CHECK(qkv.rank() == 3 && qkv.dim(2) % 3 == 0 && qkv.dim(2) > 0, "{}: qkv is {}, expected [B, T, 3C]",
            op, qkv.describe());
  const int64_t B = qkv.dim(0), T = qkv.dim(1), C = qkv.dim(2) / 3;
  DLB_CHECK(heads > 0 && C % heads == 0, "{}: {} heads do not divide C = {}", op, heads, C);
  reference::check_tensor(op, "out", out, {B, T, C}, qkv.dtype());
  reference::check_f32_or_f64(op, "stats", stats, {B, heads, T});
  return {B, T, C, heads, C / heads};
}

// Index of (b, h, t) in stats [B, heads, T].
int64_t row(const AttentionShape& s, int64_t b, int64_t h, int64_t t) { return (b * s.heads + h) * s.T + t; }

template <typename T>
double score(const Heads<T>& x, const AttentionShape& s, int64_t b, int64_t h, int64_t t, int64_t j) {
  double dot = 0;
  for (int64_t i = 0; i < s.d; ++i) dot += double(x.q(b, t, h, i)) * double(x.k(b, j, h, i));
  return dot / std::sqrt(double(s.d));
}

template <typename T>
void forward(const Tensor& qkv, const AttentionShape& s, Tensor& out_t, std::vector<double>& lse) {
  const Heads<T> x(qkv.ptr<T>(), s);
  const reference::View2<T> out(out_t, s.C);
  std::vector<double> scores(static_cast<size_t>(s.T));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t t = 0; t < s.T; ++t) {
        double max = -INFINITY;
        for (int64_t j = 0; j <= t; ++j) {
          scores[static_cast<size_t>(j)] = score(x, s, b, h, t, j);
          max = std::max(max, scores[static_cast<size_t>(j)]);
        }
        double sum_exp = 0;  // around the maximum, so that no exponent overflows
        for (int64_t j = 0; j <= t; ++j) sum_exp += std::exp(scores[static_cast<size_t>(j)] - max);
        const double log_sum_exp = max + std::log(sum_exp);
        for (int64_t i = 0; i < s.d; ++i) {
          double value = 0;
          for (int64_t j = 0; j <= t; ++j)
            value += std::exp(scores[static_cast<size_t>(j)] - log_sum_exp) * double(x.v(b, j, h, i));
          out(b * s.T + t, h * s.d + i) = static_cast<T>(value);
        }
        lse[static_cast<size_t>(row(s, b, h, t))] = log_sum_exp;
      }
}

template <typename T>
void backward(const Tensor& qkv, const Tensor& out_t, const std::vector<double>& lse, const Tensor& dout_t,
              const AttentionShape& s, Tensor& dqkv) {
  const Heads<T> x(qkv.ptr<T>(), s);
  const reference::View2<T> out(out_t, s.C), dout(dout_t, s.C);
  // Gradients summed in double over every (t, j) pair, then stored once.
  std::vector<double> sums(static_cast<size_t>(qkv.numel()));
  const Heads<double> grad(sums.data(), s);
  const double scale = 1 / std::sqrt(double(s.d));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t t = 0; t < s.T; ++t) {
        const int64_t r = b * s.T + t;
        double D = 0;
        for (int64_t i = 0; i < s.d; ++i) D += double(dout(r, h * s.d + i)) * double(out(r, h * s.d + i));
        for (int64_t j = 0; j <= t; ++j) {
          const double p = std::exp(score(x, s, b, h, t, j) - lse[static_cast<size_t>(row(s, b, h, t))]);
          double dp = 0;
          for (int64_t i = 0; i < s.d; ++i) {
            dp += double(dout(r, h * s.d + i)) * double(x.v(b, j, h, i));
            grad.v(b, j, h, i) += p * double(dout(r, h * s.d + i));
          }
          const double ds = p * (dp - D);
          for (int64_t i = 0; i < s.d; ++i) {
            grad.q(b, t, h, i) += scale * ds * double(x.k(b, j, h, i));
            grad.k(b, j, h, i) += scale * ds * double(x.q(b, t, h, i));
          }
        }
      }
  for (int64_t i = 0; i < dqkv.numel(); ++i) dqkv.ptr<T>()[i] = static_cast<T>(sums[static_cast<size_t>(i)]);
}

}  // namespace

void ReferenceBackend::attention_forward(const Tensor& qkv, int64_t heads, Tensor& out, Tensor& stats) {
  const char* op = "attention_forward";
  const AttentionShape s = check_attention(op, qkv, heads, out, stats);
  std::vector<double> lse(static_cast<size_t>(stats.numel()));
  reference::dispatch_float(qkv.dtype(), op, [&](auto tag) { forward<decltype(tag)>(qkv, s, out, lse); });
  reference::write_channels(stats, lse);
}

void ReferenceBackend::attention_backward(const Tensor& qkv, const Tensor& out, const Tensor& stats,
                                          const Tensor& dout, int64_t heads, Tensor& dqkv) {
  const char* op = "attention_backward";
  const AttentionShape s = check_attention(op, qkv, heads, out, stats);
  reference::check_same(op, "out", out, "dout", dout);
  reference::check_same(op, "qkv", qkv, "dqkv", dqkv);
  reference::dispatch_float(qkv.dtype(), op, [&](auto tag) {
    backward<decltype(tag)>(qkv, out, reference::read_channels(stats), dout, s, dqkv);
  });
}

}  // namespace dlbench
