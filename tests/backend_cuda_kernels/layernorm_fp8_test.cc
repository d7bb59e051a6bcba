// The layer norm that writes its output's FP8 codes (layernorm_forward_fp8, for an FP8 dense layer that
// alone reads the output) against the two passes it replaces: layernorm_forward, then quantize_fp8 of y.
// The codes in both layouts, the amax folded into what it held, and mean and rstd must be the same bits,
// in bf16 and f16, on whole tiles of 32 rows and a partial one, rows that are and are not a multiple of 16
// (the transposed stores 16 bytes at a time or byte by byte), widths of 4 to 2048 channels (2048: the tile
// past 48 KB of shared memory), and with either layout left out.
#include <gtest/gtest.h>

#ifndef DLBENCH_WITH_CUDA
TEST(CudaKernels, Skipped) { GTEST_SKIP() << "no CUDA GPU: dlbench was built without CUDA"; }
#else

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_kernels_test_util.h"

namespace dlbench {
namespace {

using testing::DeviceBuffer;
using testing::random_values;

class CudaLayerNormFp8 : public testing::CudaKernelTest {};

struct Outputs {
  std::vector<uint8_t> codes, codes_transposed;
  std::vector<float> mean, rstd;
  float amax = 0;
};

TEST_F(CudaLayerNormFp8, CodesAreThoseOfTheQuantizedOutputToTheBit) {
  struct Shape {
    int64_t rows, channels;
  };
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (Shape s : {Shape{64, 1280}, Shape{100, 768}, Shape{48, 1024}, Shape{7, 4}, Shape{33, 2048},
                    Shape{96, 1600}, Shape{16, 132}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::to_string(s.rows) + "x" +
                   std::to_string(s.channels));
      const int64_t n = s.rows * s.channels;
      // Rows of an offset and spread of their own; a weight and bias far from 1 and 0, so that y reaches
      // past E4M3's range at the scale below and saturates.
      HostBuffer x = random_values(n, dtype, 3 + static_cast<uint64_t>(n), -4.0, 4.0);
      const HostBuffer weight = random_values(s.channels, dtype, 5, -30.0, 30.0),
                       bias = random_values(s.channels, dtype, 6, -2.0, 2.0);
      DeviceBuffer dx(x.tensor().bytes()), dweight(weight.tensor().bytes()), dbias(bias.tensor().bytes()),
          dscale(sizeof(float)), dy(x.tensor().bytes());
      dx.upload(x);
      dweight.upload(weight);
      dbias.upload(bias);
      const float scale = 16.f, earlier_amax = 0.5f, eps = 1e-5f;
      dscale.upload(&scale, sizeof scale);
      // Runs `make` (codes, codes^T, amax, mean, rstd) on fresh buffers and reads them back.
      auto outputs = [&](bool codes, bool transposed, auto make) {
        DeviceBuffer dq(static_cast<size_t>(n)), dqt(static_cast<size_t>(n)), damax(sizeof(float)),
            dmean(static_cast<size_t>(s.rows) * sizeof(float)),
            drstd(static_cast<size_t>(s.rows) * sizeof(float));
        damax.upload(&earlier_amax, sizeof earlier_amax);
        make(codes ? dq.as<uint8_t>() : nullptr, transposed ? dqt.as<uint8_t>() : nullptr, damax.as<float>(),
             dmean.as<float>(), drstd.as<float>());
        sync();
        Outputs o{std::vector<uint8_t>(codes ? static_cast<size_t>(n) : 0),
                  std::vector<uint8_t>(transposed ? static_cast<size_t>(n) : 0),
                  std::vector<float>(static_cast<size_t>(s.rows)),
                  std::vector<float>(static_cast<size_t>(s.rows))};
        dq.download(o.codes.data(), o.codes.size());
        dqt.download(o.codes_transposed.data(), o.codes_transposed.size());
        damax.download(&o.amax, sizeof o.amax);
        dmean.download(o.mean.data(), o.mean.size() * sizeof(float));
        drstd.download(o.rstd.data(), o.rstd.size() * sizeof(float));
        return o;
      };
      const Outputs separate =
          outputs(true, true, [&](uint8_t* q, uint8_t* qt, float* amax, float* mean, float* rstd) {
            cuda::layernorm_forward(dx.get(), dweight.get(), dbias.get(), eps, dy.get(), mean, rstd, s.rows,
                                    s.channels, dtype, stream_);
            cuda::quantize_fp8(dy.get(), dtype, s.rows, s.channels, Fp8Format::e4m3, dscale.as<float>(), q,
                               qt, amax, stream_);
          });
      ASSERT_TRUE(cuda::layernorm_forward_fp8_takes(s.channels, dx.get(), dweight.get(), dbias.get(),
                                                    reinterpret_cast<uint8_t*>(dy.get())));
      for (const auto& [codes, transposed] :
           {std::pair{true, true}, std::pair{true, false}, std::pair{false, true}}) {
        SCOPED_TRACE(std::string(codes ? "codes " : "") + (transposed ? "codes^T" : ""));
        const Outputs fused =
            outputs(codes, transposed, [&](uint8_t* q, uint8_t* qt, float* amax, float* mean, float* rstd) {
              cuda::layernorm_forward_fp8(dx.get(), dweight.get(), dbias.get(), eps, dscale.as<float>(), q,
                                          qt, amax, mean, rstd, s.rows, s.channels, dtype, stream_);
            });
        if (codes) {
          EXPECT_TRUE(fused.codes == separate.codes) << "codes differ from quantize_fp8's of y";
        }
        if (transposed) {
          EXPECT_TRUE(fused.codes_transposed == separate.codes_transposed) << "transposed codes differ";
        }
        EXPECT_EQ(fused.amax, separate.amax);
        EXPECT_TRUE(fused.mean == separate.mean && fused.rstd == separate.rstd) << "mean or rstd differ";
      }
      EXPECT_GT(separate.amax, earlier_amax) << "the amax of y did not reach past the earlier one";
      if (n >= 1024) {
        int saturated = 0;
        for (uint8_t code : separate.codes) saturated += (code & 0x7f) == 0x7e;  // E4M3's largest, 448
        EXPECT_GT(saturated, 0) << "no code saturated: the test does not reach E4M3's range";
      }
    }
  }
}

}  // namespace
}  // namespace dlbench

#endif  // DLBENCH_WITH_CUDA
