// Softmax cross-entropy against label-smoothed targets, per row n of logits [N, K] whose first V columns
// are classes (V = K, or fewer where the vocabulary is padded to a round K: the rest are absent):
//   target[j] = (1 - s) * [j == label] + s / V
//   log_softmax[j] = logits[j] - logsumexp(logits[0..V))   (logsumexp = max + log(sum(exp(logits - max))),
//                                                          which cannot overflow: the largest exponent is 0)
//   loss = mean over n of -sum_{j < V} target[j] * log_softmax[j]
//   dL/dlogits[j] = (softmax[j] - target[j]) / N   (times `scale`, e.g. the loss scale); 0 for j >= V
// A padded column is absent, not merely unlikely: probability 0 (not exp(logit) of whatever it holds) and
// gradient 0, so the padded rows of a tied embedding never move.
#include <cmath>
#include <optional>
#include <vector>

#include "backend/reference/reference_backend.h"
#include "backend/reference/reference_common.h"

namespace dlbench {
namespace {

using reference::check_f32_or_f64;
using reference::View2;

void check_labels(const char* op, const Tensor& labels, int64_t rows, int64_t classes) {
  reference::check_tensor(op, "labels", labels, {rows}, DType::i32);
  for (int64_t n = 0; n < rows; ++n) {
    const int32_t label = labels.ptr<int32_t>()[n];
    DLB_CHECK(label >= 0 && label < classes, "{}: label {} of row {} is outside [0, {})", op, label, n,
              classes);
  }
}

double target(int32_t label, int64_t j, int64_t classes, double smoothing) {
  return (1 - smoothing) * (j == label ? 1.0 : 0.0) + smoothing / static_cast<double>(classes);
}

// logsumexp over the first V columns of row n: max + log(sum(exp(logits - max))).
template <typename T>
double row_logsumexp(const View2<T>& logits, int64_t n, int64_t V) {
  double max = logits(n, 0);
  for (int64_t j = 1; j < V; ++j) max = std::max(max, double(logits(n, j)));
  double sum_exp = 0;
  for (int64_t j = 0; j < V; ++j) sum_exp += std::exp(double(logits(n, j)) - max);
  return max + std::log(sum_exp);
}

template <typename T, typename P>
void forward(const Tensor& logits_t, const Tensor& labels, int64_t V, double smoothing, Tensor& probs_t,
             Tensor& loss_t) {
  const int64_t N = logits_t.dim(0), K = logits_t.dim(1);
  const View2<T> logits(logits_t, K);
  const View2<P> probs(probs_t, K);
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    const double logsumexp = row_logsumexp(logits, n, V);
    const int32_t label = labels.ptr<int32_t>()[n];
    for (int64_t j = 0; j < V; ++j) {
      const double log_softmax = double(logits(n, j)) - logsumexp;
      probs(n, j) = static_cast<P>(std::exp(log_softmax));
      total -= target(label, j, V, smoothing) * log_softmax;
    }
    for (int64_t j = V; j < K; ++j) probs(n, j) = P(0);
  }
  loss_t.ptr<P>()[0] = static_cast<P>(total / static_cast<double>(N));
}

template <typename P, typename T>
void backward(const Tensor& probs_t, const Tensor& labels, int64_t V, double smoothing, double scale,
              Tensor& dlogits_t) {
  const int64_t N = probs_t.dim(0), K = probs_t.dim(1);
  const View2<P> probs(probs_t, K);
  const View2<T> dlogits(dlogits_t, K);
  for (int64_t n = 0; n < N; ++n) {
    const int32_t label = labels.ptr<int32_t>()[n];
    for (int64_t j = 0; j < V; ++j)
      dlogits(n, j) = static_cast<T>(scale * (double(probs(n, j)) - target(label, j, V, smoothing)) /
                                     static_cast<double>(N));
    for (int64_t j = V; j < K; ++j) dlogits(n, j) = T(0);
  }
}

// The fused op: per row, the statistics from the logits, the row's loss, then its gradient over the row.
template <typename T>
void fused(Tensor& logits_t, const Tensor& labels, int64_t V, double smoothing, Tensor& row_loss_t,
           Tensor& loss_t, std::optional<double> factor) {
  const int64_t N = logits_t.dim(0), K = logits_t.dim(1);
  const View2<T> logits(logits_t, K);
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    const double logsumexp = row_logsumexp(logits, n, V);
    const int32_t label = labels.ptr<int32_t>()[n];
    double row = 0;
    for (int64_t j = 0; j < V; ++j)
      row -= target(label, j, V, smoothing) * (double(logits(n, j)) - logsumexp);
    row_loss_t.ptr<float>()[n] = static_cast<float>(row);
    total += row;
    if (!factor) continue;
    for (int64_t j = 0; j < V; ++j)
      logits(n, j) = static_cast<T>(
          *factor * (std::exp(double(logits(n, j)) - logsumexp) - target(label, j, V, smoothing)) /
          static_cast<double>(N));
    for (int64_t j = V; j < K; ++j) logits(n, j) = T(0);
  }
  if (loss_t.dtype() == DType::f64)
    loss_t.ptr<double>()[0] = total / static_cast<double>(N);
  else
    loss_t.ptr<float>()[0] = static_cast<float>(total / static_cast<double>(N));
}

