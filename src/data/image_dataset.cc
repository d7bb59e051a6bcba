#include "data/image_dataset.h"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "core/log.h"
#include "core/status.h"
#include "core/work_pool.h"
#include "data/jpeg_image.h"
#include "data/random.h"

namespace dlbench {

ImageDataset::ImageDataset(std::shared_ptr<const EncodedImageSource> source, ImageDatasetOptions options)
    : source_(std::move(source)), options_(options) {
  DLB_REQUIRE(options_.image_size >= 1, "--image-size {}: must be positive", options_.image_size);
  DLB_REQUIRE(options_.channels == 1 || options_.channels == 3, "images have 1 or 3 channels, not {}",
              options_.channels);
  DLB_REQUIRE(options_.threads >= 1, "--data-threads {}: must be 1 or more", options_.threads);
  workers_ = std::make_unique<WorkPool>(options_.threads);
}

ImageDataset::~ImageDataset() = default;

ImageDatasetStats ImageDataset::stats() const {
  ImageDatasetStats s;
  s.decoded = decoded_.load();
  s.skipped = skipped_.load();
  {
    std::lock_guard<std::mutex> lock(bad_mutex_);
    s.bad_files = static_cast<int64_t>(bad_.size());
  }
  s.decode_seconds = static_cast<double>(decode_nanoseconds_.load()) / 1e9;
  return s;
}

void ImageDataset::note_bad(int64_t index, const std::string& error) const {
  skipped_.fetch_add(1);
  std::lock_guard<std::mutex> lock(bad_mutex_);
  if (bad_.insert(index).second) log_warning("skipping a bad image: {} (--strict stops instead)", error);
}

bool ImageDataset::decode_one(int64_t index, uint64_t draw, DType dtype, Layout layout, void* out,
                              std::string& error) const {
  thread_local std::vector<uint8_t> bytes;
  thread_local RgbImage image;
  if (!source_->read(index, bytes, error)) return false;
  JpegInfo info;
  if (!read_jpeg_info(bytes, info, error)) {
    error = fmt::format("{}: {}", source_->where(index), error);
    return false;
  }
  const SampleCrop crop = choose_sample_crop(options_, info.width, info.height, draw);
  if (!decode_jpeg(bytes, crop.scale_eighths, options_.channels, image, error)) {
    error = fmt::format("{}: {}", source_->where(index), error);
    return false;
  }
  crop_resize_normalize(image, crop.scale_eighths, crop.box, options_.image_size, options_.image_size,
                        crop.flip, options_.normalization, dtype, layout, out);
  return true;
}

void ImageDataset::gather(std::span<const int64_t> indices, Tensor& images, Tensor& labels) const {
  const auto n = static_cast<int64_t>(indices.size());
  const SampleShape shape = sample_shape();
  DLB_CHECK(images.device().kind == DeviceKind::cpu && labels.device().kind == DeviceKind::cpu,
            "gather writes host tensors");
  DLB_CHECK(images.dims() == std::vector<int64_t>({n, shape.channels, shape.height, shape.width}),
            "gather: images tensor of the wrong shape");
  DLB_CHECK(writes_dtype(images.dtype()), "gather: images in {}", dtype_name(images.dtype()));
  DLB_CHECK(labels.dtype() == DType::i32 && labels.numel() == n, "gather: labels tensor of the wrong shape");
  const size_t sample_bytes = static_cast<size_t>(shape.numel()) * dtype_size(images.dtype());
  auto* out = static_cast<std::byte*>(images.data());
  auto* label_out = labels.ptr<int32_t>();
  // Draw numbers: call c's sample k draws from stream (c << 24) + k, the i-th retry of a bad file from
  // stream + (i << 48), all independent of which thread runs which sample.
  const uint64_t call = calls_.fetch_add(1);
  const int64_t total = size();
  workers_->run(n, [&](int64_t k) {
    const auto start = std::chrono::steady_clock::now();
    int64_t index = indices[static_cast<size_t>(k)];
    DLB_CHECK(index >= 0 && index < total, "gather: sample {} of {}", index, total);
    std::string error;
    for (uint64_t attempt = 0;; ++attempt) {
      if (decode_one(index, sample_draw(call, k, attempt), images.dtype(), images.layout(),
                     out + static_cast<size_t>(k) * sample_bytes, error)) {
        label_out[k] = source_->label(index);
        break;
      }
      if (options_.strict) throw_user_error("{}", error);
      note_bad(index, error);
      DLB_REQUIRE(attempt < 1000, "{}: no decodable image among 1000 samples in a row (the last: {})",
                  source_->description(), error);
      index = (index + 1) % total;  // the next sample takes the bad one's place
    }
    decoded_.fetch_add(1);
    decode_nanoseconds_.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
            .count());
  });
}

SampleCrop choose_sample_crop(const ImageDatasetOptions& options, int width, int height, uint64_t draw) {
  std::mt19937_64 rng(data_rng::derive_seed(options.seed, draw));
  const int size = options.image_size;
  SampleCrop crop;
  crop.box = {0, 0, static_cast<double>(width), static_cast<double>(height)};
  if (options.augment && options.train) {
    crop.box = random_resized_crop_box(width, height, rng);
    crop.flip = (rng() >> 63) != 0;
  } else if (options.augment) {
    crop.box = center_crop_box(width, height, size * 256 / 224, size);
  }
  crop.scale_eighths = dct_scale_eighths(std::max(1, static_cast<int>(crop.box.width)),
                                         std::max(1, static_cast<int>(crop.box.height)), size, size);
  return crop;
}

ImageDatasetOptions default_image_options(const EncodedImageSource& source) {
  ImageDatasetOptions options;
  std::vector<uint8_t> bytes;
  std::string error;
  // The first sample that reads and parses decides.
  for (int64_t i = 0; i < std::min<int64_t>(source.size(), 16); ++i) {
    JpegInfo info;
    if (!source.read(i, bytes, error) || !read_jpeg_info(bytes, info, error)) continue;
    if (info.components == 1 && std::min(info.width, info.height) < 64) {
      options.channels = 1;
      options.image_size = std::min(info.width, info.height);
      options.augment = false;
      options.normalization = {{0.2860f, 0.2860f, 0.2860f}, {0.3530f, 0.3530f, 0.3530f}};  // Fashion-MNIST's
    }
    break;
  }
  return options;
}

}  // namespace dlbench
