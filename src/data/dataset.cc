#include "data/dataset.h"

#include <algorithm>
#include <cstring>

#include "core/status.h"

namespace dlbench {

InMemoryDataset::InMemoryDataset(std::string name, SampleShape shape, int num_classes,
                                 std::vector<float> images, std::vector<int32_t> labels)
    : name_(std::move(name)),
      shape_(shape),
      num_classes_(num_classes),
      images_(std::move(images)),
      labels_(std::move(labels)) {
  DLB_CHECK(shape_.channels > 0 && shape_.height > 0 && shape_.width > 0, "sample shape {}x{}x{}",
            shape_.channels, shape_.height, shape_.width);
  DLB_CHECK(num_classes_ > 0, "{} classes", num_classes_);
  DLB_CHECK(images_.size() == labels_.size() * static_cast<size_t>(shape_.numel()),
            "{} image values for {} samples of {} values", images_.size(), labels_.size(), shape_.numel());
  DLB_CHECK(std::all_of(labels_.begin(), labels_.end(),
                        [&](int32_t label) { return label >= 0 && label < num_classes_; }),
            "labels outside [0, {})", num_classes_);
}

std::span<const float> InMemoryDataset::image(int64_t i) const {
  DLB_CHECK(i >= 0 && i < size(), "sample {} of {}", i, size());
  const size_t sample = static_cast<size_t>(shape_.numel());
  return std::span<const float>(images_).subspan(static_cast<size_t>(i) * sample, sample);
}

int32_t InMemoryDataset::label(int64_t i) const {
  DLB_CHECK(i >= 0 && i < size(), "sample {} of {}", i, size());
  return labels_[static_cast<size_t>(i)];
}

void InMemoryDataset::gather(std::span<const int64_t> indices, Tensor& images, Tensor& labels) const {
  const int64_t n = static_cast<int64_t>(indices.size());
  const int64_t C = shape_.channels, H = shape_.height, W = shape_.width;
  DLB_CHECK(images.device().kind == DeviceKind::cpu && images.dtype() == DType::f32 && images.rank() == 4 &&
                images.n() == n && images.c() == C && images.h() == H && images.w() == W,
            "{}: images tensor {} for {} samples of {}x{}x{}", name_, images.describe(), n, C, H, W);
  DLB_CHECK(labels.device().kind == DeviceKind::cpu && labels.dtype() == DType::i32 && labels.rank() == 1 &&
                labels.dim(0) == n,
            "{}: labels tensor {} for {} samples", name_, labels.describe(), n);

  float* out = images.ptr<float>();
  int32_t* out_labels = labels.ptr<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = indices[static_cast<size_t>(i)];
    DLB_CHECK(s >= 0 && s < size(), "{}: sample index {} outside [0, {})", name_, s, size());
    const float* src = images_.data() + s * C * H * W;
    if (images.layout() == Layout::nchw || C == 1) {
      // With one channel NHWC and NCHW place the values identically.
      std::memcpy(out + i * C * H * W, src, static_cast<size_t>(C * H * W) * sizeof(float));
    } else {
      for (int64_t c = 0; c < C; ++c)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t w = 0; w < W; ++w) out[images.offset(i, c, h, w)] = src[(c * H + h) * W + w];
    }
    out_labels[i] = labels_[static_cast<size_t>(s)];
  }
}

}  // namespace dlbench
