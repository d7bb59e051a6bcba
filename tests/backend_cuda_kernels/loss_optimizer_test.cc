// dlbench's own CUDA kernels: softmax cross-entropy (forward and backward, with and without label
// smoothing) and the fused SGD update, against the reference backend and host computations in double.
#include <gtest/gtest.h>

#ifdef DLBENCH_WITH_CUDA

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/reference/reference_backend.h"
#include "core/status.h"
#include "cuda_kernels_test_util.h"

namespace dlbench {
namespace {

using testing::DeviceBuffer;
using testing::float_dtypes;
using testing::get;
using testing::max_relative_error;
using testing::random_values;
using testing::rounded;
using testing::set;
using testing::tolerance;
using testing::values;

class CudaLoss : public testing::CudaKernelTest {};
class CudaSgd : public testing::CudaKernelTest {};

struct LossShape {
  int64_t n, k;
};
// Warp-per-row (k <= 256) and block-per-row kernels; k = 1; n past the 2048 rows the finalising block
// takes per pass.
const std::vector<LossShape>& loss_shapes() {
  static const std::vector<LossShape> shapes = {{1, 1},   {1, 7},     {7, 10},    {33, 1000}, {1023, 7},
                                                {5, 257}, {64, 1500}, {4097, 10}, {3000, 3},  {256, 1000}};
  return shapes;
}

HostBuffer random_labels(int64_t n, int64_t k, uint64_t seed) {
  HostBuffer labels({n}, DType::i32);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, k - 1);
  for (int64_t i = 0; i < n; ++i) labels.ptr<int32_t>()[i] = static_cast<int32_t>(dist(rng));
  return labels;
}

// probs and the mean loss in double, from the (already rounded) logits.
void host_forward(const HostBuffer& logits, const HostBuffer& labels, int64_t n, int64_t k, double s,
                  std::vector<double>& probs, double& loss) {
  probs.assign(static_cast<size_t>(n * k), 0.0);
  double total = 0;
  for (int64_t r = 0; r < n; ++r) {
    double m = -INFINITY;
    for (int64_t j = 0; j < k; ++j) m = std::max(m, get(logits, r * k + j));
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += std::exp(get(logits, r * k + j) - m);
    const double lse = m + std::log(sum);
    const int32_t label = labels.ptr<int32_t>()[r];
    for (int64_t j = 0; j < k; ++j) {
      const double log_softmax = get(logits, r * k + j) - lse;
      probs[r * k + j] = std::exp(log_softmax);
      total -= ((1 - s) * (j == label) + s / double(k)) * log_softmax;
    }
  }
  loss = total / double(n);
}

TEST_F(CudaLoss, ForwardMatchesHostAndReference) {
  for (DType dtype : float_dtypes()) {
    for (const LossShape& shape : loss_shapes()) {
      for (float smoothing : {0.f, 0.1f, 1.f}) {
        for (double shift : {0.0, 1000.0}) {  // large logits: the max subtraction keeps exp finite
          const int64_t n = shape.n, k = shape.k;
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " n=" + std::to_string(n) +
                       " k=" + std::to_string(k) + " smoothing=" + std::to_string(smoothing) +
                       " shift=" + std::to_string(shift));
          HostBuffer logits = random_values(n * k, dtype, 11 + n + k, shift - 5, shift + 5);
          HostBuffer labels = random_labels(n, k, 12 + n);
          DeviceBuffer dlogits(n * k * dtype_size(dtype)), dlabels(n * 4), dprobs(n * k * 4), dloss(4);
          dlogits.upload(logits);
          dlabels.upload(labels);
          cuda::softmax_cross_entropy_forward(dlogits.get(), dtype, dlabels.as<int32_t>(), n, k, smoothing,
                                              dprobs.as<float>(), dloss.as<float>(), stream_);
          sync();
          HostBuffer probs({n, k}, DType::f32), loss({1}, DType::f32);
          dprobs.download(probs);
          dloss.download(loss);

          std::vector<double> expected_probs;
          double expected_loss = 0;
          host_forward(logits, labels, n, k, smoothing, expected_probs, expected_loss);
          EXPECT_LE(max_relative_error(values(probs), expected_probs), 2e-5);
          EXPECT_LE(std::abs(get(loss, 0) - expected_loss), 2e-5 * std::max(1.0, std::abs(expected_loss)))
              << get(loss, 0) << " vs " << expected_loss;

          if (dtype == DType::f32) {  // the oracle itself
            ReferenceBackend reference;
            HostBuffer ref_probs({n, k}, DType::f32), ref_loss({1}, DType::f32);
            reference.softmax_cross_entropy_forward(logits.tensor().reshaped({n, k}), labels.tensor(),
                                                    smoothing, ref_probs.tensor(), ref_loss.tensor());
            EXPECT_LE(max_relative_error(values(probs), values(ref_probs)), 2e-5);
            EXPECT_NEAR(get(loss, 0), get(ref_loss, 0), 2e-5 * std::max(1.0, std::abs(get(ref_loss, 0))));
          }

          // Deterministic: the same inputs give the same bits.
          cuda::softmax_cross_entropy_forward(dlogits.get(), dtype, dlabels.as<int32_t>(), n, k, smoothing,
                                              dprobs.as<float>(), dloss.as<float>(), stream_);
          sync();
          HostBuffer probs2({n, k}, DType::f32), loss2({1}, DType::f32);
          dprobs.download(probs2);
          dloss.download(loss2);
          EXPECT_EQ(std::memcmp(probs.tensor().data(), probs2.tensor().data(), probs.tensor().bytes()), 0);
          EXPECT_EQ(std::memcmp(loss.tensor().data(), loss2.tensor().data(), 4), 0);
        }
      }
    }
  }
}

