// Per-layer timing (`dlbench bench --per-layer`), as `caffe time` does: each layer's forward and backward
// run alone between two synchronisations, averaged over some iterations, so anyone can see where a step's
// time goes. On a GPU a layer's ops are queued behind a hold of the stream and timed between two events:
// the time of its kernels, not of the host's API calls, so the sum comes near a step's time.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nn/network.h"

namespace dlbench {

struct LayerTime {
  std::string name, kind;
  double forward_ms = 0, backward_ms = 0;
  int64_t forward_macs = 0;
  std::string plan;  // how the backend runs it (algorithms, fusion), where it says
};

std::vector<LayerTime> profile_layers(Network& net, int iterations);
// A table: layer, kind, forward ms, backward ms, share of the total, achieved forward GFLOP/s, plan.
std::string format_layer_profile(const std::vector<LayerTime>& times);
nlohmann::json to_json(const std::vector<LayerTime>& times);

// A short hex fingerprint of every layer's plan (the algorithms the backend chose, their timings left
// out): two runs with the same fingerprint ran the same kernels, so a difference in their speed is not
// the algorithm search's doing. Empty where no layer says how it runs (the CPU backends).
std::string algorithm_digest(const Network& net);
// A plan's description without what varies between runs of the same choice (times, the cache note).
std::string plan_without_timings(const std::string& plan);

}  // namespace dlbench
