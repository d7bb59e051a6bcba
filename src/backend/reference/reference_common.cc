#include "backend/reference/reference_common.h"

#include <fmt/format.h>

#include <cmath>

#include "backend/reference/half_float.h"

namespace dlbench::reference {
namespace {

std::string expected(const std::vector<int64_t>& dims, DType dtype, const char* layout) {
  return fmt::format("{}[{}]{}{}", dtype_name(dtype), fmt::join(dims, ", "), layout[0] ? " " : "", layout);
}

}  // namespace

void check_host(const char* op, const char* name, const Tensor& t) {
  DLB_CHECK(t.device().kind == DeviceKind::cpu, "{}: {} is {}, the reference backend needs host memory", op,
            name, t.describe());
  DLB_CHECK(t.data() != nullptr || t.numel() == 0, "{}: {} ({}) has no data", op, name, t.describe());
}

void check_tensor(const char* op, const char* name, const Tensor& t, const std::vector<int64_t>& dims,
                  DType dtype) {
  check_host(op, name, t);
  DLB_CHECK(t.dims() == dims && t.dtype() == dtype, "{}: {} is {}, expected {}", op, name, t.describe(),
            expected(dims, dtype, ""));
}

void check_tensor(const char* op, const char* name, const Tensor& t, const std::vector<int64_t>& dims,
                  DType dtype, Layout layout) {
  check_host(op, name, t);
  DLB_CHECK(t.dims() == dims && t.dtype() == dtype && t.layout() == layout, "{}: {} is {}, expected {}", op,
            name, t.describe(), expected(dims, dtype, layout_name(layout)));
}

void check_same(const char* op, const char* name_a, const Tensor& a, const char* name_b, const Tensor& b) {
  check_host(op, name_a, a);
  check_host(op, name_b, b);
  // Rank-1/2 tensors are row-major whatever their layout tag; only rank-4 layouts change memory order.
  const bool same_order = a.rank() != 4 || a.layout() == b.layout();
  DLB_CHECK(a.dims() == b.dims() && a.dtype() == b.dtype() && same_order, "{}: {} is {} but {} is {}", op,
            name_a, a.describe(), name_b, b.describe());
}

std::vector<double> read_channels(const Tensor& t) {
  std::vector<double> values(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < values.size(); ++i) values[i] = t.ptr<float>()[i];
  return values;
}

void write_channels(Tensor& t, const std::vector<double>& values, Accumulate accumulate) {
  for (size_t i = 0; i < values.size(); ++i) store(t.ptr<float>()[i], values[i], accumulate);
}

bool is_float_dtype(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::f16 || dtype == DType::bf16;
}

double load_element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32:
      return t.ptr<float>()[i];
    case DType::f64:
      return t.ptr<double>()[i];
    case DType::f16:
      return f16_to_double(t.ptr<uint16_t>()[i]);
    case DType::bf16:
      return bf16_to_double(t.ptr<uint16_t>()[i]);
    case DType::i32:
      return t.ptr<int32_t>()[i];
  }
  return 0;
}

void store_element(Tensor& t, int64_t i, double value) {
  switch (t.dtype()) {
    case DType::f32:
      t.ptr<float>()[i] = static_cast<float>(value);
      return;
    case DType::f64:
      t.ptr<double>()[i] = value;
      return;
    case DType::f16:
      t.ptr<uint16_t>()[i] = f16_from_double(value);
      return;
    case DType::bf16:
      t.ptr<uint16_t>()[i] = bf16_from_double(value);
      return;
    case DType::i32:
      t.ptr<int32_t>()[i] = static_cast<int32_t>(value);
      return;
  }
}

}  // namespace dlbench::reference
