// dlbench's own CUDA kernels, elementwise family: fill, add, scale, cast, ReLU, bias add and gradient,
// check_finite — each against a host computation in double, in f32/f16/bf16/f64, at odd sizes, with
// aligned (vector) and misaligned (element-by-element) pointers.
#include <gtest/gtest.h>

#ifndef DLBENCH_WITH_CUDA
TEST(CudaKernels, Skipped) { GTEST_SKIP() << "no CUDA GPU: dlbench was built without CUDA"; }
#else

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/status.h"
#include "cuda_kernels_test_util.h"

namespace dlbench {
namespace {

using testing::DeviceBuffer;
using testing::float_dtypes;
using testing::get;
using testing::max_relative_error;
using testing::odd_sizes;
using testing::random_values;
using testing::rounded;
using testing::set;
using testing::tolerance;
using testing::values;

class CudaElementwise : public testing::CudaKernelTest {};

// Byte offsets of the device pointers: 0 (16-byte aligned: vector path) and one element (misaligned:
// element path).
std::vector<size_t> offsets(DType dtype) { return {0, dtype_size(dtype)}; }

std::string trace(DType dtype, int64_t n, size_t offset) {
  return std::string(dtype_name(dtype)) + " n=" + std::to_string(n) + " offset=" + std::to_string(offset);
}

TEST_F(CudaElementwise, FillWritesTheRoundedValueEverywhere) {
  std::vector<DType> dtypes = float_dtypes();
  dtypes.push_back(DType::i32);
  for (DType dtype : dtypes) {
    for (int64_t n : odd_sizes()) {
      for (size_t offset : offsets(dtype)) {
        SCOPED_TRACE(trace(dtype, n, offset));
        const double value = dtype == DType::i32 ? -12345 : 1.3;
        DeviceBuffer x((n + 4) * dtype_size(dtype), offset);
        HostBuffer out({n + 4}, dtype);  // 4 elements past the end must stay untouched
        for (int64_t i = 0; i < n + 4; ++i) set(out, i, 7);
        x.upload(out);
        cuda::fill(x.get(), dtype, n, value, stream_);
        sync();
        x.download(out);
        const double expected = rounded(value, dtype);
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; ++i) wrong += get(out, i) != expected;
        EXPECT_EQ(wrong, 0);
        for (int64_t i = n; i < n + 4; ++i) EXPECT_EQ(get(out, i), 7) << "element " << i << " past the end";
      }
    }
  }
  DeviceBuffer x(16);
  EXPECT_THROW(cuda::fill(x.get(), DType::i32, 1, 0.5, stream_), Error);
}

TEST_F(CudaElementwise, AddScaleMatchHost) {
  for (DType dtype : float_dtypes()) {
    for (int64_t n : odd_sizes()) {
      for (size_t offset : offsets(dtype)) {
        SCOPED_TRACE(trace(dtype, n, offset));
        const size_t bytes = n * dtype_size(dtype);
        HostBuffer a = random_values(n, dtype, 1), b = random_values(n, dtype, 2);
        DeviceBuffer da(bytes, offset), db(bytes, offset), dy(bytes, offset);
        da.upload(a);
        db.upload(b);
        cuda::add(da.get(), db.get(), dy.get(), dtype, n, stream_);
        // In place: b = a + b, then b *= -0.37.
        cuda::add(da.get(), db.get(), db.get(), dtype, n, stream_);
        cuda::scale(db.get(), dtype, n, -0.37, stream_);
        sync();
        HostBuffer y({n}, dtype), scaled({n}, dtype);
        dy.download(y);
        db.download(scaled);
        std::vector<double> sum(n), product(n);
        for (int64_t i = 0; i < n; ++i) {
          sum[i] = rounded(get(a, i) + get(b, i), dtype);
          product[i] = rounded(-0.37 * sum[i], dtype);
        }
        EXPECT_LE(max_relative_error(values(y), sum), tolerance(dtype));
        EXPECT_LE(max_relative_error(values(scaled), product), 2 * tolerance(dtype));
      }
    }
  }
  DeviceBuffer x(16);
  EXPECT_THROW(cuda::add(x.get(), x.get(), x.get(), DType::i32, 1, stream_), Error);
}

TEST_F(CudaElementwise, CastRoundsOnceBetweenEveryPair) {
  for (DType from : float_dtypes()) {
    for (DType to : float_dtypes()) {
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1023}, int64_t{65537}}) {
        for (bool misaligned : {false, true}) {  // both pointers one element past 16-byte alignment
          const size_t offset = misaligned ? dtype_size(from) : 0,
                       dst_offset = misaligned ? dtype_size(to) : 0;
          SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + trace(to, n, offset));
          // Magnitudes from 2^-30 to 2^20: subnormals and overflow of f16, ties of every format.
          HostBuffer src({n}, from);
          std::mt19937_64 rng(n + 17);
          std::uniform_real_distribution<double> mantissa(-1, 1);
          std::uniform_int_distribution<int> exponent(-30, 20);
          for (int64_t i = 0; i < n; ++i) set(src, i, std::ldexp(mantissa(rng), exponent(rng)));
          DeviceBuffer ds(n * dtype_size(from), offset), dd(n * dtype_size(to), dst_offset);
          ds.upload(src);
          cuda::cast(ds.get(), from, dd.get(), to, n, stream_);
          sync();
          HostBuffer dst({n}, to);
          dd.download(dst);
          int64_t wrong = 0;
          for (int64_t i = 0; i < n; ++i) {
            const double expected = rounded(get(src, i), to);
            wrong += !(get(dst, i) == expected || (std::isnan(expected) && std::isnan(get(dst, i))));
          }
          EXPECT_EQ(wrong, 0);
        }
      }
    }
  }
}

