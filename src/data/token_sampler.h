// The windows a rank visits in an epoch of language-model training, and in what order.
//
// An epoch cuts the data into non-overlapping windows of seq_len + 1 tokens, seq_len apart (each
// window's last token is the next one's first: every token is a target once), as many as fit:
// W = (size - 1) / seq_len. They leave `slack` = size - 1 - W * seq_len tokens over (fewer than seq_len),
// and each epoch the windows start at a random offset in [0, slack]: a fixed cut would never train on
// the tokens of the slack at the end, a shifting one reaches every token over the epochs, and the
// boundaries between windows (where a token is predicted with the least context) move with it. The number
// of windows stays W, so every epoch has the same number of steps. (An offset anywhere in [0, seq_len)
// would move the boundaries further but cost a window per epoch when slack < seq_len - 1: a whole window
// is worth more to small data than a wider spread of boundaries to large data, where slack is large
// anyway.)
//
// The order of the W windows and each rank's share come from EpochSampler (epoch_sampler.h): the same
// seeded permutation on every rank, each taking its own contiguous slice of W / world_size windows; the
// up to world_size - 1 left over are skipped that epoch, different ones each epoch. The offset is drawn
// from its own stream of the seed. Without shuffling (evaluation): offset 0 and the windows in order.
//
// No state: an epoch's order is a function of (seed, epoch), so a run resumes at (epoch, step) by taking
// epoch_starts(epoch) and its batch `step` (EpochSampler::batch).
#pragma once

#include <cstdint>
#include <vector>

#include "data/epoch_sampler.h"
#include "data/token_source.h"

namespace dlbench {

class TokenWindowSampler {
 public:
  // UserError if a window is longer than the data (TokenSource::windows) or there are fewer windows than
  // ranks; rank must be in [0, world_size).
  TokenWindowSampler(const TokenSource& source, int64_t seq_len, uint64_t seed, bool shuffle, int rank = 0,
                     int world_size = 1);

  int64_t seq_len() const { return seq_len_; }
  int64_t windows() const { return windows_.dataset_size(); }         // per epoch, all ranks together
  int64_t windows_per_rank() const { return windows_.shard_size(); }  // the same on every rank
  int64_t slack() const { return slack_; }
  // Full batches of batch_size windows per rank and epoch (EpochSampler::batches_per_epoch).
  int64_t batches_per_epoch(int64_t batch_size) const { return windows_.batches_per_epoch(batch_size); }

  // The first token of window 0 in `epoch`, in [0, slack()].
  int64_t offset(int64_t epoch) const;
  // This rank's windows_per_rank() window starts (token positions) for `epoch`, in visiting order; each
  // is offset(epoch) + k * seq_len() for a window index k, for TokenSource::gather.
  std::vector<int64_t> epoch_starts(int64_t epoch) const;

 private:
  int64_t seq_len_;
  uint64_t seed_;
  bool shuffle_;
  EpochSampler windows_;  // over window indices
  int64_t slack_;
};

}  // namespace dlbench
