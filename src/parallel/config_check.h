// Every rank of a run must have been started with the same settings: a rank with another batch size or
// learning rate trains a different model, silently. check_same_config compares the resolved configs.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace dlbench::parallel {

// Collective. All-gathers every rank's resolved config (serialised JSON) and, where a rank's differs from
// rank 0's, throws the same UserError on every rank naming the flag(s) that differ and their values, e.g.
//   "the ranks were started with different settings: --batch-size (batch_size): rank 0 has 32, rank 1 has 64"
// Keys listed in `rank_specific` (a GPU index, an output path) are left out of the comparison.
void check_same_config(Communicator& comm, const nlohmann::json& resolved_config,
                       const std::vector<std::string>& rank_specific = {});

// The config keys (top-level, or "a/b" below it) whose values differ between `a` and `b`, sorted.
std::vector<std::string> differing_keys(const nlohmann::json& a, const nlohmann::json& b);

}  // namespace dlbench::parallel
