// FP8 quantization and delayed scaling (fp8_quantize.cu) against the host's exact rules (core/fp8): every
// code of q and of its transpose equal to float_to_fp8(x * scale) in E4M3 and E5M2, from f32, f16 and bf16
// inputs, on shapes of both kernels, whole tiles and partial ones; values past the format's range saturate;
// amax is max |x| with NaN ignored, folded into what *amax held before; the step end's histories and
// scales follow fp8_scale_from_amax to the bit.
#include <gtest/gtest.h>

#ifndef DLBENCH_WITH_CUDA
TEST(CudaKernels, Skipped) { GTEST_SKIP() << "no CUDA GPU: dlbench was built without CUDA"; }
#else

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/fp8.h"
#include "cuda_kernels_test_util.h"

namespace dlbench {
namespace {

using testing::DeviceBuffer;
using testing::get;
using testing::random_values;
using testing::set;

class CudaFp8Quantize : public testing::CudaKernelTest {};

struct Shape {
  int64_t rows, cols;
};

TEST_F(CudaFp8Quantize, CodesMatchTheHostConversionAndTheTransposeAndAmaxFollow) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (Fp8Format format : {Fp8Format::e4m3, Fp8Format::e5m2}) {
      // Shapes of the generic kernel (rows not a multiple of 4, or columns not of 8) and of the wide one
      // (whole 64 x 128 tiles and partial ones).
      for (Shape s : {Shape{1, 1}, Shape{33, 70}, Shape{200, 7}, Shape{32, 32}, Shape{100, 36},
                      Shape{260, 132}, Shape{100, 40}, Shape{260, 264}, Shape{768, 2304}}) {
        const int64_t n = s.rows * s.cols;
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + fp8_format_name(format) + " " +
                     std::to_string(s.rows) + "x" + std::to_string(s.cols));
        // Values up to 600: with a scale of 2, E4M3 (largest 448) saturates many of them.
        HostBuffer x = random_values(n, dtype, 7 + static_cast<uint64_t>(n), -600.0, 600.0);
        if (n > 3) set(x, 3, NAN);
        const float scale = 2.f, earlier_amax = 1.f;
        DeviceBuffer dx(x.tensor().bytes()), dq(static_cast<size_t>(n)), dqt(static_cast<size_t>(n)),
            dscale(sizeof(float)), damax(sizeof(float));
        dx.upload(x);
        dscale.upload(&scale, sizeof scale);
        damax.upload(&earlier_amax, sizeof earlier_amax);
        cuda::quantize_fp8(dx.get(), dtype, s.rows, s.cols, format, dscale.as<float>(), dq.as<uint8_t>(),
                           dqt.as<uint8_t>(), damax.as<float>(), stream_);
        sync();
        std::vector<uint8_t> q(static_cast<size_t>(n)), qt(static_cast<size_t>(n));
        float amax = 0;
        dq.download(q.data(), q.size());
        dqt.download(qt.data(), qt.size());
        damax.download(&amax, sizeof amax);

        double expected_amax = earlier_amax;
        int64_t wrong = 0, wrong_transposed = 0;
        for (int64_t r = 0; r < s.rows; ++r) {
          for (int64_t c = 0; c < s.cols; ++c) {
            const double v = get(x, r * s.cols + c);
            if (!std::isnan(v)) expected_amax = std::max(expected_amax, std::abs(v));
            const uint8_t code = float_to_fp8(static_cast<float>(v) * scale, format);
            wrong += q[static_cast<size_t>(r * s.cols + c)] != code;
            wrong_transposed += qt[static_cast<size_t>(c * s.rows + r)] != code;
          }
        }
        EXPECT_EQ(wrong, 0) << "codes differ from float_to_fp8";
        EXPECT_EQ(wrong_transposed, 0) << "transposed codes differ";
        EXPECT_EQ(amax, static_cast<float>(expected_amax)) << "amax is not max |x| (NaN ignored)";
      }
    }
  }
}

// Without a transpose or an amax the kernel writes q alone; a larger earlier amax stays.
TEST_F(CudaFp8Quantize, OptionalOutputsAndAnEarlierLargerAmax) {
  const int64_t rows = 64, cols = 96, n = rows * cols;
  HostBuffer x = random_values(n, DType::bf16, 11, -1.0, 1.0);
  const float scale = 100.f, earlier_amax = 5.f;
  DeviceBuffer dx(x.tensor().bytes()), dq(static_cast<size_t>(n)), dscale(sizeof(float)),
      damax(sizeof(float));
  dx.upload(x);
  dscale.upload(&scale, sizeof scale);
  damax.upload(&earlier_amax, sizeof earlier_amax);
  cuda::quantize_fp8(dx.get(), DType::bf16, rows, cols, Fp8Format::e4m3, dscale.as<float>(), dq.as<uint8_t>(),
                     nullptr, nullptr, stream_);
  cuda::quantize_fp8(dx.get(), DType::bf16, rows, cols, Fp8Format::e4m3, dscale.as<float>(), dq.as<uint8_t>(),
                     nullptr, damax.as<float>(), stream_);
  sync();
  std::vector<uint8_t> q(static_cast<size_t>(n));
  float amax = 0;
  dq.download(q.data(), q.size());
  damax.download(&amax, sizeof amax);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(q[static_cast<size_t>(i)], float_to_fp8(static_cast<float>(get(x, i)) * scale, Fp8Format::e4m3))
        << i;
  EXPECT_EQ(amax, earlier_amax) << "every |x| is below the earlier amax, which must stay";
}

