#include "data/token_source.h"

#include <algorithm>

#include "core/status.h"

namespace dlbench {

int64_t TokenSource::windows(int64_t seq_len) const {
  DLB_REQUIRE(seq_len >= 1, "sequence length {}: must be at least 1", seq_len);
  DLB_REQUIRE(seq_len + 1 <= size(),
              "{}: a window of {} + 1 tokens is longer than the data's {} tokens; use a shorter sequence "
              "length or more data",
              name(), seq_len, size());
  return (size() - 1) / seq_len;
}

void TokenSource::gather(std::span<const int64_t> starts, Tensor& inputs, Tensor& targets) const {
  const auto n = static_cast<int64_t>(starts.size());
  DLB_CHECK(inputs.dtype() == DType::i32 && targets.dtype() == DType::i32 && inputs.rank() == 2 &&
                inputs.dims() == targets.dims() && inputs.dim(0) == n &&
                inputs.device().kind == DeviceKind::cpu && targets.device().kind == DeviceKind::cpu,
            "token batch {} / {} for {} windows", inputs.describe(), targets.describe(), n);
  const int64_t seq_len = inputs.dim(1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = starts[static_cast<size_t>(i)];
    DLB_CHECK(s >= 0 && s + seq_len + 1 <= size(), "window at {} of {} tokens in {} tokens", s, seq_len + 1,
              size());
    const std::span<int32_t> in(inputs.ptr<int32_t>() + i * seq_len, static_cast<size_t>(seq_len));
    const std::span<int32_t> out(targets.ptr<int32_t>() + i * seq_len, static_cast<size_t>(seq_len));
    // The targets are the inputs shifted by one: read the window once, and only its last token again.
    read(s, in);
    std::copy(in.begin() + 1, in.end(), out.begin());
    read(s + seq_len, out.last(1));
  }
}

}  // namespace dlbench
