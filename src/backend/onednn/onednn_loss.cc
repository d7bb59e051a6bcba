// Softmax cross-entropy against label-smoothed targets over the first V columns of logits [N, K] (V = K,
// or fewer where a vocabulary is padded to a round K: the padded columns are absent, with probability 0
// and gradient 0, so the padded rows of a tied embedding never move). The plain ops are the padded ones
// with V = K. f32 only.
//
// The fused op (the language model's loss) takes the same statistics and writes each row's gradient over
// its logits: exp(z - max - log(sum)) is the probability, so no probabilities are stored.
//
// One row per iteration of an OpenMP loop: the row's maximum, exp(z - max) into probs with the sum in
// double (a 50k-column vocabulary), then probs scaled by 1/sum. With log p_j = z_j - max - log(sum):
//   loss = -((1 - s) log p_label + s/V sum_{j<V} log p_j),  sum_j log p_j = sum_j (z_j - max) - V log(sum)
//   dlogits_j = f (p_j - s/V - (1 - s) [j == label]),  f = scale * loss_scale / N;  0 for j >= V.
#include <algorithm>
#include <cmath>

#include "backend/onednn/onednn_common.h"

namespace dlbench {
namespace onednn {
namespace {

void check_loss_operands(const char* op, const Tensor& scores, const Tensor& labels, int64_t valid_classes,
                         float label_smoothing) {
  DLB_CHECK(scores.rank() == 2 && scores.dim(0) > 0 && scores.dim(1) > 0,
            "{}: {} is not a non-empty [N, K] matrix", op, scores.describe());
  DLB_CHECK(labels.dtype() == DType::i32 && labels.numel() == scores.dim(0),
            "{}: labels are {}, expected i32[{}]", op, labels.describe(), scores.dim(0));
  DLB_CHECK(valid_classes >= 1 && valid_classes <= scores.dim(1), "{}: valid_classes {} is outside [1, {}]",
            op, valid_classes, scores.dim(1));
  DLB_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "{}: label_smoothing {} is outside [0, 1]", op,
            label_smoothing);
}

}  // namespace

void OneDnnBackend::softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels,
                                                  float label_smoothing, Tensor& probs, Tensor& loss) {
  DLB_CHECK(logits.rank() == 2, "softmax_cross_entropy_forward: logits {} are not [N, K]", logits.describe());
  softmax_cross_entropy_padded_forward(logits, labels, logits.dim(1), label_smoothing, probs, loss);
}

void OneDnnBackend::softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels,
                                                   float label_smoothing, float scale, Tensor& dlogits,
                                                   const float* loss_scale) {
  DLB_CHECK(probs.rank() == 2, "softmax_cross_entropy_backward: probs {} are not [N, K]", probs.describe());
  softmax_cross_entropy_padded_backward(probs, labels, probs.dim(1), label_smoothing, scale, dlogits,
                                        loss_scale);
}

void OneDnnBackend::softmax_cross_entropy_padded_forward(const Tensor& logits, const Tensor& labels,
                                                         int64_t valid_classes, float label_smoothing,
                                                         Tensor& probs, Tensor& loss) {
  const char* op = "softmax_cross_entropy_forward";
  require_f32(logits, op, "logits");
  require_f32(probs, op, "probs");
  require_f32(loss, op, "loss");
  check_loss_operands(op, logits, labels, valid_classes, label_smoothing);
  DLB_CHECK(probs.dims() == logits.dims() && loss.numel() >= 1, "{}: logits {} probs {} loss {}", op,
            logits.describe(), probs.describe(), loss.describe());
  const int64_t rows = logits.dim(0), classes = logits.dim(1), V = valid_classes;
  const float* in = logits.ptr<float>();
  const int32_t* lab = labels.ptr<int32_t>();
  float* out = probs.ptr<float>();
  const double s = label_smoothing, off = s / static_cast<double>(V);
  double total = 0;
  bool bad_label = false;
#pragma omp parallel for schedule(static) num_threads(threads_) reduction(+ : total) reduction(|| : bad_label) if (rows * classes > kParallelThreshold)
  for (int64_t r = 0; r < rows; ++r) {
    const float* z = in + r * classes;
    float* p = out + r * classes;
    const float zmax = max_of(z, V);
    double sum = 0, sum_z = 0;
#pragma omp simd reduction(+ : sum, sum_z)
    for (int64_t k = 0; k < V; ++k) {
      const float e = exp_for_simd(z[k] - zmax);
      p[k] = e;
      sum += e;
      sum_z += z[k] - zmax;
    }
    const float inv = static_cast<float>(1.0 / sum);
#pragma omp simd
    for (int64_t k = 0; k < V; ++k) p[k] *= inv;
    std::fill(p + V, p + classes, 0.f);
    const int32_t label = lab[r];
    if (label < 0 || label >= V) {
      bad_label = true;
      continue;
    }
    const double log_sum = std::log(sum);
    const double log_p_label = z[label] - zmax - log_sum;
    const double sum_log_p = sum_z - static_cast<double>(V) * log_sum;
    total += -((1.0 - s) * log_p_label + off * sum_log_p);
  }
  DLB_CHECK(!bad_label, "{}: a label is outside [0, {})", op, V);
  loss.ptr<float>()[0] = static_cast<float>(total / static_cast<double>(rows));
}

