#include "backend/reference/reference_common.h"

#include <fmt/format.h>

#include <algorithm>
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

void check_f32_or_f64(const char* op, const char* name, const Tensor& t, const std::vector<int64_t>& dims) {
  check_host(op, name, t);
  DLB_CHECK(t.dims() == dims && (t.dtype() == DType::f32 || t.dtype() == DType::f64),
            "{}: {} is {}, expected f32[{}]", op, name, t.describe(), fmt::join(dims, ", "));
}

void check_flat_params(const char* op, const Tensor& params, std::span<const ParamSegment> segments) {
  check_host(op, "params", params);
  DLB_CHECK(params.rank() == 1 && (params.dtype() == DType::f32 || params.dtype() == DType::f64),
            "{}: params is {}, expected a flat f32 (or f64) buffer", op, params.describe());
  std::vector<ParamSegment> sorted(segments.begin(), segments.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.count < b.count;  // an empty segment never overlaps
  });
  int64_t covered_until = 0;
  for (const ParamSegment& s : sorted) {
    DLB_CHECK(s.offset >= 0 && s.count >= 0 && s.offset + s.count <= params.numel(),
              "{}: segment [{}, {}) is outside params {}", op, s.offset, s.offset + s.count,
              params.describe());
    DLB_CHECK(s.offset >= covered_until, "{}: segment at {} overlaps the previous one (ending at {})", op,
              s.offset, covered_until);
    covered_until = s.offset + s.count;
  }
}

std::vector<double> read_channels(const Tensor& t) {
  std::vector<double> values(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = t.dtype() == DType::f64 ? t.ptr<double>()[i] : t.ptr<float>()[i];
  }
  return values;
}

void write_channels(Tensor& t, const std::vector<double>& values, Accumulate accumulate) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (t.dtype() == DType::f64) {
      store(t.ptr<double>()[i], values[i], accumulate);
    } else {
      store(t.ptr<float>()[i], values[i], accumulate);
    }
  }
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