TEST_F(CudaElementwise, ReluForwardBackwardMatchHostExactly) {
  for (DType dtype : float_dtypes()) {
    for (int64_t n : odd_sizes()) {
      for (size_t offset : offsets(dtype)) {
        SCOPED_TRACE(trace(dtype, n, offset));
        const size_t bytes = n * dtype_size(dtype);
        HostBuffer x = random_values(n, dtype, 3), dy = random_values(n, dtype, 4);
        for (int64_t i = 0; i < n; i += 5) set(x, i, 0.0);  // exact zeros: masked in the backward
        DeviceBuffer dx_in(bytes, offset), dyv(bytes, offset), dydy(bytes, offset), ddx(bytes, offset);
        dx_in.upload(x);
        dydy.upload(dy);
        cuda::relu_forward(dx_in.get(), dyv.get(), dtype, n, stream_);
        cuda::relu_backward(dyv.get(), dydy.get(), ddx.get(), dtype, n, stream_);
        sync();
        HostBuffer y({n}, dtype), dx({n}, dtype);
        dyv.download(y);
        ddx.download(dx);
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double expected_y = get(x, i) < 0 ? 0.0 : get(x, i);
          const double expected_dx = expected_y > 0 ? get(dy, i) : 0.0;
          wrong += get(y, i) != expected_y || get(dx, i) != expected_dx;
        }
        EXPECT_EQ(wrong, 0);
      }
    }
  }
}

struct Matrix {
  int64_t rows, cols;
};
const std::vector<Matrix>& matrix_shapes() {
  static const std::vector<Matrix> shapes = {{1, 1},    {7, 13},   {5, 8},    {33, 1000},
                                             {1023, 7}, {3, 4096}, {65537, 3}};
  return shapes;
}

TEST_F(CudaElementwise, AddBiasMatchesHost) {
  for (DType dtype : float_dtypes()) {
    for (DType bias_dtype : {dtype, DType::f32}) {
      for (const Matrix& m : matrix_shapes()) {
        for (size_t offset : offsets(dtype)) {
          SCOPED_TRACE(trace(dtype, m.rows * m.cols, offset) + " bias " + dtype_name(bias_dtype) +
                       " cols=" + std::to_string(m.cols));
          const int64_t n = m.rows * m.cols;
          HostBuffer y = random_values(n, dtype, 5), bias = random_values(m.cols, bias_dtype, 6);
          DeviceBuffer dy(n * dtype_size(dtype), offset), db(m.cols * dtype_size(bias_dtype));
          dy.upload(y);
          db.upload(bias);
          cuda::add_bias(dy.get(), dtype, db.get(), bias_dtype, m.rows, m.cols, stream_);
          sync();
          HostBuffer out({n}, dtype);
          dy.download(out);
          std::vector<double> expected(n);
          for (int64_t i = 0; i < n; ++i) expected[i] = rounded(get(y, i) + get(bias, i % m.cols), dtype);
          EXPECT_LE(max_relative_error(values(out), expected), tolerance(dtype));
        }
      }
    }
  }
  DeviceBuffer x(64);
  EXPECT_THROW(cuda::add_bias(x.get(), DType::f16, x.get(), DType::bf16, 1, 1, stream_), Error);
}