TEST_F(CudaLoss, BackwardMatchesHostAndReference) {
  const std::vector<LossShape> shapes = {{1, 1},  {3, 1},     {5, 2},    {7, 3},
                                         {9, 10}, {33, 1000}, {1023, 7}, {4097, 10}};
  for (DType dtype : float_dtypes()) {
    for (const LossShape& shape : shapes) {
      for (float smoothing : {0.f, 0.1f}) {
        for (size_t offset : {size_t{0}, dtype_size(dtype)}) {
          const int64_t n = shape.n, k = shape.k;
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " n=" + std::to_string(n) +
                       " k=" + std::to_string(k) + " smoothing=" + std::to_string(smoothing) +
                       " offset=" + std::to_string(offset));
          const float scale = 128.f;  // a loss scale
          HostBuffer probs = random_values(n * k, DType::f32, 21 + n, 0, 1);
          HostBuffer labels = random_labels(n, k, 22 + k);
          DeviceBuffer dprobs(n * k * 4), dlabels(n * 4), dd(n * k * dtype_size(dtype), offset);
          dprobs.upload(probs);
          dlabels.upload(labels);
          cuda::softmax_cross_entropy_backward(dprobs.as<float>(), dlabels.as<int32_t>(), n, k, smoothing,
                                               scale, nullptr, dd.get(), dtype, stream_);
          sync();
          HostBuffer dlogits({n * k}, dtype);
          dd.download(dlogits);
          std::vector<double> expected(static_cast<size_t>(n * k));
          for (int64_t r = 0; r < n; ++r) {
            for (int64_t j = 0; j < k; ++j) {
              const double target =
                  (1 - double(smoothing)) * (j == labels.ptr<int32_t>()[r]) + smoothing / double(k);
              expected[r * k + j] = rounded(scale * (get(probs, r * k + j) - target) / double(n), dtype);
            }
          }
          // f32 arithmetic: a few roundings of f32 whatever the output dtype.
          EXPECT_LE(max_relative_error(values(dlogits), expected), std::max(tolerance(dtype), 1e-6));
          if (dtype == DType::f32) {
            ReferenceBackend reference;
            HostBuffer ref({n, k}, DType::f32);
            reference.softmax_cross_entropy_backward(probs.tensor().reshaped({n, k}), labels.tensor(),
                                                     smoothing, scale, ref.tensor());
            EXPECT_LE(max_relative_error(values(dlogits), values(ref)), 1e-6);
          }
        }
      }
    }
  }
}

