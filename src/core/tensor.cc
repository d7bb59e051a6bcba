#include "core/tensor.h"

#include <fmt/format.h>

#include "core/status.h"

namespace dlbench {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::i32:
      return 4;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
  }
  return "?";
}

const char* layout_name(Layout layout) { return layout == Layout::nchw ? "nchw" : "nhwc"; }

const char* device_kind_name(DeviceKind kind) { return kind == DeviceKind::cpu ? "cpu" : "cuda"; }

std::string device_name(Device device) {
  return device.kind == DeviceKind::cpu ? std::string("cpu") : fmt::format("cuda:{}", device.index);
}

int64_t Tensor::numel() const {
  int64_t count = 1;
  for (int64_t d : dims_) count *= d;
  return dims_.empty() ? 0 : count;
}

Tensor Tensor::reshaped(std::vector<int64_t> dims) const {
  Tensor t(data_, std::move(dims), dtype_, layout_, device_);
  DLB_CHECK(t.numel() == numel(), "reshape of {} to {} elements", describe(), t.numel());
  return t;
}

Tensor Tensor::elements(int64_t first, int64_t count) const {
  DLB_CHECK(rank() == 1 && first >= 0 && count >= 0 && first + count <= dims_[0], "elements [{}, {}) of {}",
            first, first + count, describe());
  return Tensor(static_cast<char*>(data_) + static_cast<size_t>(first) * dtype_size(dtype_), {count}, dtype_,
                layout_, device_);
}

std::string Tensor::describe() const {
  return fmt::format("{}[{}] {} {}", dtype_name(dtype_), fmt::join(dims_, ", "), layout_name(layout_),
                     device_name(device_));
}

HostBuffer::HostBuffer(std::vector<int64_t> dims, DType dtype, Layout layout) {
  tensor_ = Tensor(nullptr, std::move(dims), dtype, layout);
  storage_.assign(tensor_.bytes(), std::byte{0});
  tensor_.set_data(storage_.data());
}

}  // namespace dlbench
