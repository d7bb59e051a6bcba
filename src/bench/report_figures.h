// The report's figures, drawn by gnuplot (Debian: gnuplot-nox), like the study's:
//   throughput_MODEL_PRECISION  images/s (a token model's tokens/s) per GPU count, a bar per framework
//                               (dlbench per launcher where it ran several), each labelled with its
//                               speedup over the same framework on one GPU;
//   speedup_MODEL               speedup against GPU count, a line per framework x precision, with the
//                               ideal line y = x (when some framework ran on more than one GPU count);
//   step_times                  each point's step times around its median: box p25-p75, whiskers p5-p95
//                               from the steps where the result lists them, else p5/median/p95;
//   loss                        the loss of every step of the training runs (when there are any).
// Each figure is NAME.dat (its numbers) and NAME.gp (a script that reads NAME.dat from its own folder and
// writes the figure to stdout), so a figure can be redrawn or restyled by hand:
//   gnuplot NAME.gp > NAME.svg;  gnuplot -e "output_format='png'" NAME.gp > NAME.png
// The same input gives the same files, byte for byte.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench/report.h"

namespace dlbench {

struct ReportFigure {
  std::string name;     // file stem under figures/
  std::string title;    // the caption: what the figure shows, in one sentence
  std::string section;  // report_section_id() of the section it illustrates
  std::string data;     // NAME.dat
  std::string script;   // NAME.gp
};

// The figures of `input` (deterministic), without drawing them.
std::vector<ReportFigure> plan_figures(const ReportInput& input);

// Writes NAME.dat and NAME.gp into `dir`, runs `gnuplot` twice for NAME.svg (svg terminal, 900x540) and
// NAME.png (pngcairo, 900x540), each file written atomically; returns the SVG. UserError, one line naming
// the figure and gnuplot's own message, when gnuplot fails.
std::string draw_figure(const ReportFigure& figure, const std::string& dir, const std::string& gnuplot);

}  // namespace dlbench
