#include "bench/layer_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <regex>

#include "core/timer.h"

namespace dlbench {

namespace {

// Milliseconds `run` (one layer's forward or backward) takes on the backend: its ops queued behind a hold
// of the stream (Backend::hold_queue), then timed between two markers, so that a device backend's time is
// its kernels' and not the host's calls (cuDNN's legacy API spends more time on the host than a small
// convolution's kernel takes). `hold_us` is this layer's hold, updated to twice the host's time to issue it.
template <typename Run>
double time_queued(Backend& backend, double& hold_us, const Run& run) {
  backend.synchronize();
  backend.hold_queue(hold_us);
  WallTimer issue;
  const int64_t start = backend.mark();
  run();
  const int64_t stop = backend.mark();
  hold_us = std::max(500.0, 2000.0 * issue.milliseconds());
  backend.synchronize();
  return backend.marker_ms(stop) - backend.marker_ms(start);
}

}  // namespace

std::vector<LayerTime> profile_layers(Network& net, int iterations) {
  Backend& backend = net.backend();
  const auto& layers = net.layers();
  std::vector<LayerTime> times(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    times[i].name = layers[i]->name();
    times[i].kind = layers[i]->kind();
    times[i].forward_macs = layers[i]->forward_macs();
    times[i].plan = layers[i]->plan_summary();
  }
  // One round first, untimed, to learn each layer's host time (and warm caches); then `iterations`.
  std::vector<double> forward_hold(layers.size(), 10000.0), backward_hold(layers.size(), 10000.0);
  for (int it = -1; it < iterations; ++it) {
    const double weight = it < 0 ? 0.0 : 1.0 / iterations;
    for (size_t i = 0; i < layers.size(); ++i) {
      times[i].forward_ms +=
          weight * time_queued(backend, forward_hold[i], [&] { layers[i]->forward(Phase::train); });
    }
    for (size_t i = layers.size(); i-- > 0;) {
      times[i].backward_ms += weight * time_queued(backend, backward_hold[i], [&] { layers[i]->backward(); });
    }
  }
  return times;
}

std::string format_layer_profile(const std::vector<LayerTime>& times) {
  double total = 0;
  for (const auto& t : times) total += t.forward_ms + t.backward_ms;
  // The kind column as wide as its longest entry ("batchnorm+maxpool"), so that the numbers line up.
  // The name column likewise ("transformer.h.11.attn.attention").
  size_t kind_width = 12, name_width = 28;
  for (const auto& t : times) {
    kind_width = std::max(kind_width, t.kind.size());
    name_width = std::max(name_width, t.name.size());
  }
  std::string out = fmt::format("{:<{}} {:<{}} {:>10} {:>10} {:>7} {:>10}  {}\n", "layer", name_width, "kind",
                                kind_width, "fwd ms", "bwd ms", "share", "fwd GF/s", "plan");
  double forward = 0, backward = 0;
  for (const auto& t : times) {
    forward += t.forward_ms;
    backward += t.backward_ms;
    double gflops = t.forward_ms > 0 ? 2.0 * static_cast<double>(t.forward_macs) / (t.forward_ms * 1e6) : 0;
    out += fmt::format("{:<{}} {:<{}} {:>10.3f} {:>10.3f} {:>6.1f}% {:>10}  {}\n", t.name, name_width, t.kind,
                       kind_width, t.forward_ms, t.backward_ms,
                       total > 0 ? 100 * (t.forward_ms + t.backward_ms) / total : 0,
                       t.forward_macs > 0 ? fmt::format("{:.1f}", gflops) : "", t.plan);
  }
  out += fmt::format("{:<{}} {:<{}} {:>10.3f} {:>10.3f}\n", "total", name_width, "", kind_width, forward,
                     backward);
  return out;
}

nlohmann::json to_json(const std::vector<LayerTime>& times) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& t : times) {
    j.push_back({{"layer", t.name},
                 {"kind", t.kind},
                 {"forward_ms", t.forward_ms},
                 {"backward_ms", t.backward_ms},
                 {"forward_macs", t.forward_macs},
                 {"plan", t.plan}});
  }
  return j;
}

std::string plan_without_timings(const std::string& plan) {
  // A direction on a graph engine states its time and the legacy algorithm's ("0.040 ms; legacy
  // IMPLICIT_PRECOMP_GEMM 0.041 ms)"), a legacy one its search time ("1.234 ms)"); a plan from the cache
  // says so. None of these is part of the choice.
  static const std::regex engine_timing(R"(, [0-9.]+ ms; legacy (\S+) [0-9.]+ ms\))"),
      timing(R"(, [0-9.]+ ms\))"), cached(R"( \[cached search\])");
  return std::regex_replace(
      std::regex_replace(std::regex_replace(plan, engine_timing, ", legacy $1)"), timing, ")"), cached, "");
}

std::string algorithm_digest(const Network& net) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  bool any = false;
  for (const auto& layer : net.layers()) {
    const std::string plan = plan_without_timings(layer->plan_summary());
    if (plan.empty()) continue;
    any = true;
    for (unsigned char c : plan + "\n") hash = (hash ^ c) * 1099511628211ull;
  }
  return any ? fmt::format("{:016x}", hash) : std::string();
}

}  // namespace dlbench