TEST_F(CudaLoss, RejectsBadArguments) {
  DeviceBuffer x(64);
  EXPECT_THROW(cuda::softmax_cross_entropy_forward(x.get(), DType::f32, x.as<int32_t>(), 0, 10, 0.f,
                                                   x.as<float>(), x.as<float>(), stream_),
               Error);
  EXPECT_THROW(cuda::softmax_cross_entropy_backward(x.as<float>(), x.as<int32_t>(), 1, 1, 1.5f, 1.f, nullptr,
                                                    x.get(), DType::f32, stream_),
               Error);
}

// ---- SGD ----

struct Layout1 {
  std::vector<ParamSegment> segments;
  int64_t total = 0;
};

// Segments of assorted sizes (not multiples of 4) with gaps between some, listed out of offset order;
// decay alternates (BN and bias segments do not decay).
Layout1 make_segments() {
  const int64_t counts[] = {1, 7, 1023, 65537, 5, 64, 2048, 300001, 3, 256};
  const int64_t gaps[] = {0, 1, 0, 2, 0, 3, 0, 1, 0, 5};
  Layout1 layout;
  int64_t offset = 0;
  for (size_t i = 0; i < std::size(counts); ++i) {
    offset += gaps[i];
    layout.segments.push_back({offset, counts[i], i % 3 != 1});
    offset += counts[i];
  }
  layout.total = offset + 3;  // a gap at the end too
  std::mt19937_64 rng(5);
  std::shuffle(layout.segments.begin(), layout.segments.end(), rng);
  return layout;
}

TEST_F(CudaSgd, MatchesTheReferenceBitForBitOverSeveralSteps) {
  const Layout1 layout = make_segments();
  const int64_t total = layout.total;
  SgdStep plain;
  plain.lr = 0.1f, plain.momentum = 0.9f, plain.weight_decay = 5e-4f, plain.nesterov = false,
  plain.grad_scale = 1.f / 128;
  SgdStep nesterov;
  nesterov.lr = 0.05f, nesterov.momentum = 0.9f, nesterov.weight_decay = 1e-4f, nesterov.nesterov = true,
  nesterov.grad_scale = 1.f;
  SgdStep no_momentum;
  no_momentum.lr = 0.2f, no_momentum.momentum = 0.f, no_momentum.weight_decay = 0.f,
  no_momentum.nesterov = false, no_momentum.grad_scale = 0.5f;
  for (const SgdStep& step : {plain, nesterov, no_momentum}) {
    for (size_t offset : {size_t{0}, size_t{4}}) {  // 16-byte aligned (vectors) and misaligned (elements)
      SCOPED_TRACE("momentum=" + std::to_string(step.momentum) +
                   " nesterov=" + std::to_string(step.nesterov) +
                   " decay=" + std::to_string(step.weight_decay) + " offset=" + std::to_string(offset));
      HostBuffer params = random_values(total, DType::f32, 31),
                 momentum = random_values(total, DType::f32, 32, -0.1, 0.1);
      DeviceBuffer dp(total * 4, offset), dg(total * 4, offset), dv(total * 4, offset);
      DeviceBuffer dseg(layout.segments.size() * sizeof(ParamSegment));
      dp.upload(params);
      dv.upload(momentum);
      dseg.upload(layout.segments.data(), layout.segments.size() * sizeof(ParamSegment));
      ReferenceBackend reference;
      for (int iteration = 0; iteration < 3; ++iteration) {
        HostBuffer grads = random_values(total, DType::f32, 40 + iteration, -10, 10);
        dg.upload(grads);
        cuda::sgd_update(dp.as<float>(), dg.as<float>(), dv.as<float>(), dseg.as<ParamSegment>(),
                         static_cast<int>(layout.segments.size()), step, nullptr, {}, stream_);
        reference.sgd_update(params.tensor(), grads.tensor(), momentum.tensor(), layout.segments, step);
      }
      sync();
      HostBuffer p({total}, DType::f32), v({total}, DType::f32);
      dp.download(p);
      dv.download(v);
      EXPECT_LE(max_relative_error(values(p), values(params)), 1e-6);
      EXPECT_LE(max_relative_error(values(v), values(momentum)), 1e-6);
      // The kernel mirrors the reference's f64 arithmetic operation by operation: the bits agree.
      int64_t differing = 0;
      for (int64_t i = 0; i < total; ++i)
        differing +=
            p.ptr<float>()[i] != params.ptr<float>()[i] || v.ptr<float>()[i] != momentum.ptr<float>()[i];
      EXPECT_EQ(differing, 0);
    }
  }
}

