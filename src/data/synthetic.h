// Synthetic data: random samples for measuring throughput without a real dataset.
//
// Like the classic benchmarks (tf_cnn_benchmarks, the MLPerf reference "fake data" modes) the samples
// are generated once, at construction, and then only copied: the data pipeline costs the same as with
// a real in-memory dataset, and no time goes to random number generation during the run.
#pragma once

#include <cstdint>

#include "data/dataset.h"

namespace dlbench {

class SyntheticDataset : public InMemoryDataset {
 public:
  // `size` samples of `shape`: pixel values approximately standard normal (mean 0, variance 1, as an
  // image after per-channel normalisation) and labels uniform in [0, num_classes). A given seed gives
  // bit-identical samples on every platform. UserError if size < 1, a dimension < 1, num_classes < 1,
  // or the samples would need more than max_bytes of memory.
  SyntheticDataset(int64_t size, SampleShape shape, int num_classes, uint64_t seed);

  // Memory cap, to fail with a message instead of std::bad_alloc when a size is mistyped.
  static constexpr int64_t max_bytes = int64_t{16} << 30;
};

}  // namespace dlbench
