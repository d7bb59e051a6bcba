#include "data/token_sampler.h"

#include <random>

#include "core/status.h"
#include "data/random.h"

namespace dlbench {
namespace {

// The offsets' stream of a seed, apart from the one EpochSampler draws the permutations from.
constexpr uint64_t kOffsetStream = 0x746f6b656e6f6666ull;  // "tokenoff"

// The windows of `source`, at least one per rank: said in tokens, which the user chose, rather than in
// EpochSampler's samples.
int64_t windows_for_ranks(const TokenSource& source, int64_t seq_len, int world_size) {
  const int64_t windows = source.windows(seq_len);
  DLB_REQUIRE(windows >= world_size,
              "{}: its {} tokens make {} windows of {} + 1, fewer than the {} ranks sharing them; use fewer "
              "ranks, a shorter sequence length or more data",
              source.name(), source.size(), windows, seq_len, world_size);
  return windows;
}

}  // namespace

TokenWindowSampler::TokenWindowSampler(const TokenSource& source, int64_t seq_len, uint64_t seed,
                                       bool shuffle, int rank, int world_size)
    : seq_len_(seq_len),
      seed_(seed),
      shuffle_(shuffle),
      windows_(windows_for_ranks(source, seq_len, world_size), seed, shuffle, rank, world_size),
      slack_(source.size() - 1 - windows_.dataset_size() * seq_len) {}

int64_t TokenWindowSampler::offset(int64_t epoch) const {
  DLB_CHECK(epoch >= 0, "epoch {}", epoch);
  if (!shuffle_ || slack_ == 0) return 0;
  std::mt19937_64 rng(
      data_rng::derive_seed(data_rng::derive_seed(seed_, kOffsetStream), static_cast<uint64_t>(epoch)));
  return static_cast<int64_t>(data_rng::uniform_below(rng, static_cast<uint64_t>(slack_) + 1));
}

std::vector<int64_t> TokenWindowSampler::epoch_starts(int64_t epoch) const {
  std::vector<int64_t> starts = windows_.epoch_order(epoch);
  const int64_t first = offset(epoch);
  for (int64_t& window : starts) window = first + window * seq_len_;
  return starts;
}

}  // namespace dlbench