// The bias gradient's column sums made in the quantizing pass: the same codes as quantize_fp8, and each
// column's sum (written, then added to) within f32's rounding of the host's f64 sum, on shapes of both
// kernels; the same bits on a second run (no atomics).
TEST_F(CudaFp8Quantize, ColumnSumsInTheSamePassMatchTheHost) {
  for (DType sums_dtype : {DType::f32, DType::bf16}) {
    for (Shape s :
         {Shape{37, 70}, Shape{200, 7}, Shape{64, 96}, Shape{260, 132}, Shape{260, 136}, Shape{1024, 768}}) {
      const int64_t n = s.rows * s.cols;
      SCOPED_TRACE(std::string(dtype_name(sums_dtype)) + " sums " + std::to_string(s.rows) + "x" +
                   std::to_string(s.cols));
      const HostBuffer x = random_values(n, DType::bf16, 21 + static_cast<uint64_t>(n), -1.0, 1.0);
      const HostBuffer before = random_values(s.cols, sums_dtype, 22, -1.0, 1.0);
      const float scale = 64.f;
      const int64_t partial_rows = cuda::fp8_column_partial_rows(s.rows);
      DeviceBuffer dx(x.tensor().bytes()), dq(static_cast<size_t>(n)), dqt(static_cast<size_t>(n)),
          dscale(sizeof(float)), dpartials(static_cast<size_t>(partial_rows * s.cols) * sizeof(float)),
          dsums(before.tensor().bytes());
      dx.upload(x);
      dscale.upload(&scale, sizeof scale);
      std::vector<std::vector<uint8_t> > runs;
      for (bool accumulate : {false, true}) {
        dsums.upload(before);
        const int64_t rows_written = cuda::quantize_fp8_summing_columns(
            dx.get(), DType::bf16, s.rows, s.cols, Fp8Format::e5m2, dscale.as<float>(), dq.as<uint8_t>(),
            dqt.as<uint8_t>(), nullptr, dpartials.as<float>(), stream_);
        ASSERT_GE(rows_written, 1);
        ASSERT_LE(rows_written, partial_rows);
        cuda::sum_column_partials(dpartials.as<float>(), rows_written, s.cols, dsums.get(), sums_dtype,
                                  accumulate, stream_);
        sync();
        std::vector<uint8_t> q(static_cast<size_t>(n));
        dq.download(q.data(), q.size());
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; ++i)
          wrong += q[static_cast<size_t>(i)] !=
                   float_to_fp8(static_cast<float>(get(x, i)) * scale, Fp8Format::e5m2);
        EXPECT_EQ(wrong, 0) << "codes differ from float_to_fp8";
        HostBuffer sums(std::vector<int64_t>{s.cols}, sums_dtype);
        dsums.download(sums);
        // f32 sums of up to 1,024 values in [-1, 1], then (bf16) rounded to 8 bits.
        const double tolerance = sums_dtype == DType::bf16 ? 1e-2 : 1e-4;
        for (int64_t c = 0; c < s.cols; ++c) {
          double expected = accumulate ? get(before, c) : 0.0;
          for (int64_t r = 0; r < s.rows; ++r) expected += get(x, r * s.cols + c);
          EXPECT_NEAR(get(sums, c), expected, tolerance * std::max(1.0, std::abs(expected)))
              << "column " << c << (accumulate ? " (added to)" : "");
        }
        std::vector<uint8_t> bytes(sums.tensor().bytes());
        std::memcpy(bytes.data(), sums.tensor().data(), bytes.size());
        runs.push_back(std::move(bytes));
      }
      // Run again: the same bits.
      dsums.upload(before);
      cuda::sum_column_partials(
          dpartials.as<float>(),
          cuda::quantize_fp8_summing_columns(dx.get(), DType::bf16, s.rows, s.cols, Fp8Format::e5m2,
                                             dscale.as<float>(), dq.as<uint8_t>(), nullptr, nullptr,
                                             dpartials.as<float>(), stream_),
          s.cols, dsums.get(), sums_dtype, true, stream_);
      sync();
      HostBuffer again(std::vector<int64_t>{s.cols}, sums_dtype);
      dsums.download(again);
      EXPECT_EQ(std::memcmp(again.tensor().data(), runs[1].data(), runs[1].size()), 0)
          << "the sums differ between two runs";
    }
  }
}

