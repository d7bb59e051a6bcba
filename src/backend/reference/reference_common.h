// Internals shared by the reference backend's op families: dtype dispatch, logical 4-D views, checks.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dlbench::reference {

// Calls fn(T{}) with T = float or double; the reference computes in these two dtypes only.
template <typename Fn>
void dispatch_float(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      fn(float{});
      return;
    case DType::f64:
      fn(double{});
      return;
    default:
      break;
  }
  DLB_CHECK(false, "{}: dtype {} is not supported by the reference backend (f32, f64)", op,
            dtype_name(dtype));
}

// A rank-4 tensor indexed by its logical (n, c, h, w), whatever its layout: the loops of every op are
// written once, over logical indices, and work for NCHW and NHWC alike.
template <typename T>
class View4 {
 public:
  explicit View4(const Tensor& t) : tensor_(t), data_(t.ptr<T>()) {}
  T& operator()(int64_t n, int64_t c, int64_t h, int64_t w) const {
    return data_[tensor_.offset(n, c, h, w)];
  }
  int64_t offset(int64_t n, int64_t c, int64_t h, int64_t w) const { return tensor_.offset(n, c, h, w); }

 private:
  Tensor tensor_;  // a copy (it is small), so a view never outlives what it indexes
  T* data_;
};

// A row-major rank-2 tensor indexed by (row, column).
template <typename T>
class View2 {
 public:
  View2(const Tensor& t, int64_t cols) : data_(t.ptr<T>()), cols_(cols) {}
  T& operator()(int64_t row, int64_t col) const { return data_[row * cols_ + col]; }

 private:
  T* data_;
  int64_t cols_;
};

// Stores a result computed in double into an output that is either overwritten or accumulated into.
template <typename T>
void store(T& out, double value, Accumulate accumulate) {
  out = accumulate == Accumulate::add ? static_cast<T>(static_cast<double>(out) + value)
                                      : static_cast<T>(value);
}

// Throws dlbench::Error naming the op, the argument and both shapes unless `t` is a host tensor with
// exactly these logical dims and dtype (and this layout, for rank-4 tensors, when one is given).
void check_tensor(const char* op, const char* name, const Tensor& t, const std::vector<int64_t>& dims,
                  DType dtype);
void check_tensor(const char* op, const char* name, const Tensor& t, const std::vector<int64_t>& dims,
                  DType dtype, Layout layout);
// A host tensor with data, any shape.
void check_host(const char* op, const char* name, const Tensor& t);
// Same dims, dtype and (rank 4) layout: the two tensors can be walked element by element in memory order.
void check_same(const char* op, const char* name_a, const Tensor& a, const char* name_b, const Tensor& b);

// A host tensor of these dims that is f32 or f64: the FP32 statistics and scalars of the contract, which
// the reference also takes in f64 so that gradient checks run entirely in double.
void check_f32_or_f64(const char* op, const char* name, const Tensor& t, const std::vector<int64_t>& dims);

// The optimizers' flat parameter buffer (rank 1, f32 or f64) and its segments: each inside the buffer, none
// overlapping another (an element updated twice would take two steps).
void check_flat_params(const char* op, const Tensor& params, std::span<const ParamSegment> segments);

// FP32 per-channel vectors (batch-norm parameters and statistics) read into / written from double.
std::vector<double> read_channels(const Tensor& t);
void write_channels(Tensor& t, const std::vector<double>& values,
                    Accumulate accumulate = Accumulate::overwrite);

// One element of a tensor of any float dtype (f16 and bf16 included) as a double, and back.
double load_element(const Tensor& t, int64_t i);
void store_element(Tensor& t, int64_t i, double value);
bool is_float_dtype(DType dtype);

// An optimizer update's compute copies (ComputeCopies), element by element.
class ElementCopies {
 public:
  ElementCopies(const char* op, const Tensor& params, const Tensor& grads, const ComputeCopies& copies)
      : copies_(copies), count_(check_compute_copies(op, params, grads, copies)) {}
  // Element i's stored gradient: in the compute copy where it is kept there, else in `grads`.
  template <typename T>
  double gradient(const T* grads, int64_t i) const {
    return copies_.gradients && i < count_ ? load_element(*copies_.gradients, i) : double(grads[i]);
  }
  // After element i's update: its compute copy made from the new weight (given exactly, as stored).
  void updated(int64_t i, double weight) const {
    if (copies_.parameters && i < count_) store_element(*copies_.parameters, i, weight);
  }

 private:
  const ComputeCopies& copies_;
  int64_t count_;
};

}  // namespace dlbench::reference
