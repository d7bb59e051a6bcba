// Sample order: which samples a rank visits in an epoch, and in what order.
//
// Every rank builds the same global order for epoch e (a permutation derived from seed and e alone,
// so no communication is needed) and takes its own contiguous shard of it. Shards have equal length,
// floor(dataset_size / world_size), so all ranks run the same number of steps; the up to world_size - 1
// samples left over are skipped for that epoch (different ones each epoch when shuffling).
//
// The permutation uses std::mt19937_64 with a Fisher-Yates shuffle written here (std::shuffle's algorithm
// is implementation-defined), so an order is bit-identical on every platform and standard library.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dlbench {

class EpochSampler {
 public:
  // UserError if the dataset is empty or smaller than world_size; rank must be in [0, world_size).
  EpochSampler(int64_t dataset_size, uint64_t seed, bool shuffle, int rank = 0, int world_size = 1);

  int64_t dataset_size() const { return dataset_size_; }
  // Samples this rank visits per epoch (the same on every rank).
  int64_t shard_size() const { return dataset_size_ / world_size_; }
  // Full batches of `batch_size` (per rank) in an epoch; a last partial batch is dropped so that every
  // step has the same shape. UserError if batch_size < 1 or no full batch fits in a shard.
  int64_t batches_per_epoch(int64_t batch_size) const;

  // This rank's shard_size() sample indices for `epoch`, in visiting order. Without shuffling, the
  // identity order (rank r gets [r * shard_size(), (r + 1) * shard_size())), the same every epoch.
  std::vector<int64_t> epoch_order(int64_t epoch) const;

  // Batch `b` of an epoch order: its elements [b * batch_size, (b + 1) * batch_size).
  static std::span<const int64_t> batch(std::span<const int64_t> order, int64_t b, int64_t batch_size);

 private:
  int64_t dataset_size_;
  uint64_t seed_;
  bool shuffle_;
  int rank_, world_size_;
};

// Evaluation order: every sample exactly once, in index order, in batches of batch_size with a last
// partial batch when batch_size does not divide the dataset.
class EvaluationBatches {
 public:
  // UserError if batch_size < 1; an empty dataset gives no batches.
  EvaluationBatches(int64_t dataset_size, int64_t batch_size);
  int64_t count() const { return (dataset_size_ + batch_size_ - 1) / batch_size_; }
  // Sample indices of batch b: batch_size of them, fewer for the last batch.
  std::vector<int64_t> indices(int64_t b) const;

 private:
  int64_t dataset_size_, batch_size_;
};

}  // namespace dlbench
