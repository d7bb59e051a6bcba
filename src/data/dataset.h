// Datasets: random access to normalised samples, the source the trainer draws batches from.
//
// A Dataset is immutable once built, so gather() may be called from several threads at once.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace dlbench {

struct SampleShape {
  int64_t channels = 0, height = 0, width = 0;
  int64_t numel() const { return channels * height * width; }
  bool operator==(const SampleShape&) const = default;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::string name() const = 0;
  virtual int64_t size() const = 0;
  virtual SampleShape sample_shape() const = 0;
  virtual int num_classes() const = 0;
  // Writes samples `indices` into `images` (host, logical [n, C, H, W] in images.layout(), NCHW or NHWC,
  // in a dtype writes_dtype() accepts) and `labels` (host i32 [n]), n = indices.size(). Tensors of another
  // shape, dtype or device, and indices outside [0, size()), are caller bugs (dlbench::Error).
  virtual void gather(std::span<const int64_t> indices, Tensor& images, Tensor& labels) const = 0;
  // The image dtypes gather() writes: FP32 always; a decoding dataset also FP16 and BF16, so that the
  // batch crosses to the device in the compute dtype.
  virtual bool writes_dtype(DType dtype) const { return dtype == DType::f32; }
};

// A dataset held in host memory as contiguous per-sample CHW float images and int32 labels; the
// concrete datasets fill it once at construction and share gather().
class InMemoryDataset : public Dataset {
 public:
  std::string name() const override { return name_; }
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  SampleShape sample_shape() const override { return shape_; }
  int num_classes() const override { return num_classes_; }
  void gather(std::span<const int64_t> indices, Tensor& images, Tensor& labels) const override;

  // Direct read access, for tests and statistics: sample i's C*H*W values in CHW order, and its label.
  std::span<const float> image(int64_t i) const;
  int32_t label(int64_t i) const;

 protected:
  // images.size() must be labels.size() * shape.numel(); labels must lie in [0, num_classes).
  InMemoryDataset(std::string name, SampleShape shape, int num_classes, std::vector<float> images,
                  std::vector<int32_t> labels);

 private:
  std::string name_;
  SampleShape shape_;
  int num_classes_ = 0;
  std::vector<float> images_;
  std::vector<int32_t> labels_;
};

}  // namespace dlbench