// GELU (or its gradient) taken on the way through the quantization: the same codes, transposed codes, amax
// and column sums, to the bit, as gelu_forward (gelu_backward) writing its result and the quantization
// reading it; and not the codes of x itself (the prologue did something). Shapes of both kernels.
TEST_F(CudaFp8Quantize, GeluOnTheWayMatchesTheSeparatePassToTheBit) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (const auto kind : {cuda::Fp8Prologue::Kind::gelu, cuda::Fp8Prologue::Kind::gelu_gradient}) {
      for (Shape s : {Shape{33, 70}, Shape{64, 96}, Shape{260, 132}, Shape{260, 136}}) {
        const bool gradient = kind == cuda::Fp8Prologue::Kind::gelu_gradient;
        const int64_t n = s.rows * s.cols, partial_rows = cuda::fp8_column_partial_rows(s.rows);
        SCOPED_TRACE(std::string(dtype_name(dtype)) + (gradient ? " GELU's gradient " : " GELU ") +
                     std::to_string(s.rows) + "x" + std::to_string(s.cols));
        const HostBuffer x = random_values(n, dtype, 41 + static_cast<uint64_t>(n), -3.0, 3.0),
                         gelu_input = random_values(n, dtype, 42 + static_cast<uint64_t>(n), -3.0, 3.0);
        const size_t bytes = x.tensor().bytes();
        DeviceBuffer dx(bytes), dinput(bytes), dseparate(bytes), dscale(sizeof(float));
        dx.upload(x);
        dinput.upload(gelu_input);
        const float scale = 32.f;
        dscale.upload(&scale, sizeof scale);
        struct Result {
          std::vector<uint8_t> q, qt;
          float amax = 0;
          std::vector<float> sums;
        };
        // Quantizes `from` (after `prologue`): codes both ways, amax and column sums.
        auto quantize = [&](const void* from, const cuda::Fp8Prologue& prologue) {
          DeviceBuffer dq(static_cast<size_t>(n)), dqt(static_cast<size_t>(n)), damax(sizeof(float)),
              dpartials(static_cast<size_t>(partial_rows * s.cols) * sizeof(float)),
              dsums(static_cast<size_t>(s.cols) * sizeof(float));
          const float zero = 0;
          damax.upload(&zero, sizeof zero);
          const int64_t written = cuda::quantize_fp8_summing_columns(
              from, dtype, s.rows, s.cols, Fp8Format::e5m2, dscale.as<float>(), dq.as<uint8_t>(),
              dqt.as<uint8_t>(), damax.as<float>(), dpartials.as<float>(), stream_, prologue);
          cuda::sum_column_partials(dpartials.as<float>(), written, s.cols, dsums.get(), DType::f32, false,
                                    stream_);
          sync();
          Result r{std::vector<uint8_t>(static_cast<size_t>(n)), std::vector<uint8_t>(static_cast<size_t>(n)),
                   0.f, std::vector<float>(static_cast<size_t>(s.cols))};
          dq.download(r.q.data(), r.q.size());
          dqt.download(r.qt.data(), r.qt.size());
          damax.download(&r.amax, sizeof r.amax);
          dsums.download(r.sums.data(), r.sums.size() * sizeof(float));
          return r;
        };
        if (gradient)
          cuda::gelu_backward(dinput.get(), dx.get(), dseparate.get(), dtype, n, stream_);
        else
          cuda::gelu_forward(dx.get(), dseparate.get(), dtype, n, stream_);
        const Result separate = quantize(dseparate.get(), {});
        cuda::Fp8Prologue prologue;
        prologue.kind = kind;
        if (gradient) prologue.gelu_input = dinput.get();
        const Result on_the_way = quantize(dx.get(), prologue);
        EXPECT_EQ(on_the_way.q, separate.q) << "codes";
        EXPECT_EQ(on_the_way.qt, separate.qt) << "transposed codes";
        EXPECT_EQ(on_the_way.amax, separate.amax) << "amax";
        EXPECT_EQ(std::memcmp(on_the_way.sums.data(), separate.sums.data(), separate.sums.size() * 4), 0)
            << "column sums";
        EXPECT_NE(on_the_way.q, quantize(dx.get(), {}).q) << "the codes of x itself: no GELU was taken";
      }
    }
  }
}

