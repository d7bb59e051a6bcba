// Helpers for the tests of the transformer ops: token buffers, f64 copies of f32 data, and the shapes
// the tests share (small, so that central differences over every element stay fast).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "reference_test_util.h"

namespace dlbench::testing {

// B = 2 sequences of T = 5 tokens, C = 8 features, 2 heads of 4, a vocabulary of V = 11.
constexpr int64_t kBatch = 2, kSeq = 5, kChannels = 8, kHeads = 2, kVocab = 11;

inline HostBuffer tokens_of(std::vector<int64_t> dims, const std::vector<int32_t>& values) {
  HostBuffer tokens(std::move(dims), DType::i32);
  EXPECT_EQ(static_cast<size_t>(tokens.numel()), values.size());
  for (size_t i = 0; i < values.size(); ++i) tokens.ptr<int32_t>()[i] = values[i];
  return tokens;
}

// A copy in another float dtype (f32 <-> f64), element by element.
inline HostBuffer as_dtype(const Tensor& src, DType dtype) { return converted(src, dtype, src.layout()); }

// Uniform data that f32 represents exactly, in `dtype`: the f32 and f64 runs of an op see the same inputs.
inline HostBuffer f32_exact_buffer(std::vector<int64_t> dims, DType dtype, uint64_t seed, double lo = -1.0,
                                   double hi = 1.0) {
  HostBuffer f32 = random_buffer(std::move(dims), DType::f32, Layout::nchw, seed, lo, hi);
  return as_dtype(f32.tensor(), dtype);
}

inline bool bit_identical(const Tensor& a, const Tensor& b, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i)
    if (get_element(a, i) != get_element(b, i)) return false;
  return true;
}

}  // namespace dlbench::testing
