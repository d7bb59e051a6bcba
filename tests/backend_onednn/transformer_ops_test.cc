// The transformer ops on the oneDNN backend, which has no kernels for them yet: each says so by name
// (Backend's defaults), except the padded cross-entropy without padding, which is the plain op.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "backend/backend.h"
#include "core/status.h"
#include "test_util.h"

namespace dlbench {
namespace {

TEST(TransformerOpsOnOneDnn, UnimplementedOpsSaySoByName) {
  std::unique_ptr<Backend> backend = make_onednn_backend(1);
  HostBuffer x({2, 4}, DType::f32), y({2, 4}, DType::f32);
  try {
    backend->gelu_forward(x.tensor(), y.tensor());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "gelu_forward is not implemented on backend onednn");
  }
  HostBuffer out({1}, DType::f32);
  EXPECT_THROW(backend->sum_of_squares(x.tensor(), out.tensor(), Accumulate::overwrite), Error);
}

TEST(TransformerOpsOnOneDnn, UnpaddedCrossEntropyRunsThePlainOp) {
  std::unique_ptr<Backend> backend = make_onednn_backend(1);
  HostBuffer logits({2, 4}, DType::f32), labels({2}, DType::i32), probs({2, 4}, DType::f32),
      loss({1}, DType::f32);
  testing::fill_uniform(logits.tensor(), 1);
  labels.ptr<int32_t>()[0] = 3;
  labels.ptr<int32_t>()[1] = 0;
  backend->softmax_cross_entropy_padded_forward(logits.tensor(), labels.tensor(), 4, 0.0f, probs.tensor(),
                                                loss.tensor());
  backend->synchronize();
  EXPECT_GT(loss.ptr<float>()[0], 0.0f);
  EXPECT_THROW(backend->softmax_cross_entropy_padded_forward(logits.tensor(), labels.tensor(), 3, 0.0f,
                                                             probs.tensor(), loss.tensor()),
               Error);
}

}  // namespace
}  // namespace dlbench