// Delayed scaling's step end: histories shift with the amax entering first, the amaxes are zeroed, and each
// scale is core/fp8's fp8_scale_from_amax of its history's maximum, to the bit; an operand that saw nothing
// keeps its scale.
TEST_F(CudaFp8Quantize, ScalesFollowTheAmaxHistory) {
  const int count = 300, length = 4, margin = 1;
  std::vector<float> amaxes(count), histories(count * length), scales(count, 4.f);
  std::vector<Fp8Format> formats(count);
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> dist(0.f, 100.f);
  for (int i = 0; i < count; ++i) {
    amaxes[static_cast<size_t>(i)] = i % 7 == 0 ? 0.f : dist(rng);
    for (int j = 0; j < length; ++j)
      histories[static_cast<size_t>(i * length + j)] = i % 7 == 0 ? 0.f : dist(rng);
    formats[static_cast<size_t>(i)] = i % 2 ? Fp8Format::e5m2 : Fp8Format::e4m3;
  }
  DeviceBuffer damax(amaxes.size() * sizeof(float)), dhistory(histories.size() * sizeof(float)),
      dscale(scales.size() * sizeof(float)), dinverse(scales.size() * kFp8InverseScaleStride * sizeof(float)),
      dformat(formats.size() * sizeof(Fp8Format));
  damax.upload(amaxes.data(), amaxes.size() * sizeof(float));
  dhistory.upload(histories.data(), histories.size() * sizeof(float));
  dscale.upload(scales.data(), scales.size() * sizeof(float));
  dformat.upload(formats.data(), formats.size() * sizeof(Fp8Format));
  cuda::update_fp8_scales(damax.as<float>(), dhistory.as<float>(), length, dscale.as<float>(),
                          dinverse.as<float>(), dformat.as<Fp8Format>(), count, margin, stream_);
  sync();
  std::vector<float> new_amaxes(count), new_histories(histories.size()), new_scales(count),
      inverses(static_cast<size_t>(count * kFp8InverseScaleStride));
  dinverse.download(inverses.data(), inverses.size() * sizeof(float));
  damax.download(new_amaxes.data(), new_amaxes.size() * sizeof(float));
  dhistory.download(new_histories.data(), new_histories.size() * sizeof(float));
  dscale.download(new_scales.data(), new_scales.size() * sizeof(float));
  for (int i = 0; i < count; ++i) {
    const auto at = [&](int j) { return static_cast<size_t>(i * length + j); };
    EXPECT_EQ(new_amaxes[static_cast<size_t>(i)], 0.f) << i;
    EXPECT_EQ(new_histories[at(0)], amaxes[static_cast<size_t>(i)]) << i;
    float largest = new_histories[at(0)];
    for (int j = 1; j < length; ++j) {
      EXPECT_EQ(new_histories[at(j)], histories[at(j - 1)]) << i << " entry " << j;
      largest = std::max(largest, new_histories[at(j)]);
    }
    EXPECT_EQ(new_scales[static_cast<size_t>(i)],
              fp8_scale_from_amax(largest, formats[static_cast<size_t>(i)], margin, 4.f))
        << i;
    EXPECT_EQ(inverses[static_cast<size_t>(i * kFp8InverseScaleStride)],
              1.f / new_scales[static_cast<size_t>(i)])
        << i;
  }
}

// The round trip the backends without FP8 GEMMs apply: y = fp8(x * s) / s, to the bit the host's
// conversion gives (the scale a power of two, the result exact in every output dtype), amax folded.
TEST_F(CudaFp8Quantize, RoundTripMatchesTheHostConversion) {
  const int64_t n = 100003;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (Fp8Format format : {Fp8Format::e4m3, Fp8Format::e5m2}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + fp8_format_name(format));
      HostBuffer x = random_values(n, dtype, 11, -300.0, 300.0);
      const float scale = 0.25f, earlier_amax = 0.f;
      DeviceBuffer dx(x.tensor().bytes()), dy(x.tensor().bytes()), dscale(sizeof(float)),
          damax(sizeof(float));
      dx.upload(x);
      dscale.upload(&scale, sizeof scale);
      damax.upload(&earlier_amax, sizeof earlier_amax);
      cuda::fp8_round_trip(dx.get(), dtype, n, format, dscale.as<float>(), dy.get(), dtype, damax.as<float>(),
                           stream_);
      sync();
      HostBuffer y = random_values(n, dtype, 12, 0.0, 1.0);
      dy.download(y);
      float amax = 0.f, largest = 0.f;
      damax.download(&amax, sizeof amax);
      for (int64_t i = 0; i < n; ++i) {
        const float v = static_cast<float>(get(x, i));
        largest = std::max(largest, std::fabs(v));
        ASSERT_EQ(static_cast<float>(get(y, i)),
                  fp8_to_float(float_to_fp8(v * scale, format), format) / scale)
            << i;
      }
      EXPECT_EQ(amax, largest);
    }
  }
}

}  // namespace
}  // namespace dlbench

#endif  // DLBENCH_WITH_CUDA
