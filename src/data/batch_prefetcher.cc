#include "data/batch_prefetcher.h"

#include <chrono>

#include "core/status.h"
#include "core/thread_name.h"

namespace dlbench {

BatchPrefetcher::BatchPrefetcher(const Dataset& data, std::vector<int64_t> image_dims, DType dtype,
                                 Layout layout, int64_t count, BatchIndices indices, int depth,
                                 Allocate allocate, Release release)
    : data_(data), count_(count), indices_(std::move(indices)), release_(std::move(release)) {
  DLB_CHECK(depth >= 2 && image_dims.size() == 4, "prefetcher: depth {} and {}-d images", depth,
            image_dims.size());
  DLB_CHECK(data.writes_dtype(dtype), "prefetcher: {} does not write {}", data.name(), dtype_name(dtype));
  const int64_t batch = image_dims[0];
  for (int i = 0; i < depth; ++i) {
    Tensor images(nullptr, image_dims, dtype, layout, Device{});
    Tensor labels(nullptr, {batch}, DType::i32, Layout::nchw, Device{});
    void* image_memory = allocate(images.bytes());
    memory_.push_back(image_memory);
    void* label_memory = allocate(labels.bytes());
    memory_.push_back(label_memory);
    images.set_data(image_memory);
    labels.set_data(label_memory);
    slots_.push_back({images, labels});
  }
  thread_ = std::thread([this] {
    name_this_thread("dlb-prefetch");
    produce();
  });
}

BatchPrefetcher::~BatchPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  free_.notify_all();
  thread_.join();
  for (void* p : memory_) release_(p);
}

void BatchPrefetcher::produce() {
  const auto depth = static_cast<int64_t>(slots_.size());
  for (int64_t n = 0; n < count_; ++n) {
    {
      // Slot n % depth is free once batch n - depth has been handed out and the caller moved past it
      // (it holds the batch it got until its next call).
      std::unique_lock<std::mutex> lock(mutex_);
      free_.wait(lock, [&] { return stop_ || n < depth || n - depth < consumed_ - 1; });
      if (stop_) return;
    }
    Batch& slot = slots_[static_cast<size_t>(n % depth)];
    try {
      std::vector<int64_t> indices = indices_(n);
      DLB_CHECK(static_cast<int64_t>(indices.size()) == slot.images.dims()[0], "prefetcher: batch of {}",
                indices.size());
      data_.gather(indices, slot.images, slot.labels);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      failure_ = std::current_exception();
      produced_ = n + 1;
      ready_.notify_all();
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    produced_ = n + 1;
    ready_.notify_all();
  }
}

const BatchPrefetcher::Batch& BatchPrefetcher::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  DLB_CHECK(consumed_ < count_, "prefetcher: batch {} of {}", consumed_ + 1, count_);
  const int64_t n = consumed_++;
  free_.notify_all();  // the batch before this one is released
  const auto start = std::chrono::steady_clock::now();
  ready_.wait(lock, [&] { return produced_ > n; });
  waited_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (failure_ && produced_ == n + 1) std::rethrow_exception(failure_);
  return slots_[static_cast<size_t>(n % static_cast<int64_t>(slots_.size()))];
}

}  // namespace dlbench
