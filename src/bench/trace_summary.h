// `dlbench trace-summary TRACE [--against BASE]`: what a trace written by --trace says about a step, in
// numbers rather than a picture.
//
// Per rank and traced step: forward and backward time (the sums of the compute row's spans), the time after
// the last backward span until the next step's first span (the exchange's tail, the optimizer), and the
// communication row: its spans, their total time, how much of it lies beside backward and how long the
// last one ends after backward. Steps are cut where the first layer's forward span begins again.
//
// With --against BASE (typically the same model traced on one GPU), every compute span is compared with
// the mean time of the span of the same name in BASE: the layers that ran beside a collective and those
// that did not, how much slower each group ran, and the layers slowed most. This is how the cost of
// overlapping communication with backward is seen (bench/results/gradient-exchange, the overlap
// measurement).
#pragma once

#include <string>
#include <vector>

namespace dlbench {

struct TraceSpan {
  int rank = 0;
  std::string track, name;
  double begin_us = 0, duration_us = 0;
  double end_us() const { return begin_us + duration_us; }
};

// The spans ("ph": "X") of a Chrome trace file as --trace writes it ({"traceEvents": [...]} or a bare
// list). UserError naming the file when it cannot be read, is not JSON, or holds no compute span.
std::vector<TraceSpan> read_trace(const std::string& path);

// The summary as text (what the command prints).
std::string summarize_trace(const std::vector<TraceSpan>& trace, const std::vector<TraceSpan>* against);

void run_trace_summary(const std::string& path, const std::string& against_path);

}  // namespace dlbench
