#include "bench/trace_summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/status.h"
#include "core/timeline.h"

namespace dlbench {

namespace {

bool is_backward(const TraceSpan& s) {
  const std::string suffix = " backward";
  return s.name.size() > suffix.size() &&
         s.name.compare(s.name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

double overlap(double a0, double a1, double b0, double b1) {
  return std::max(0.0, std::min(a1, b1) - std::max(a0, b0));
}

// One traced step of one rank.
struct Step {
  int rank = 0, index = 0;
  double begin = 0, forward = 0, backward = 0, update = 0;
  double backward_begin = 0, backward_end = 0;
  double after_backward = -1;  // until the next step's first span; < 0 for the last step
  int collectives = 0;
  double communication = 0, beside_backward = 0, tail = 0;
};

struct RankSpans {
  std::vector<TraceSpan> compute, communication;
};

std::map<int, RankSpans> by_rank(const std::vector<TraceSpan>& trace) {
  std::map<int, RankSpans> ranks;
  for (const TraceSpan& s : trace) {
    if (s.track == "compute") ranks[s.rank].compute.push_back(s);
    if (s.track == "communication") ranks[s.rank].communication.push_back(s);
  }
  for (auto& [rank, spans] : ranks) {
    for (auto* v : {&spans.compute, &spans.communication})
      std::sort(v->begin(), v->end(),
                [](const TraceSpan& a, const TraceSpan& b) { return a.begin_us < b.begin_us; });
  }
  return ranks;
}

// Steps begin where the rank's first compute span (the first layer's forward) begins again.
std::vector<Step> steps_of(const std::map<int, RankSpans>& ranks) {
  std::vector<Step> steps;
  for (const auto& [rank, spans] : ranks) {
    if (spans.compute.empty()) continue;
    const std::string& first = spans.compute.front().name;
    std::vector<double> starts;
    for (const TraceSpan& s : spans.compute)
      if (s.name == first) starts.push_back(s.begin_us);
    for (size_t i = 0; i < starts.size(); ++i) {
      const double begin = starts[i];
      const double end = i + 1 < starts.size() ? starts[i + 1] : 1e300;
      Step step;
      step.rank = rank;
      step.index = static_cast<int>(i) + 1;
      step.begin = begin;
      step.backward_begin = 1e300;
      for (const TraceSpan& s : spans.compute) {
        if (s.begin_us < begin || s.begin_us >= end) continue;
        if (s.name == kOptimizerSpan) {
          step.update += s.duration_us;
        } else if (is_backward(s)) {
          step.backward += s.duration_us;
          step.backward_begin = std::min(step.backward_begin, s.begin_us);
          step.backward_end = std::max(step.backward_end, s.end_us());
        } else {
          step.forward += s.duration_us;
        }
      }
      if (step.backward_begin > step.backward_end) step.backward_begin = step.backward_end = begin;
      if (i + 1 < starts.size()) step.after_backward = end - step.backward_end - step.update;
      for (const TraceSpan& s : spans.communication) {
        if (s.begin_us < begin || s.begin_us >= end) continue;
        ++step.collectives;
        step.communication += s.duration_us;
        step.beside_backward += overlap(s.begin_us, s.end_us(), step.backward_begin, step.backward_end);
        step.tail = std::max(step.tail, s.end_us() - step.backward_end);
      }
      steps.push_back(step);
    }
  }
  return steps;
}

double percent(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

void describe_steps(std::ostringstream& out, const std::vector<Step>& steps, bool per_step) {
  double forward = 0, backward = 0, update = 0, communication = 0, beside = 0;
  for (const Step& s : steps) {
    forward += s.forward;
    backward += s.backward;
    update += s.update;
    communication += s.communication;
    beside += s.beside_backward;
    if (!per_step) continue;
    out << fmt::format("rank {} step {}: forward {:.2f} ms, backward {:.2f} ms", s.rank, s.index,
                       s.forward / 1e3, s.backward / 1e3);
    if (s.update > 0) out << fmt::format(", optimizer {:.2f} ms", s.update / 1e3);
    if (s.after_backward >= 0)
      out << fmt::format(", then {:.2f} ms to the next step", s.after_backward / 1e3);
    if (s.collectives > 0) {
      out << fmt::format(
          " | {} all-reduces, {:.2f} ms, {:.0f}% beside backward, the last ends {:.2f} ms after it",
          s.collectives, s.communication / 1e3, percent(s.beside_backward, s.communication),
          std::max(0.0, s.tail) / 1e3);
    }
    out << "\n";
  }
  const double n = static_cast<double>(std::max<size_t>(1, steps.size()));
  out << fmt::format("mean of {} rank-steps: forward {:.2f} ms, backward {:.2f} ms", steps.size(),
                     forward / n / 1e3, backward / n / 1e3);
  if (update > 0) out << fmt::format(", optimizer {:.2f} ms", update / n / 1e3);
  if (communication > 0)
    out << fmt::format(", communication {:.2f} ms ({:.0f}% beside backward)", communication / n / 1e3,
                       percent(beside, communication));
  out << "\n";
}

}  // namespace

std::vector<TraceSpan> read_trace(const std::string& path) {
  std::ifstream in(path);
  DLB_REQUIRE(in.good(), "trace-summary: cannot read {}", path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  DLB_REQUIRE(!j.is_discarded(), "trace-summary: {} is not JSON", path);
  const nlohmann::json* events = &j;
  if (j.is_object() && j.contains("traceEvents")) events = &j["traceEvents"];
  DLB_REQUIRE(events->is_array(), "trace-summary: {} holds no list of trace events", path);
  std::vector<TraceSpan> spans;
  for (const nlohmann::json& e : *events) {
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    if (!e.contains("pid") || !e["pid"].is_number_integer() || !e.contains("tid") || !e["tid"].is_string() ||
        !e.contains("name") || !e["name"].is_string() || !e.contains("ts") || !e["ts"].is_number() ||
        !e.contains("dur") || !e["dur"].is_number())
      continue;
    spans.push_back({e["pid"].get<int>(), e["tid"].get<std::string>(), e["name"].get<std::string>(),
                     e["ts"].get<double>(), e["dur"].get<double>()});
  }
  DLB_REQUIRE(
      std::any_of(spans.begin(), spans.end(), [](const TraceSpan& s) { return s.track == "compute"; }),
      "trace-summary: {} has no compute spans (write one with --trace FILE --trace-steps A:B)", path);
  return spans;
}

std::string summarize_trace(const std::vector<TraceSpan>& trace, const std::vector<TraceSpan>* against) {
  std::ostringstream out;
  const auto ranks = by_rank(trace);
  const std::vector<Step> steps = steps_of(ranks);
  out << fmt::format("{} rank(s), {} traced steps in all (a step begins at '{}')\n", ranks.size(),
                     steps.size(), ranks.begin()->second.compute.front().name);
  describe_steps(out, steps, /*per_step=*/true);
  if (!against) return out.str();

  const auto base_ranks = by_rank(*against);
  const std::vector<Step> base_steps = steps_of(base_ranks);
  out << "\nagainst the base trace (" << base_ranks.size() << " rank(s)): ";
  std::ostringstream base_out;
  describe_steps(base_out, base_steps, /*per_step=*/false);
  out << base_out.str();
  std::map<std::string, std::pair<double, int>> base_time;  // name: total, count
  for (const TraceSpan& s : *against) {
    if (s.track != "compute") continue;
    auto& [total, count] = base_time[s.name];
    total += s.duration_us;
    ++count;
  }
  struct Group {
    int spans = 0;
    double extra = 0;
  } beside, apart;
  struct Layer {
    double total = 0, extra = 0;
    int spans = 0, beside = 0;
  };
  std::map<std::string, Layer> layers;
  int unmatched = 0;
  for (const auto& [rank, spans] : ranks) {
    for (const TraceSpan& s : spans.compute) {
      auto it = base_time.find(s.name);
      if (it == base_time.end()) {
        ++unmatched;
        continue;
      }
      const double extra = s.duration_us - it->second.first / it->second.second;
      bool near_collective = false;
      for (const TraceSpan& c : spans.communication)
        near_collective = near_collective || overlap(s.begin_us, s.end_us(), c.begin_us, c.end_us()) > 0;
      Group& g = near_collective ? beside : apart;
      ++g.spans;
      g.extra += extra;
      Layer& layer = layers[s.name];
      layer.total += s.duration_us;
      layer.extra += extra;
      ++layer.spans;
      layer.beside += near_collective ? 1 : 0;
    }
  }
  const double rank_steps = static_cast<double>(std::max<size_t>(1, steps.size()));
  for (const auto& [label, g] : {std::pair<const char*, Group>{"beside a collective", beside},
                                 std::pair<const char*, Group>{"beside none", apart}}) {
    if (g.spans == 0) continue;
    out << fmt::format("layers {}: {} spans, {:+.1f} us each, {:+.2f} ms per step and rank\n", label, g.spans,
                       g.extra / g.spans, g.extra / rank_steps / 1e3);
  }
  if (unmatched > 0) out << fmt::format("{} spans have no namesake in the base trace: left out\n", unmatched);
  std::vector<std::pair<std::string, Layer>> slowed(layers.begin(), layers.end());
  std::sort(slowed.begin(), slowed.end(), [](const auto& a, const auto& b) {
    return a.second.extra / a.second.spans > b.second.extra / b.second.spans;
  });
  out << "slowed most (mean per span; how often beside a collective):\n";
  for (size_t i = 0; i < std::min<size_t>(10, slowed.size()); ++i) {
    const auto& [name, layer] = slowed[i];
    const auto& [base_total, base_count] = base_time.at(name);
    out << fmt::format("  {:<36} {:8.1f} -> {:8.1f} us ({:+.1f}), beside a collective {} of {}\n", name,
                       base_total / base_count, layer.total / layer.spans, layer.extra / layer.spans,
                       layer.beside, layer.spans);
  }
  return out.str();
}

void run_trace_summary(const std::string& path, const std::string& against_path) {
  const std::vector<TraceSpan> trace = read_trace(path);
  if (against_path.empty()) {
    std::fputs(summarize_trace(trace, nullptr).c_str(), stdout);
    return;
  }
  const std::vector<TraceSpan> base = read_trace(against_path);
  std::fputs(summarize_trace(trace, &base).c_str(), stdout);
}

}  // namespace dlbench