void OneDnnBackend::softmax_cross_entropy_padded_backward(const Tensor& probs, const Tensor& labels,
                                                          int64_t valid_classes, float label_smoothing,
                                                          float scale, Tensor& dlogits,
                                                          const float* loss_scale) {
  const char* op = "softmax_cross_entropy_backward";
  require_f32(probs, op, "probs");
  require_f32(dlogits, op, "dlogits");
  check_loss_operands(op, probs, labels, valid_classes, label_smoothing);
  DLB_CHECK(dlogits.dims() == probs.dims(), "{}: dlogits {} and probs {} differ", op, dlogits.describe(),
            probs.describe());
  const int64_t rows = probs.dim(0), classes = probs.dim(1), V = valid_classes;
  const float* p = probs.ptr<float>();
  const int32_t* lab = labels.ptr<int32_t>();
  float* d = dlogits.ptr<float>();
  const float f = scale * (loss_scale ? *loss_scale : 1.f) / static_cast<float>(rows);
  const float off = label_smoothing / static_cast<float>(V), on = 1.f - label_smoothing + off;
  bool bad_label = false;
#pragma omp parallel for schedule(static) num_threads(threads_) \
    reduction(||                                                \
              : bad_label) if (rows * classes > kParallelThreshold)
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t label = lab[r];
    if (label < 0 || label >= V) {
      bad_label = true;
      continue;
    }
    const float* pr = p + r * classes;
    float* dr = d + r * classes;
#pragma omp simd
    for (int64_t k = 0; k < V; ++k) dr[k] = f * (pr[k] - off);
    dr[label] = f * (pr[label] - on);
    std::fill(dr + V, dr + classes, 0.f);
  }
  DLB_CHECK(!bad_label, "{}: a label is outside [0, {})", op, V);
}

void OneDnnBackend::softmax_cross_entropy_fused(Tensor& logits, const Tensor& labels, int64_t valid_classes,
                                                float label_smoothing, Tensor& row_loss, Tensor& loss,
                                                std::optional<float> gradient_scale,
                                                const float* loss_scale) {
  const char* op = "softmax_cross_entropy_fused";
  require_f32(logits, op, "logits");
  require_f32(row_loss, op, "row_loss");
  require_f32(loss, op, "loss");
  check_loss_operands(op, logits, labels, valid_classes, label_smoothing);
  DLB_CHECK(row_loss.numel() == logits.dim(0) && loss.numel() >= 1, "{}: logits {} row_loss {} loss {}", op,
            logits.describe(), row_loss.describe(), loss.describe());
  const int64_t rows = logits.dim(0), classes = logits.dim(1), V = valid_classes;
  float* z_all = logits.ptr<float>();
  const int32_t* lab = labels.ptr<int32_t>();
  float* row_out = row_loss.ptr<float>();
  const double s = label_smoothing, off = s / static_cast<double>(V);
  const float f =
      gradient_scale ? *gradient_scale * (loss_scale ? *loss_scale : 1.f) / static_cast<float>(rows) : 0.f;
  const float goff = static_cast<float>(off), gon = static_cast<float>(1.0 - s + off);
  double total = 0;
  bool bad_label = false;
#pragma omp parallel for schedule(static) num_threads(threads_) reduction(+ : total) reduction(|| : bad_label) if (rows * classes > kParallelThreshold)
  for (int64_t r = 0; r < rows; ++r) {
    float* z = z_all + r * classes;
    const int32_t label = lab[r];
    if (label < 0 || label >= V) {
      bad_label = true;
      continue;
    }
    const float zmax = max_of(z, V);
    double sum = 0, sum_z = 0;
#pragma omp simd reduction(+ : sum, sum_z)
    for (int64_t k = 0; k < V; ++k) {
      sum += exp_for_simd(z[k] - zmax);
      sum_z += z[k] - zmax;
    }
    const double log_sum = std::log(sum);
    const double row =
        -((1.0 - s) * (z[label] - zmax - log_sum) + off * (sum_z - static_cast<double>(V) * log_sum));
    row_out[r] = static_cast<float>(row);
    total += row;
    if (!gradient_scale) continue;
    // Each element is read, then its gradient written in its place; the label's column last.
    const float shift = zmax + static_cast<float>(log_sum), z_label = z[label];
#pragma omp simd
    for (int64_t k = 0; k < V; ++k) z[k] = f * (exp_for_simd(z[k] - shift) - goff);
    z[label] = f * (exp_for_simd(z_label - shift) - gon);
    std::fill(z + V, z + classes, 0.f);
  }
  DLB_CHECK(!bad_label, "{}: a label is outside [0, {})", op, V);
  loss.ptr<float>()[0] = static_cast<float>(total / static_cast<double>(rows));
}

}  // namespace onednn
}  // namespace dlbench