// More segments than one block's table holds (256), many of them tiny, some empty: the kernel walks the
// table in chunks, and every element of every segment is updated exactly once.
TEST_F(CudaSgd, ManySmallSegmentsSpanSeveralTableChunks) {
  std::mt19937_64 rng(77);
  std::uniform_int_distribution<int64_t> size(1, 40), gap(0, 2);
  std::vector<ParamSegment> segments;
  int64_t offset = 0;
  for (int i = 0; i < 700; ++i) {
    offset += gap(rng);
    const int64_t count = i == 300 ? 100000 : size(rng);  // one big one among them
    segments.push_back({offset, count, i % 2 == 0});
    offset += count;
  }
  // Empty segments, shuffled in among the others. They sit at the end of the buffer: the reference's
  // overlap check can reject an empty segment that shares its offset with a non-empty one (it sorts by
  // offset alone, so the empty one may come second).
  for (int i = 0; i < 60; ++i) segments.push_back({offset, 0, true});
  std::shuffle(segments.begin(), segments.end(), rng);
  const int64_t total = offset + 1;
  SgdStep step;
  step.lr = 0.1f, step.momentum = 0.9f, step.weight_decay = 5e-4f, step.nesterov = true,
  step.grad_scale = 0.25f;
  HostBuffer params = random_values(total, DType::f32, 61), momentum = random_values(total, DType::f32, 62);
  const HostBuffer grads = random_values(total, DType::f32, 63);
  DeviceBuffer dp(total * 4), dg(total * 4), dv(total * 4), dseg(segments.size() * sizeof(ParamSegment));
  dp.upload(params);
  dg.upload(grads);
  dv.upload(momentum);
  dseg.upload(segments.data(), segments.size() * sizeof(ParamSegment));
  cuda::sgd_update(dp.as<float>(), dg.as<float>(), dv.as<float>(), dseg.as<ParamSegment>(),
                   static_cast<int>(segments.size()), step, nullptr, {}, stream_);
  ReferenceBackend reference;
  reference.sgd_update(params.tensor(), grads.tensor(), momentum.tensor(), segments, step);
  sync();
  HostBuffer p({total}, DType::f32), v({total}, DType::f32);
  dp.download(p);
  dv.download(v);
  EXPECT_EQ(std::memcmp(p.tensor().data(), params.tensor().data(), total * 4), 0);
  EXPECT_EQ(std::memcmp(v.tensor().data(), momentum.tensor().data(), total * 4), 0);
}

TEST_F(CudaSgd, NoSegmentsAndEmptySegmentsLeaveEverythingAlone) {
  const int64_t total = 37;
  HostBuffer params = random_values(total, DType::f32, 51);
  DeviceBuffer dp(total * 4), dg(total * 4), dv(total * 4);
  dp.upload(params);
  dg.upload(params);
  dv.upload(params);
  const std::vector<ParamSegment> empty = {{5, 0, true}, {37, 0, false}};
  DeviceBuffer dseg(empty.size() * sizeof(ParamSegment));
  dseg.upload(empty.data(), empty.size() * sizeof(ParamSegment));
  cuda::sgd_update(dp.as<float>(), dg.as<float>(), dv.as<float>(), dseg.as<ParamSegment>(), 0, SgdStep{},
                   nullptr, {}, stream_);
  cuda::sgd_update(dp.as<float>(), dg.as<float>(), dv.as<float>(), dseg.as<ParamSegment>(), 2, SgdStep{},
                   nullptr, {}, stream_);
  sync();
  HostBuffer p({total}, DType::f32);
  dp.download(p);
  EXPECT_EQ(std::memcmp(p.tensor().data(), params.tensor().data(), total * 4), 0);
}

}  // namespace
}  // namespace dlbench

#endif  // DLBENCH_WITH_CUDA
