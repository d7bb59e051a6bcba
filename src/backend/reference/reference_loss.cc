// Softmax cross-entropy against label-smoothed targets, per row n of logits [N, K]:
//   target[j] = (1 - s) * [j == label] + s / K
//   log_softmax[j] = logits[j] - logsumexp(logits)   (logsumexp = max + log(sum(exp(logits - max))), which
//                                                     cannot overflow: the largest exponent is 0)
//   loss = mean over n of -sum_j target[j] * log_softmax[j]
//   dL/dlogits[j] = (softmax[j] - target[j]) / N   (times `scale`, e.g. the loss scale)
#include <cmath>
#include <vector>

#include "backend/reference/reference_backend.h"
#include "backend/reference/reference_common.h"

namespace dlbench {
namespace {

using reference::View2;

// probs and loss are FP32 by the contract; the reference also writes FP64 so gradient checks can be exact.
void check_f32_or_f64(const char* op, const char* name, const Tensor& t, const std::vector<int64_t>& dims) {
  reference::check_host(op, name, t);
  DLB_CHECK(t.dims() == dims && (t.dtype() == DType::f32 || t.dtype() == DType::f64),
            "{}: {} is {}, expected f32[{}]", op, name, t.describe(), fmt::join(dims, ", "));
}

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

template <typename T, typename P>
void forward(const Tensor& logits_t, const Tensor& labels, double smoothing, Tensor& probs_t,
             Tensor& loss_t) {
  const int64_t N = logits_t.dim(0), K = logits_t.dim(1);
  const View2<T> logits(logits_t, K);
  const View2<P> probs(probs_t, K);
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    double max = logits(n, 0);
    for (int64_t j = 1; j < K; ++j) max = std::max(max, double(logits(n, j)));
    double sum_exp = 0;
    for (int64_t j = 0; j < K; ++j) sum_exp += std::exp(double(logits(n, j)) - max);
    const double logsumexp = max + std::log(sum_exp);
    const int32_t label = labels.ptr<int32_t>()[n];
    for (int64_t j = 0; j < K; ++j) {
      const double log_softmax = double(logits(n, j)) - logsumexp;
      probs(n, j) = static_cast<P>(std::exp(log_softmax));
      total -= target(label, j, K, smoothing) * log_softmax;
    }
  }
  loss_t.ptr<P>()[0] = static_cast<P>(total / static_cast<double>(N));
}

template <typename P, typename T>
void backward(const Tensor& probs_t, const Tensor& labels, double smoothing, double scale,
              Tensor& dlogits_t) {
  const int64_t N = probs_t.dim(0), K = probs_t.dim(1);
  const View2<P> probs(probs_t, K);
  const View2<T> dlogits(dlogits_t, K);
  for (int64_t n = 0; n < N; ++n) {
    const int32_t label = labels.ptr<int32_t>()[n];
    for (int64_t j = 0; j < K; ++j)
      dlogits(n, j) = static_cast<T>(scale * (double(probs(n, j)) - target(label, j, K, smoothing)) /
                                     static_cast<double>(N));
  }
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

}  // namespace

void ReferenceBackend::softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels,
                                                     float label_smoothing, Tensor& probs, Tensor& loss) {
  const char* op = "softmax_cross_entropy_forward";
  check_logits(op, "logits", logits);
  check_smoothing(op, label_smoothing);
  check_f32_or_f64(op, "probs", probs, logits.dims());
  check_f32_or_f64(op, "loss", loss, {1});
  DLB_CHECK(probs.dtype() == loss.dtype(), "{}: probs {} and loss {} must share a dtype", op,
            probs.describe(), loss.describe());
  check_labels(op, labels, logits.dim(0), logits.dim(1));
  reference::dispatch_float(logits.dtype(), op, [&](auto logits_tag) {
    reference::dispatch_float(probs.dtype(), op, [&](auto probs_tag) {
      forward<decltype(logits_tag), decltype(probs_tag)>(logits, labels, label_smoothing, probs, loss);
    });
  });
}

void ReferenceBackend::softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels,
                                                      float label_smoothing, float scale, Tensor& dlogits,
                                                      const float* loss_scale) {
  const char* op = "softmax_cross_entropy_backward";
  check_logits(op, "probs", probs);
  check_smoothing(op, label_smoothing);
  check_f32_or_f64(op, "probs", probs, probs.dims());
  check_logits(op, "dlogits", dlogits);
  DLB_CHECK(dlogits.dims() == probs.dims(), "{}: dlogits is {} but probs is {}", op, dlogits.describe(),
            probs.describe());
  check_labels(op, labels, probs.dim(0), probs.dim(1));
  reference::dispatch_float(probs.dtype(), op, [&](auto probs_tag) {
    reference::dispatch_float(dlogits.dtype(), op, [&](auto logits_tag) {
      const double factor = double(scale) * (loss_scale ? double(*loss_scale) : 1.0);
      backward<decltype(probs_tag), decltype(logits_tag)>(probs, labels, label_smoothing, factor, dlogits);
    });
  });
}

}  // namespace dlbench
