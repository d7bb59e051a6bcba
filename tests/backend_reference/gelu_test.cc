// gelu_forward / gelu_backward: GELU in GPT-2's tanh form.
#include <gtest/gtest.h>

#include "backend/reference/reference_backend.h"
#include "gradient_check.h"
#include "reference_test_util.h"
#include "transformer_test_util.h"

namespace dlbench {
namespace {

using namespace testing;

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), evaluated independently (Python's math module). The
// erf form would give gelu(1) = 0.8413447460685429: the test tells the two apart.
TEST(Gelu, KnownValuesOfTheTanhForm) {
  ReferenceBackend backend;
  const std::vector<double> x = {0, 1, -1, 2, -2, 0.5, 3};
  const std::vector<double> expected = {0,
                                        0.8411919906082768,
                                        -0.15880800939172324,
                                        1.954597694087775,
                                        -0.04540230591222494,
                                        0.34571400982514394,
                                        2.996362607918227};
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    HostBuffer in = from_values({int64_t(x.size())}, dtype, x), out = zeros({int64_t(x.size())}, dtype);
    backend.gelu_forward(in.tensor(), out.tensor());
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_NEAR(get_element(out.tensor(), int64_t(i)), expected[i], dtype == DType::f32 ? 1e-7 : 1e-15)
          << "gelu(" << x[i] << ")";
  }
}

TEST(GeluGradient, MatchesCentralDifferences) {
  ReferenceBackend backend;
  const std::vector<int64_t> dims = {kBatch, kSeq, 4 * kChannels};
  HostBuffer x = random_buffer(dims, DType::f64, Layout::nchw, 51, -4.0, 4.0);
  HostBuffer r = random_buffer(dims, DType::f64, Layout::nchw, 52);
  HostBuffer y = zeros(dims, DType::f64), dx = zeros(dims, DType::f64);
  backend.gelu_backward(x.tensor(), r.tensor(), dx.tensor());
  auto loss = [&] {
    backend.gelu_forward(x.tensor(), y.tensor());
    return weighted_sum(y.tensor(), r.tensor());
  };
  EXPECT_TRUE(gradient_matches(loss, x.tensor(), dx.tensor(), kGradientTolerance));
}

TEST(Gelu, F32MatchesF64) {
  ReferenceBackend backend;
  const std::vector<int64_t> dims = {kBatch, kSeq, kChannels};
  HostBuffer x64 = f32_exact_buffer(dims, DType::f64, 53, -4.0, 4.0),
             dy64 = f32_exact_buffer(dims, DType::f64, 54);
  HostBuffer x32 = as_dtype(x64.tensor(), DType::f32), dy32 = as_dtype(dy64.tensor(), DType::f32);
  HostBuffer y64 = zeros(dims, DType::f64), dx64 = zeros(dims, DType::f64);
  HostBuffer y32 = zeros(dims, DType::f32), dx32 = zeros(dims, DType::f32);
  backend.gelu_forward(x64.tensor(), y64.tensor());
  backend.gelu_forward(x32.tensor(), y32.tensor());
  backend.gelu_backward(x64.tensor(), dy64.tensor(), dx64.tensor());
  backend.gelu_backward(x32.tensor(), dy32.tensor(), dx32.tensor());
  EXPECT_LT(relative_error(y32.tensor(), y64.tensor()), kF32VsF64Tolerance);
  EXPECT_LT(relative_error(dx32.tensor(), dx64.tensor()), kF32VsF64Tolerance);
}

}  // namespace
}  // namespace dlbench
