#include "data/epoch_sampler.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "core/status.h"
#include "data/random.h"

namespace dlbench {

EpochSampler::EpochSampler(int64_t dataset_size, uint64_t seed, bool shuffle, int rank, int world_size)
    : dataset_size_(dataset_size), seed_(seed), shuffle_(shuffle), rank_(rank), world_size_(world_size) {
  DLB_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "rank {} of world size {}", rank, world_size);
  DLB_REQUIRE(dataset_size > 0, "the dataset is empty; use a dataset with at least one sample");
  DLB_REQUIRE(
      dataset_size >= world_size,
      "the dataset has {} samples, fewer than the {} ranks sharing it; use fewer ranks or a larger dataset",
      dataset_size, world_size);
}

int64_t EpochSampler::batches_per_epoch(int64_t batch_size) const {
  DLB_REQUIRE(batch_size >= 1, "batch size must be at least 1, got {}", batch_size);
  DLB_REQUIRE(batch_size <= shard_size(),
              "batch size {} exceeds the {} samples each of the {} ranks gets per epoch; use a smaller batch",
              batch_size, shard_size(), world_size_);
  return shard_size() / batch_size;
}

std::vector<int64_t> EpochSampler::epoch_order(int64_t epoch) const {
  DLB_CHECK(epoch >= 0, "epoch {}", epoch);
  const int64_t shard = shard_size();
  const int64_t first = static_cast<int64_t>(rank_) * shard;
  std::vector<int64_t> order(static_cast<size_t>(shuffle_ ? dataset_size_ : shard));
  std::iota(order.begin(), order.end(), shuffle_ ? 0 : first);
  if (!shuffle_) return order;

  // Fisher-Yates over the whole dataset, identical on every rank; then keep this rank's slice.
  std::mt19937_64 rng(data_rng::derive_seed(seed_, static_cast<uint64_t>(epoch)));
  for (int64_t i = dataset_size_ - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(data_rng::uniform_below(rng, static_cast<uint64_t>(i) + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return std::vector<int64_t>(order.begin() + first, order.begin() + first + shard);
}

std::span<const int64_t> EpochSampler::batch(std::span<const int64_t> order, int64_t b, int64_t batch_size) {
  DLB_CHECK(batch_size >= 1 && b >= 0 && (b + 1) * batch_size <= static_cast<int64_t>(order.size()),
            "batch {} of size {} in an order of {}", b, batch_size, order.size());
  return order.subspan(static_cast<size_t>(b * batch_size), static_cast<size_t>(batch_size));
}

EvaluationBatches::EvaluationBatches(int64_t dataset_size, int64_t batch_size)
    : dataset_size_(dataset_size), batch_size_(batch_size) {
  DLB_CHECK(dataset_size >= 0, "dataset size {}", dataset_size);
  DLB_REQUIRE(batch_size >= 1, "evaluation batch size must be at least 1, got {}", batch_size);
}

std::vector<int64_t> EvaluationBatches::indices(int64_t b) const {
  DLB_CHECK(b >= 0 && b < count(), "evaluation batch {} of {}", b, count());
  const int64_t first = b * batch_size_;
  std::vector<int64_t> out(static_cast<size_t>(std::min(batch_size_, dataset_size_ - first)));
  std::iota(out.begin(), out.end(), first);
  return out;
}

}  // namespace dlbench
