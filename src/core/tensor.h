// Tensor: a typed, shaped view of memory that someone else owns (an arena, a test buffer).
//
// Shapes are always *logical*: a 4-D activation is [N, C, H, W] whatever its memory layout; the layout
// only says how those four indices map to an offset. 1-D and 2-D tensors ([F], [N, F]) are row-major and
// ignore the layout. A Tensor never allocates; HostBuffer (below) is the owning helper for tests and I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace dlbench {

enum class DType : uint8_t { f32, f64, f16, bf16, i32 };
enum class Layout : uint8_t { nchw, nhwc };
enum class DeviceKind : uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  bool operator==(const Device&) const = default;
};

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
const char* layout_name(Layout layout);
const char* device_kind_name(DeviceKind kind);  // "cpu", "cuda"
std::string device_name(Device device);

class Tensor {
 public:
  Tensor() = default;
  Tensor(void* data, std::vector<int64_t> dims, DType dtype, Layout layout = Layout::nchw, Device device = {})
      : data_(data), dims_(std::move(dims)), dtype_(dtype), layout_(layout), device_(device) {}

  void* data() const { return data_; }
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data_);
  }
  void set_data(void* data) { data_ = data; }

  const std::vector<int64_t>& dims() const { return dims_; }
  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_[static_cast<size_t>(i)]; }
  DType dtype() const { return dtype_; }
  Layout layout() const { return layout_; }
  Device device() const { return device_; }

  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  // Logical 4-D accessors (valid for rank-4 tensors).
  int64_t n() const { return dims_[0]; }
  int64_t c() const { return dims_[1]; }
  int64_t h() const { return dims_[2]; }
  int64_t w() const { return dims_[3]; }

  // Element offset of logical index (n, c, h, w) under this tensor's layout.
  int64_t offset(int64_t in, int64_t ic, int64_t ih, int64_t iw) const {
    if (layout_ == Layout::nchw) return ((in * dims_[1] + ic) * dims_[2] + ih) * dims_[3] + iw;
    return ((in * dims_[2] + ih) * dims_[3] + iw) * dims_[1] + ic;
  }

  // Same memory, other dims (element count must match).
  Tensor reshaped(std::vector<int64_t> dims) const;
  // Elements [first, first + count) of a 1-D tensor, as a 1-D tensor of their own (same memory).
  Tensor elements(int64_t first, int64_t count) const;
  std::string describe() const;  // "f32[8, 3, 224, 224] nhwc cpu"

 private:
  void* data_ = nullptr;
  std::vector<int64_t> dims_;
  DType dtype_ = DType::f32;
  Layout layout_ = Layout::nchw;
  Device device_{};
};

// Owning host memory with a Tensor view; for tests, data loading and checkpoints.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(std::vector<int64_t> dims, DType dtype, Layout layout = Layout::nchw);
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  HostBuffer(HostBuffer&&) = default;
  HostBuffer& operator=(HostBuffer&&) = default;

  Tensor& tensor() { return tensor_; }
  const Tensor& tensor() const { return tensor_; }
  template <typename T>
  T* ptr() {
    return tensor_.ptr<T>();
  }
  template <typename T>
  const T* ptr() const {
    return tensor_.ptr<T>();
  }
  int64_t numel() const { return tensor_.numel(); }

 private:
  std::vector<std::byte> storage_;
  Tensor tensor_;
};

}  // namespace dlbench
