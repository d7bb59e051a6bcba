// Memory, the factory, elementwise utilities and the optimizer step of the reference backend.
#include "backend/reference/reference_backend.h"

#include <cmath>
#include <cstring>
#include <new>

#include "backend/reference/reference_common.h"

namespace dlbench {
namespace {

// Generous enough for any vector load another backend might issue on memory we hand out.
constexpr std::align_val_t kAlignment{64};

void check_float(const char* op, const char* name, const Tensor& t) {
  reference::check_host(op, name, t);
  DLB_CHECK(reference::is_float_dtype(t.dtype()), "{}: {} is {}, expected a float dtype", op, name,
            t.describe());
}

}  // namespace

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

// ---- memory: the device is the host ----

void* ReferenceBackend::allocate(size_t bytes) { return ::operator new(bytes, kAlignment); }
void ReferenceBackend::deallocate(void* ptr) {
  if (ptr) ::operator delete(ptr, kAlignment);
}
void ReferenceBackend::copy_to_device(void* dst, const void* host_src, size_t bytes) {
  if (bytes) std::memcpy(dst, host_src, bytes);
}
void ReferenceBackend::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(host_dst, src, bytes);
}
void ReferenceBackend::copy(void* dst, const void* src, size_t bytes) {
  // memmove: an overlapping copy is well defined here, whatever a device backend may do.
  if (bytes) std::memmove(dst, src, bytes);
}

// ---- elementwise, in memory order (every operand shares dims and layout) ----

void ReferenceBackend::fill(Tensor& x, double value) {
  reference::check_host("fill", "x", x);
  if (x.dtype() == DType::i32) {
    DLB_CHECK(value == std::trunc(value) && std::abs(value) <= 2147483647.0, "fill: {} does not fit {}",
              value, x.describe());
  }
  for (int64_t i = 0; i < x.numel(); ++i) reference::store_element(x, i, value);
}

void ReferenceBackend::add(const Tensor& a, const Tensor& b, Tensor& y) {
  check_float("add", "a", a);
  reference::check_same("add", "a", a, "b", b);
  reference::check_same("add", "a", a, "y", y);
  for (int64_t i = 0; i < y.numel(); ++i)
    reference::store_element(y, i, reference::load_element(a, i) + reference::load_element(b, i));
}

void ReferenceBackend::scale(Tensor& x, double alpha) {
  check_float("scale", "x", x);
  for (int64_t i = 0; i < x.numel(); ++i)
    reference::store_element(x, i, alpha * reference::load_element(x, i));
}

void ReferenceBackend::cast(const Tensor& src, Tensor& dst) {
  check_float("cast", "src", src);
  check_float("cast", "dst", dst);
  const bool same_order = src.rank() != 4 || src.layout() == dst.layout();
  DLB_CHECK(src.dims() == dst.dims() && same_order, "cast: src is {} but dst is {}", src.describe(),
            dst.describe());
  for (int64_t i = 0; i < src.numel(); ++i) reference::store_element(dst, i, reference::load_element(src, i));
}

void ReferenceBackend::check_finite(const Tensor& x, Tensor& flag) {
  check_float("check_finite", "x", x);
  reference::check_tensor("check_finite", "flag", flag, {1}, DType::i32);
  for (int64_t i = 0; i < x.numel(); ++i)
    if (!std::isfinite(reference::load_element(x, i))) flag.ptr<int32_t>()[0] = 1;
}

// ---- optimizer ----

// PyTorch's SGD with dampening 0, per element of each segment:
//   g = grad * grad_scale + weight_decay * p   (weight decay only where the segment decays)
//   v = momentum * v + g
//   p = p - lr * (nesterov ? g + momentum * v : v)
void ReferenceBackend::sgd_update(Tensor& params, const Tensor& grads, Tensor& momentum_buffer,
                                  std::span<const ParamSegment> segments, const SgdStep& step,
                                  const StepScalars* scalars, const ComputeCopies& copies) {
  const char* op = "sgd_update";
  reference::check_flat_params(op, params, segments);
  if (grads.numel() > 0) reference::check_same(op, "params", params, "grads", grads);
  reference::check_same(op, "params", params, "momentum_buffer", momentum_buffer);
  const reference::ElementCopies copied(op, params, grads, copies);

  if (scalars && scalars->overflow) return;  // an overflowed step is skipped
  const double lr = scalars ? double(scalars->lr) : double(step.lr);
  const double grad_scale = scalars ? double(step.grad_scale) / double(scalars->loss_scale) : step.grad_scale;
  reference::dispatch_float(params.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* p = params.ptr<T>();
    const T* grad = grads.ptr<T>();
    T* v = momentum_buffer.ptr<T>();
    for (const ParamSegment& s : segments) {
      const double weight_decay = s.weight_decay ? step.weight_decay : 0.0;
      for (int64_t i = s.offset; i < s.offset + s.count; ++i) {
        const double g = copied.gradient(grad, i) * grad_scale + weight_decay * double(p[i]);
        const double velocity = double(step.momentum) * double(v[i]) + g;
        const double update = step.nesterov ? g + double(step.momentum) * velocity : velocity;
        v[i] = static_cast<T>(velocity);
        p[i] = static_cast<T>(double(p[i]) - lr * update);
        copied.updated(i, double(p[i]));
      }
    }
  });
}

void ReferenceBackend::update_loss_scale(StepScalars* scalars) {
  DLB_CHECK(scalars, "update_loss_scale: no scalars");
  advance_loss_scale(*scalars);
}

}  // namespace dlbench
