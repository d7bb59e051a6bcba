// trace-summary on hand-made traces: the step cut, the times per step, communication beside backward, and
// the per-layer comparison against a base trace.
#include "bench/trace_summary.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace dlbench {
namespace {

using dlbench::testing::TempDir;
using dlbench::testing::user_error_message;
using dlbench::testing::write_file;

nlohmann::json span(int rank, const char* track, const char* name, double ts, double dur) {
  return {{"ph", "X"}, {"pid", rank}, {"tid", track}, {"name", name}, {"ts", ts}, {"dur", dur}};
}

// Two steps of a two-layer network, 1000 us apart: "a" 100 us, "b" 200, "b backward" `b_back`, "a backward"
// 300; with `all_reduce`, a 50 us collective starting 20 us into "b backward".
std::vector<TraceSpan> two_steps(double b_back, bool all_reduce) {
  std::vector<TraceSpan> t;
  for (int step = 0; step < 2; ++step) {
    const double s = 1000.0 * step;
    t.push_back({0, "compute", "a", s, 100});
    t.push_back({0, "compute", "b", s + 100, 200});
    t.push_back({0, "compute", "b backward", s + 300, b_back});
    t.push_back({0, "compute", "a backward", s + 300 + b_back, 300});
    if (all_reduce) t.push_back({0, "communication", "all-reduce 1.00 MB", s + 320, 50});
  }
  return t;
}

TEST(TraceSummary, StepsForwardBackwardAndTheCollectives) {
  const std::string text = summarize_trace(two_steps(200, true), nullptr);
  EXPECT_NE(text.find("1 rank(s), 2 traced steps in all (a step begins at 'a')"), std::string::npos) << text;
  // Step 1: forward 0.30 ms, backward 0.50 ms ending at 800 us, next step at 1000.
  EXPECT_NE(text.find("rank 0 step 1: forward 0.30 ms, backward 0.50 ms, then 0.20 ms to the next step | 1 "
                      "all-reduces, 0.05 ms, 100% beside backward, the last ends 0.00 ms after it"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rank 0 step 2: forward 0.30 ms, backward 0.50 ms |"), std::string::npos) << text;
}

TEST(TraceSummary, TheOptimizerApartFromTheLayers) {
  std::vector<TraceSpan> trace = two_steps(200, false);
  for (double s : {0.0, 1000.0}) trace.push_back({0, "compute", "optimizer", s + 820, 150});
  const std::string text = summarize_trace(trace, nullptr);
  // Step 1: the layers as without it, the update after them, and 0.05 ms left to the next step.
  EXPECT_NE(text.find("rank 0 step 1: forward 0.30 ms, backward 0.50 ms, optimizer 0.15 ms, then 0.05 ms to "
                      "the next step"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("mean of 2 rank-steps: forward 0.30 ms, backward 0.50 ms, optimizer 0.15 ms"),
            std::string::npos)
      << text;
}

TEST(TraceSummary, LayersBesideACollectiveAgainstABase) {
  const std::vector<TraceSpan> base = two_steps(200, false);
  const std::string text = summarize_trace(two_steps(260, true), &base);
  // "b backward" ran 60 us longer each time, beside the collective; the other layers as long as in the base.
  EXPECT_NE(text.find("layers beside a collective: 2 spans, +60.0 us each, +0.06 ms per step and rank"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("layers beside none: 6 spans, +0.0 us each"), std::string::npos) << text;
  EXPECT_NE(text.find("200.0 ->    260.0 us (+60.0), beside a collective 2 of 2"), std::string::npos) << text;
}

TEST(TraceSummary, ReadsWhatTraceWritesAndRefusesTheRest) {
  TempDir dir;
  const std::string good = dir.file("trace.json");
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"}, {"pid", 0}, {"name", "process_name"}, {"args", {{"name", "rank 0"}}}});
  events.push_back(span(0, "compute", "conv1", 10, 5));
  events.push_back(span(0, "communication", "all-reduce 2.00 MB", 12, 1));
  write_file(good, nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump());
  const std::vector<TraceSpan> spans = read_trace(good);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].name, "conv1");
  EXPECT_EQ(spans[1].track, "communication");
  EXPECT_DOUBLE_EQ(spans[1].end_us(), 13.0);

  EXPECT_EQ(user_error_message([&] { read_trace(dir.file("missing.json")); }),
            "trace-summary: cannot read " + dir.file("missing.json"));
  const std::string broken = dir.file("broken.json");
  write_file(broken, "{\"traceEvents\": [");
  EXPECT_EQ(user_error_message([&] { read_trace(broken); }), "trace-summary: " + broken + " is not JSON");
  const std::string result = dir.file("result.json");
  write_file(result, R"({"images_per_second": 1000})");
  EXPECT_EQ(user_error_message([&] { read_trace(result); }),
            "trace-summary: " + result + " holds no list of trace events");
  const std::string empty = dir.file("empty.json");
  write_file(empty, R"({"traceEvents": []})");
  EXPECT_EQ(
      user_error_message([&] { read_trace(empty); }),
      "trace-summary: " + empty + " has no compute spans (write one with --trace FILE --trace-steps A:B)");
}

}  // namespace
}  // namespace dlbench
