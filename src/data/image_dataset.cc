#include "data/image_dataset.h"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "core/log.h"
#include "core/status.h"
#include "data/jpeg_image.h"
#include "data/random.h"

namespace dlbench {

// A fixed set of threads that run one parallel loop at a time: run(n, body) calls body(0..n-1) spread
// over the threads and returns when all are done, rethrowing the first exception a body threw.
struct ImageDataset::Workers {
  explicit Workers(int count) {
    for (int t = 0; t < count; ++t) threads.emplace_back([this] { loop(); });
  }
  ~Workers() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    wake.notify_all();
    for (std::thread& t : threads) t.join();
  }

  void run(int64_t n, const std::function<void(int64_t)>& body) {
    std::unique_lock<std::mutex> lock(mutex);
    job = &body;
    count = n;
    next.store(0);
    pending = static_cast<int>(threads.size());
    failure = nullptr;
    ++generation;
    wake.notify_all();
    done.wait(lock, [&] { return pending == 0; });
    job = nullptr;
    if (failure) std::rethrow_exception(failure);
  }

 private:
  void loop() {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int64_t)>* body;
      int64_t n;
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return stop || generation != seen; });
        if (stop) return;
        seen = generation;
        body = job;
        n = count;
      }
      for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
        try {
          (*body)(i);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mutex);
          if (!failure) failure = std::current_exception();
          next.store(n);  // the others stop at their next sample
        }
      }
      std::lock_guard<std::mutex> lock(mutex);
      if (--pending == 0) done.notify_one();
    }
  }

 public:
  std::vector<std::thread> threads;

 private:
  std::mutex mutex;
  std::condition_variable wake, done;
  const std::function<void(int64_t)>* job = nullptr;
  int64_t count = 0;
  std::atomic<int64_t> next{0};
  int pending = 0;
  uint64_t generation = 0;
  bool stop = false;
  std::exception_ptr failure;
};

ImageDataset::ImageDataset(std::shared_ptr<const EncodedImageSource> source, ImageDatasetOptions options)
    : source_(std::move(source)), options_(options) {
  DLB_REQUIRE(options_.image_size >= 1, "--image-size {}: must be positive", options_.image_size);
  DLB_REQUIRE(options_.channels == 1 || options_.channels == 3, "images have 1 or 3 channels, not {}",
              options_.channels);
  DLB_REQUIRE(options_.threads >= 1, "--data-threads {}: must be 1 or more", options_.threads);
  workers_ = std::make_unique<Workers>(options_.threads);
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
  std::mt19937_64 rng(data_rng::derive_seed(options_.seed, draw));
  const int size = options_.image_size;
  CropBox box{0, 0, static_cast<double>(info.width), static_cast<double>(info.height)};
  bool flip = false;
  if (options_.augment && options_.train) {
    box = random_resized_crop_box(info.width, info.height, rng);
    flip = (rng() >> 63) != 0;
  } else if (options_.augment) {
    box = center_crop_box(info.width, info.height, size * 256 / 224, size);
  }
  const int scale = dct_scale_eighths(std::max(1, static_cast<int>(box.width)),
                                      std::max(1, static_cast<int>(box.height)), size, size);
  if (!decode_jpeg(bytes, scale, options_.channels, image, error)) {
    error = fmt::format("{}: {}", source_->where(index), error);
    return false;
  }
  crop_resize_normalize(image, scale, box, size, size, flip, options_.normalization, dtype, layout, out);
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
      const uint64_t draw = (call << 24) + static_cast<uint64_t>(k) + (attempt << 48);
      if (decode_one(index, draw, images.dtype(), images.layout(),
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
