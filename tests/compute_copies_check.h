// An optimizer update that folds in the compute copies (Backend's ComputeCopies) against the three passes
// it replaces, on one backend: widen the FP16/BF16 gradients into FP32, update, narrow the weights into
// their FP16/BF16 copies. The fused update must give the same bits in the weights, in the optimizer's
// state and in the copies; it must read the compute gradients (the FP32 ones it is given hold other
// values there), and the norm of the compute gradients must be that of their widening, bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"

namespace dlbench::compute_copies_check {

enum class Update { sgd, adamw };

// A flat tensor in the backend's memory, filled from and read back to the host.
class Flat {
 public:
  Flat(Backend& backend, int64_t n, DType dtype)
      : backend_(backend),
        tensor_(backend.allocate(static_cast<size_t>(n) * dtype_size(dtype)), {n}, dtype, Layout::nchw,
                backend.device()) {}
  ~Flat() { backend_.deallocate(tensor_.data()); }
  Flat(const Flat&) = delete;
  Flat& operator=(const Flat&) = delete;
  Tensor& tensor() { return tensor_; }
  // The first `n` elements as a tensor of their own.
  Tensor head(int64_t n) const {
    return Tensor(tensor_.data(), {n}, tensor_.dtype(), Layout::nchw, tensor_.device());
  }
  void upload(const std::vector<float>& values) {
    backend_.copy_to_device(tensor_.data(), values.data(), values.size() * sizeof(float));
  }
  std::vector<std::byte> bytes() const {
    std::vector<std::byte> out(tensor_.bytes());
    backend_.copy_to_host(out.data(), tensor_.data(), out.size());
    return out;
  }

