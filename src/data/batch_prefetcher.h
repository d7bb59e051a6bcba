// Batches gathered ahead of the training loop: a background thread calls Dataset::gather for the batches
// a run will ask for, in order, into a ring of host buffers, so that decoding overlaps the device's work
// on the previous steps. The loop takes them with next() and is told how long it waited.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "data/dataset.h"

namespace dlbench {

class BatchPrefetcher {
 public:
  // Batch n's sample indices (n = 0, 1, ..., count - 1); called on the prefetch thread, in order.
  using BatchIndices = std::function<std::vector<int64_t>(int64_t n)>;
  // Host memory for the buffers (page-locked on a GPU: Backend::allocate_host) and its release.
  using Allocate = std::function<void*(size_t)>;
  using Release = std::function<void(void*)>;

  // `image_dims` [batch, C, H, W] in `dtype` and `layout`; `depth` buffers, so up to depth - 1 batches
  // wait ready while the caller holds one.
  BatchPrefetcher(const Dataset& data, std::vector<int64_t> image_dims, DType dtype, Layout layout,
                  int64_t count, BatchIndices indices, int depth, Allocate allocate, Release release);
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  struct Batch {
    Tensor images, labels;  // host tensors, valid until the next call of next()
  };
  // The next batch, waiting until it is ready; rethrows what gather() threw for it (a bad file under
  // --strict). Calling it more than `count` times is a caller bug.
  const Batch& next();
  // Seconds next() spent waiting for batches, in all.
  double waited_seconds() const { return waited_seconds_; }

 private:
  void produce();

  const Dataset& data_;
  int64_t count_;
  BatchIndices indices_;
  Release release_;
  std::vector<Batch> slots_;
  std::vector<void*> memory_;
  std::mutex mutex_;
  std::condition_variable ready_, free_;
  int64_t produced_ = 0;  // batches written
  int64_t consumed_ = 0;  // batches handed out by next()
  bool stop_ = false;
  std::exception_ptr failure_;
  double waited_seconds_ = 0;
  std::thread thread_;
};

}  // namespace dlbench