void check_logits(const char* op, const char* name, const Tensor& t) {
  reference::check_host(op, name, t);
  DLB_CHECK(t.rank() == 2 && t.dim(0) > 0 && t.dim(1) > 0, "{}: {} is {}, expected a non-empty [N, K] matrix",
            op, name, t.describe());
}

void check_smoothing(const char* op, float label_smoothing) {
  DLB_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "{}: label_smoothing {} is outside [0, 1]", op,
            label_smoothing);
}

void check_valid_classes(const char* op, int64_t valid_classes, const Tensor& t) {
  DLB_CHECK(valid_classes >= 1 && valid_classes <= t.dim(1), "{}: valid_classes {} is outside [1, {}]", op,
            valid_classes, t.dim(1));
}

}  // namespace

void ReferenceBackend::softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels,
                                                     float label_smoothing, Tensor& probs, Tensor& loss) {
  check_logits("softmax_cross_entropy_forward", "logits", logits);
  softmax_cross_entropy_padded_forward(logits, labels, logits.dim(1), label_smoothing, probs, loss);
}

void ReferenceBackend::softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels,
                                                      float label_smoothing, float scale, Tensor& dlogits,
                                                      const float* loss_scale) {
  check_logits("softmax_cross_entropy_backward", "probs", probs);
  softmax_cross_entropy_padded_backward(probs, labels, probs.dim(1), label_smoothing, scale, dlogits,
                                        loss_scale);
}

void ReferenceBackend::softmax_cross_entropy_padded_forward(const Tensor& logits, const Tensor& labels,
                                                            int64_t valid_classes, float label_smoothing,
                                                            Tensor& probs, Tensor& loss) {
  const char* op = "softmax_cross_entropy_forward";
  check_logits(op, "logits", logits);
  check_valid_classes(op, valid_classes, logits);
  check_smoothing(op, label_smoothing);
  check_f32_or_f64(op, "probs", probs, logits.dims());
  check_f32_or_f64(op, "loss", loss, {1});
  DLB_CHECK(probs.dtype() == loss.dtype(), "{}: probs {} and loss {} must share a dtype", op,
            probs.describe(), loss.describe());
  check_labels(op, labels, logits.dim(0), valid_classes);
  reference::dispatch_float(logits.dtype(), op, [&](auto logits_tag) {
    reference::dispatch_float(probs.dtype(), op, [&](auto probs_tag) {
      forward<decltype(logits_tag), decltype(probs_tag)>(logits, labels, valid_classes, label_smoothing,
                                                         probs, loss);
    });
  });
}

void ReferenceBackend::softmax_cross_entropy_padded_backward(const Tensor& probs, const Tensor& labels,
                                                             int64_t valid_classes, float label_smoothing,
                                                             float scale, Tensor& dlogits,
                                                             const float* loss_scale) {
  const char* op = "softmax_cross_entropy_backward";
  check_logits(op, "probs", probs);
  check_valid_classes(op, valid_classes, probs);
  check_smoothing(op, label_smoothing);
  check_f32_or_f64(op, "probs", probs, probs.dims());
  check_logits(op, "dlogits", dlogits);
  DLB_CHECK(dlogits.dims() == probs.dims(), "{}: dlogits is {} but probs is {}", op, dlogits.describe(),
            probs.describe());
  check_labels(op, labels, probs.dim(0), valid_classes);
  reference::dispatch_float(probs.dtype(), op, [&](auto probs_tag) {
    reference::dispatch_float(dlogits.dtype(), op, [&](auto logits_tag) {
      const double factor = double(scale) * (loss_scale ? double(*loss_scale) : 1.0);
      backward<decltype(probs_tag), decltype(logits_tag)>(probs, labels, valid_classes, label_smoothing,
                                                          factor, dlogits);
    });
  });
}

void ReferenceBackend::softmax_cross_entropy_fused(Tensor& logits, const Tensor& labels,
                                                   int64_t valid_classes, float label_smoothing,
                                                   Tensor& row_loss, Tensor& loss,
                                                   std::optional<float> gradient_scale,
                                                   const float* loss_scale) {
  const char* op = "softmax_cross_entropy_fused";
  check_logits(op, "logits", logits);
  check_valid_classes(op, valid_classes, logits);
  check_smoothing(op, label_smoothing);
  reference::check_tensor(op, "row_loss", row_loss, {logits.dim(0)}, DType::f32);
  check_f32_or_f64(op, "loss", loss, {1});
  check_labels(op, labels, logits.dim(0), valid_classes);
  std::optional<double> factor;
  if (gradient_scale) factor = double(*gradient_scale) * (loss_scale ? double(*loss_scale) : 1.0);
  reference::dispatch_float(logits.dtype(), op, [&](auto tag) {
    fused<decltype(tag)>(logits, labels, valid_classes, label_smoothing, row_loss, loss, factor);
  });
}

}  // namespace dlbench