TEST_F(CudaElementwise, BiasBackwardSumsRowsInF32AndHonoursAccumulate) {
  for (DType dtype : float_dtypes()) {
    for (DType dbias_dtype : {dtype, DType::f32}) {
      for (const Matrix& m : matrix_shapes()) {
        for (bool accumulate : {false, true}) {
          // Aligned dy (16-byte loads when cols allows) for overwrite, misaligned (element loads) for add.
          const size_t offset = accumulate ? dtype_size(dtype) : 0;
          SCOPED_TRACE(trace(dtype, m.rows * m.cols, offset) + " dbias " + dtype_name(dbias_dtype) +
                       " cols=" + std::to_string(m.cols) + (accumulate ? " accumulate" : " overwrite"));
          const int64_t n = m.rows * m.cols;
          HostBuffer dy = random_values(n, dtype, 7), dbias = random_values(m.cols, dbias_dtype, 8);
          DeviceBuffer ddy(n * dtype_size(dtype), offset), ddb(m.cols * dtype_size(dbias_dtype)),
              scratch(std::max<size_t>(cuda::bias_backward_scratch_bytes(m.rows, m.cols, dtype), 16));
          ddy.upload(dy);
          ddb.upload(dbias);
          cuda::bias_backward(ddy.get(), dtype, ddb.get(), dbias_dtype, m.rows, m.cols, accumulate,
                              scratch.get(), stream_);
          sync();
          HostBuffer out({m.cols}, dbias_dtype);
          ddb.download(out);
          std::vector<double> expected(m.cols, 0.0);
          for (int64_t r = 0; r < m.rows; ++r)
            for (int64_t c = 0; c < m.cols; ++c) expected[c] += get(dy, r * m.cols + c);
          for (int64_t c = 0; c < m.cols; ++c)
            expected[c] = rounded(expected[c] + (accumulate ? get(dbias, c) : 0.0), dbias_dtype);
          // f32 accumulation over up to 65537 rows of values in [-1, 1).
          const double tol = dbias_dtype == DType::f64 ? 1e-12 : std::max(tolerance(dbias_dtype), 1e-5);
          EXPECT_LE(max_relative_error(values(out), expected), tol);
        }
      }
    }
  }
}

TEST_F(CudaElementwise, CheckFiniteSetsTheFlagAndNeverClearsIt) {
  const double specials[] = {INFINITY, -INFINITY, NAN};
  for (DType dtype : float_dtypes()) {
    for (int64_t n : odd_sizes()) {
      for (size_t offset : offsets(dtype)) {
        SCOPED_TRACE(trace(dtype, n, offset));
        HostBuffer x = random_values(n, dtype, 9, -1e3, 1e3);
        DeviceBuffer dx(n * dtype_size(dtype), offset), flag(sizeof(int32_t));
        dx.upload(x);
        auto run = [&](int32_t initial) {
          flag.upload(&initial, sizeof(initial));
          cuda::check_finite(dx.get(), dtype, n, flag.as<int32_t>(), stream_);
          sync();
          int32_t result = -1;
          flag.download(&result, sizeof(result));
          return result;
        };
        EXPECT_EQ(run(0), 0) << "all finite";
        EXPECT_EQ(run(1), 1) << "all finite: the flag must not be cleared";
        EXPECT_EQ(run(7), 7) << "all finite: the flag is left as it was";
        // One special value at the first, the middle and the last (tail) position.
        for (int64_t where : {int64_t{0}, n / 2, n - 1}) {
          for (double special : specials) {
            const double saved = get(x, where);
            set(x, where, special);
            dx.upload(x);
            set(x, where, saved);
            EXPECT_EQ(run(0), 1) << special << " at " << where;
          }
        }
        // The largest finite values are finite.
        HostBuffer big({n}, dtype);
        const double largest = dtype == DType::f16    ? 65504.0
                               : dtype == DType::bf16 ? 3.3895313892515355e38
                               : dtype == DType::f32  ? double(std::numeric_limits<float>::max())
                                                      : std::numeric_limits<double>::max();
        for (int64_t i = 0; i < n; ++i) set(big, i, i % 2 ? largest : -largest);
        dx.upload(big);
        EXPECT_EQ(run(0), 0) << "max finite";
      }
    }
  }
}

TEST_F(CudaElementwise, EmptyLaunchesDoNothing) {
  DeviceBuffer x(64);
  cuda::fill(x.get(), DType::f32, 0, 1.0, stream_);
  cuda::add(x.get(), x.get(), x.get(), DType::f16, 0, stream_);
  cuda::check_finite(x.get(), DType::bf16, 0, x.as<int32_t>(), stream_);
  cuda::bias_backward(x.get(), DType::f32, x.get(), DType::f32, 0, 0, false, nullptr, stream_);
  sync();
  EXPECT_THROW(cuda::scale(x.get(), DType::f32, -1, 2.0, stream_), Error);
}

}  // namespace
}  // namespace dlbench

#endif  // DLBENCH_WITH_CUDA
