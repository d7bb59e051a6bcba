#include "core/work_pool.h"

#include "core/status.h"
#include "core/thread_name.h"

namespace dlbench {

WorkPool::WorkPool(int threads) {
  DLB_CHECK(threads >= 1, "a work pool of {} threads", threads);
  for (int t = 0; t < threads; ++t)
    threads_.emplace_back([this, t] {
      name_this_thread("dlb-pool" + std::to_string(t));
      loop();
    });
}

WorkPool::~WorkPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void WorkPool::run(int64_t n, const std::function<void(int64_t)>& body) {
  std::unique_lock<std::mutex> lock(mutex_);
  job_ = &body;
  count_ = n;
  next_.store(0);
  pending_ = static_cast<int>(threads_.size());
  failure_ = nullptr;
  ++generation_;
  wake_.notify_all();
  done_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
  if (failure_) std::rethrow_exception(failure_);
}

void WorkPool::loop() {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t)>* body;
    int64_t n;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      body = job_;
      n = count_;
    }
    for (int64_t i = next_.fetch_add(1); i < n; i = next_.fetch_add(1)) {
      try {
        (*body)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!failure_) failure_ = std::current_exception();
        next_.store(n);  // the others stop at their next index
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (--pending_ == 0) done_.notify_one();
  }
}

}  // namespace dlbench
