// Helpers of the communicator tests: exact all-reduce and broadcast checks on any backend, any dtype.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "app/comm_bench.h"
#include "backend/backend.h"
#include "backend/reference/half_float.h"
#include "parallel/communicator.h"

namespace dlbench::parallel::parallel_testing {

inline std::vector<std::byte> encode(DType dtype, const std::vector<double>& values) {
  std::vector<std::byte> bytes(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::f32) {
      const float f = static_cast<float>(values[i]);
      std::memcpy(bytes.data() + i * 4, &f, 4);
    } else {
      const uint16_t h = dtype == DType::f16 ? f16_from_double(values[i]) : bf16_from_double(values[i]);
      std::memcpy(bytes.data() + i * 2, &h, 2);
    }
  }
  return bytes;
}

inline double decode(DType dtype, const std::vector<std::byte>& bytes, size_t i) {
  if (dtype == DType::f32) {
    float f;
    std::memcpy(&f, bytes.data() + i * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, bytes.data() + i * 2, 2);
  return dtype == DType::f16 ? f16_to_double(h) : bf16_to_double(h);
}

// Backend memory of `count` elements holding `values`, freed at the end of the scope; or, given `memory`
// (someone else's, e.g. a communicator's window), `values` placed there.
class Buffer {
 public:
  Buffer(Backend& backend, DType dtype, const std::vector<double>& values, void* memory = nullptr)
      : backend_(backend), dtype_(dtype), count_(static_cast<int64_t>(values.size())), owned_(!memory) {
    const auto bytes = encode(dtype, values);
    data_ = memory ? memory : backend.allocate(bytes.size());
    backend.copy_to_device(data_, bytes.data(), bytes.size());
  }
  ~Buffer() {
    if (owned_) backend_.deallocate(data_);
  }
  Tensor tensor() const { return Tensor(data_, {count_}, dtype_, Layout::nchw, backend_.device()); }
  std::vector<double> values() const {
    std::vector<std::byte> bytes(static_cast<size_t>(count_) * dtype_size(dtype_));
    backend_.copy_to_host(bytes.data(), data_, bytes.size());
    std::vector<double> out(static_cast<size_t>(count_));
    for (size_t i = 0; i < out.size(); ++i) out[i] = decode(dtype_, bytes, i);
    return out;
  }

 private:
  Backend& backend_;
  DType dtype_;
  int64_t count_;
  bool owned_;
  void* data_ = nullptr;
};

// Every rank sums small integers (comm_bench_value) whose total is exact in f32, f16 and bf16; two
// tensors in flight at once, then one wait; every element compared exactly.
// `memory`: both tensors there (the second 4 KiB-aligned after the first) instead of the backend's.
inline void expect_exact_all_reduce(Communicator& comm, Backend& backend, DType dtype, int64_t count,
                                    std::byte* memory = nullptr) {
  const int n = comm.size(), rank = comm.rank();
  std::vector<double> a(static_cast<size_t>(count)), b(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    a[static_cast<size_t>(i)] = comm_bench_value(rank, i);
    b[static_cast<size_t>(i)] = comm_bench_value(rank, i + 5);
  }
  const size_t second = (static_cast<size_t>(count) * dtype_size(dtype) + 4095) / 4096 * 4096;
  Buffer x(backend, dtype, a, memory), y(backend, dtype, b, memory ? memory + second : nullptr);
  Tensor tx = x.tensor(), ty = y.tensor();
  comm.all_reduce_sum(tx);
  comm.all_reduce_sum(ty);
  comm.wait_all_reduces();
  const auto gx = x.values(), gy = y.values();
  int64_t wrong = 0;
  for (int64_t i = 0; i < count; ++i) {
    double ex = 0, ey = 0;
    for (int r = 0; r < n; ++r) {
      ex += comm_bench_value(r, i);
      ey += comm_bench_value(r, i + 5);
    }
    if (gx[static_cast<size_t>(i)] != ex || gy[static_cast<size_t>(i)] != ey) {
      if (wrong++ < 3) {
        ADD_FAILURE() << "rank " << rank << " " << dtype_name(dtype) << "[" << count << "] element " << i
                      << ": " << gx[static_cast<size_t>(i)] << ", " << gy[static_cast<size_t>(i)]
                      << " expected " << ex << ", " << ey;
      }
    }
  }
  EXPECT_EQ(wrong, 0) << "rank " << rank << " " << dtype_name(dtype) << "[" << count << "]";
}

// Root's values reach every rank; the others' are overwritten.
inline void expect_broadcast(Communicator& comm, Backend& backend, DType dtype, int root, int64_t count) {
  std::vector<double> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    v[static_cast<size_t>(i)] = comm_bench_value(comm.rank(), i) + 10 * comm.rank();
  Buffer x(backend, dtype, v);
  Tensor t = x.tensor();
  comm.broadcast(t, root);
  const auto got = x.values();
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(got[static_cast<size_t>(i)], comm_bench_value(root, i) + 10 * root)
        << "rank " << comm.rank() << " element " << i << " of a broadcast from " << root;
  }
}

// sum, max and all_gather with values that make a wrong rank order or a missing rank visible.
inline void expect_control_plane(Communicator& comm) {
  const int n = comm.size(), rank = comm.rank();
  EXPECT_EQ(comm.sum(rank + 1.0), n * (n + 1) / 2.0);
  EXPECT_EQ(comm.sum(0.5), 0.5 * n);
  EXPECT_EQ(comm.max(rank == n - 1 ? -3.0 : -10.0 - rank), -3.0);
  EXPECT_EQ(comm.max(100.0 * rank), 100.0 * (n - 1));
  // Lengths differ by rank; the last string is empty.
  auto text_of = [n](int r) {
    return fmt::format("{:x>{}}", "", 3 * (n - 1 - r)) + (r == n - 1 ? "" : fmt::format("r{}", r));
  };
  const auto all = comm.all_gather(text_of(rank));
  ASSERT_EQ(static_cast<int>(all.size()), n);
  for (int r = 0; r < n; ++r) EXPECT_EQ(all[static_cast<size_t>(r)], text_of(r)) << "rank " << r;
  comm.barrier();
}

}  // namespace dlbench::parallel::parallel_testing