 private:
  Backend& backend_;
  Tensor tensor_;
};

inline std::vector<float> random_floats(int64_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// n parameters, the first `count` with copies in `compute`; with `grads_left_out` (count == n) the fused
// update is given no FP32 gradients at all.
inline void expect_update_folds_copies(Backend& backend, Update update, DType compute, int64_t n,
                                       int64_t count, bool grads_left_out) {
  SCOPED_TRACE(::testing::Message() << (update == Update::sgd ? "sgd_update" : "adamw_update") << " "
                                    << dtype_name(compute) << " n=" << n << " copies=" << count
                                    << (grads_left_out ? " no FP32 gradients" : ""));
  ASSERT_TRUE(!grads_left_out || count == n);
  const std::vector<float> p0 = random_floats(n, 1, -1, 1), g0 = random_floats(n, 2, -3, 3),
                           m0 = random_floats(n, 3, -0.1f, 0.1f), v0 = random_floats(n, 4, 0, 0.01f);
  Flat fused_p(backend, n, DType::f32), fused_m(backend, n, DType::f32), fused_v(backend, n, DType::f32);
  Flat plain_p(backend, n, DType::f32), plain_m(backend, n, DType::f32), plain_v(backend, n, DType::f32);
  Flat fused_g(backend, n, DType::f32), plain_g(backend, n, DType::f32);
  Flat compute_g(backend, count, compute), fused_copy(backend, count, compute),
      plain_copy(backend, count, compute);
  for (Flat* f : {&fused_p, &plain_p}) f->upload(p0);
  for (Flat* f : {&fused_m, &plain_m}) f->upload(m0);
  for (Flat* f : {&fused_v, &plain_v}) f->upload(v0);
  for (Flat* f : {&fused_g, &plain_g}) f->upload(g0);
  // The compute gradients are g0 rounded; the plain path reads their widening, the fused path them
  // directly, while its FP32 gradients keep the unrounded g0 where the copies are.
  Tensor head = fused_g.head(count);
  backend.cast(head, compute_g.tensor());
  Tensor plain_head = plain_g.head(count);
  backend.cast(compute_g.tensor(), plain_head);
  backend.fill(fused_copy.tensor(), 7.0);  // the fused update must write every copy

  // Every element in a segment, one of them across the copies' end, the last three in none (where the
  // copies end before them).
  const int64_t covered = count == n ? n : n - 3;
  const std::vector<ParamSegment> segments = {{0, 100, false}, {100, covered - 100, true}};
  ASSERT_LE(count, covered);

  // The norm of the compute gradients is that of their widening; both updates clip by the same one.
  Flat norm(backend, 1, DType::f32), head_norm(backend, 1, DType::f32);
  backend.sum_of_squares(compute_g.tensor(), head_norm.tensor(), Accumulate::overwrite);
  backend.sum_of_squares(plain_head, norm.tensor(), Accumulate::overwrite);
  EXPECT_EQ(head_norm.bytes(), norm.bytes()) << "the compute gradients' norm differs from their widening's";
  backend.sum_of_squares(plain_g.tensor(), norm.tensor(), Accumulate::overwrite);

  Tensor no_grads;
  const Tensor& fused_grads = grads_left_out ? no_grads : fused_g.tensor();
  const ComputeCopies copies{&fused_copy.tensor(), &compute_g.tensor()};
  if (update == Update::sgd) {
    SgdStep step;
    step.lr = 0.05f;
    step.momentum = 0.9f;
    step.weight_decay = 1e-3f;
    step.nesterov = true;
    step.grad_scale = 0.5f;
    backend.sgd_update(fused_p.tensor(), fused_grads, fused_m.tensor(), segments, step, nullptr, copies);
    backend.sgd_update(plain_p.tensor(), plain_g.tensor(), plain_m.tensor(), segments, step);
  } else {
    AdamWStep step;
    step.lr = 3e-3f;
    step.step = 3;
    step.grad_scale = 0.5f;
    step.max_grad_norm = 1.f;  // far below the gradients' norm: the clip acts
    step.grad_norm_squared = norm.tensor().ptr<float>();
    backend.adamw_update(fused_p.tensor(), fused_grads, fused_m.tensor(), fused_v.tensor(), segments, step,
                         nullptr, copies);
    backend.adamw_update(plain_p.tensor(), plain_g.tensor(), plain_m.tensor(), plain_v.tensor(), segments,
                         step);
  }
  Tensor plain_weights = plain_p.head(count);
  backend.cast(plain_weights, plain_copy.tensor());
  EXPECT_EQ(fused_p.bytes(), plain_p.bytes()) << "the weights differ";
  EXPECT_EQ(fused_m.bytes(), plain_m.bytes()) << "the momentum (m) differs";
  if (update == Update::adamw) {
    EXPECT_EQ(fused_v.bytes(), plain_v.bytes()) << "v differs";
  }
  EXPECT_EQ(fused_copy.bytes(), plain_copy.bytes()) << "the compute copies of the weights differ";
}

// The copies' rule (check_compute_copies) as the backend enforces it: each one line naming the op.
inline void expect_bad_copies_refused(Backend& backend) {
  const int64_t n = 256;
  Flat p(backend, n, DType::f32), g(backend, n, DType::f32), m(backend, n, DType::f32);
  Flat half_copy(backend, 128, DType::bf16), other_size(backend, 64, DType::bf16),
      wide(backend, 128, DType::f32);
  const std::vector<ParamSegment> segments = {{0, n, true}};
  const SgdStep step;
  Tensor no_grads;
  auto refused = [&](const Tensor& grads, const ComputeCopies& copies, const char* why) {
    EXPECT_THROW(backend.sgd_update(p.tensor(), grads, m.tensor(), segments, step, nullptr, copies), Error)
        << why;
  };
  refused(g.tensor(), {&wide.tensor(), nullptr}, "f32 copies");
  refused(g.tensor(), {&half_copy.tensor(), &other_size.tensor()}, "copies of two sizes");
  refused(no_grads, {&half_copy.tensor(), &half_copy.tensor()},
          "no FP32 gradients for elements without copies");
  refused(no_grads, {&half_copy.tensor(), nullptr}, "no FP32 gradients and no compute gradients");
}

}  // namespace dlbench::compute_copies_check
