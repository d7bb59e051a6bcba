// Every rank of a run must have been started with the same settings, the same dlbench and the same data: a
// rank with another batch size, another build or another copy of the data set trains a different model,
// silently. Across hosts these differ easily (an old install on one node, a data set copied half), so each
// check stops every rank before training with one line naming the rank, its host and what differs.
//
// `hosts` (rank -> host name, parallel/placement.h) names each rank's host in the message; empty: ranks only.
// Each check throws on every rank, the message on rank 0 and an empty UserError on the others (main prints
// no line for those), so that a run of 16 ranks prints its one line once.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace dlbench::parallel {

// Collective. All-gathers every rank's resolved config (serialised JSON) and, where a rank's differs from
// rank 0's, stops every rank naming the flag(s) that differ and their values, e.g.
//   "the ranks were started with different settings: --batch-size (batch_size): rank 0 (host nodea) has 32,
//    ranks 2, 3 (host nodeb) have 64; start every rank with the same flags"
// Keys listed in `rank_specific` (a GPU index, an output path) are left out of the comparison.
void check_same_config(Communicator& comm, const nlohmann::json& resolved_config,
                       const std::vector<std::string>& rank_specific = {},
                       const std::vector<std::string>& hosts = {});

// Collective. `version` is this rank's dlbench ("0.9.0 (commit 1a2b3c4)"); where a rank's differs from
// rank 0's, the same UserError on every rank, e.g.
//   "the ranks run different builds of dlbench: rank 0 (host nodea): 0.9.0 (commit 1a2b3c4); ranks 2, 3
//    (host nodeb): 0.8.0 (commit 9f8e7d6); install the same dlbench on every host"
void check_same_version(Communicator& comm, const std::string& version,
                        const std::vector<std::string>& hosts = {});

// Collective. `digest` describes this rank's training data (its size, shape, classes, label checksum);
// where a rank's differs from rank 0's, the same UserError on every rank naming both.
void check_same_data(Communicator& comm, const std::string& digest,
                     const std::vector<std::string>& hosts = {});

// The config keys (top-level, or "a/b" below it) whose values differ between `a` and `b`, sorted.
std::vector<std::string> differing_keys(const nlohmann::json& a, const nlohmann::json& b);

}  // namespace dlbench::parallel
