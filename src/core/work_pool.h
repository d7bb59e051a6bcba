// A fixed set of threads that run one parallel loop at a time: run(n, body) calls body(0) .. body(n - 1)
// spread over the threads and returns when all are done, rethrowing the first exception a body threw (the
// other threads stop at their next index). One caller at a time: run() is not reentrant.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dlbench {

class WorkPool {
 public:
  explicit WorkPool(int threads);  // 1 or more
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  void run(int64_t n, const std::function<void(int64_t)>& body);
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void loop();

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t count_ = 0;
  std::atomic<int64_t> next_{0};
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr failure_;
};

}  // namespace dlbench
