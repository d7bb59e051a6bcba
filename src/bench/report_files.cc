// `dlbench report`'s files: the output folder checked against the inputs, the figures drawn by gnuplot,
// and report.md, report.html and points.jsonl written (report.cc makes the tables they show).
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "bench/report.h"
#include "bench/report_figures.h"
#include "bench/report_html.h"
#include "core/file_io.h"
#include "core/file_paths.h"
#include "core/process.h"
#include "core/status.h"

namespace dlbench {
namespace {

// The report's outputs checked against its inputs: `report r.jsonl -o r.jsonl`, or an input that is one of
// the files the report writes (DIR/points.jsonl of an earlier report), is refused before anything is read.
void check_report_paths(const std::vector<std::string>& paths, const std::string& out_dir) {
  std::vector<PathUse> uses;
  for (const std::string& path : paths) uses.push_back({path, path, PathRole::reads_file});
  // An input given twice is read once (read_report_input), not two uses of one file.
  std::set<std::string> seen;
  uses.erase(std::remove_if(uses.begin(), uses.end(),
                            [&](const PathUse& u) { return !seen.insert(resolved_path(u.path)).second; }),
             uses.end());
  uses.push_back({"-o", out_dir, PathRole::writes_tree});
  for (const char* name : {"report.md", "report.html", "points.jsonl"})
    uses.push_back({fmt::format("-o (its {})", name), out_dir + "/" + name, PathRole::writes_file});
  uses.push_back({"-o (its figures/)", out_dir + "/figures", PathRole::writes_tree});
  check_path_uses(uses);
  std::error_code ec;
  DLB_REQUIRE(!std::filesystem::exists(out_dir, ec) || std::filesystem::is_directory(out_dir, ec),
              "report: -o {}: a file, not a folder; give a folder for the report", out_dir);
  // An earlier report's files are replaced; a file of the user's by one of their names is not.
  if (std::filesystem::is_directory(out_dir, ec))
    for (const auto& [name, kind] : {std::pair{"report.md", OutputKind::report_markdown},
                                     std::pair{"report.html", OutputKind::report_html},
                                     std::pair{"points.jsonl", OutputKind::json_lines}})
      check_writable(out_dir + "/" + name, "report -o", kind);
}

// Whether `name`, a file of DIR/figures, is one the report draws (report_figures.h: NAME.dat, .gp, .svg
// and .png of throughput_*, speedup_*, step_times and loss): those of an earlier report are removed before
// the figures are drawn, so that none is left that this report does not name. Nothing else is touched.
bool is_report_figure_file(const std::string& name) {
  const std::filesystem::path path(name);
  const std::string ext = path.extension().string(), stem = path.stem().string();
  if (ext != ".dat" && ext != ".gp" && ext != ".svg" && ext != ".png") return false;
  return stem.rfind("throughput_", 0) == 0 || stem.rfind("speedup_", 0) == 0 || stem == "step_times" ||
         stem == "loss";
}

void remove_earlier_figures(const std::string& figures_dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(figures_dir, ec))
    if (entry.is_regular_file() && is_report_figure_file(entry.path().filename().string()))
      std::filesystem::remove(entry.path(), ec);
}

}  // namespace

void run_report(const std::vector<std::string>& paths, const std::string& out_dir) {
  DLB_REQUIRE(!paths.empty(), "report: give one or more result files");
  check_report_paths(paths, out_dir);
  const ReportInput input = read_report_input(paths);
  DLB_REQUIRE(!input.points.empty(),
              "report: no result in {} (expected lines of dlbench bench/train --json, "
              "dlbench sweep or bench/*.sh)",
              fmt::join(paths, ", "));
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  DLB_REQUIRE(!ec, "report: cannot create {}: {}", out_dir, ec.message());
  std::printf("report: %zu points%s\n", input.points.size(),
              input.skipped_lines ? fmt::format(" ({} lines skipped)", input.skipped_lines).c_str() : "");

  ReportDocument doc = report_document(input);
  // The figures first: the HTML embeds the SVGs gnuplot drew.
  std::map<std::string, std::string> svg_of;
  std::string first_failure;
  int failures = 0;
  // An earlier report's figures go first, drawn or not this time: none is left that this report does not
  // name.
  remove_earlier_figures(out_dir + "/figures");
  const std::vector<ReportFigure> figures = plan_figures(input);
  const std::optional<std::string> gnuplot = figures.empty() ? std::nullopt : find_program("gnuplot");
  if (!figures.empty() && !gnuplot) {
    std::fprintf(stderr, "report: gnuplot not found (apt-get install gnuplot-nox); figures skipped\n");
  } else if (!figures.empty()) {
    const std::string figures_dir = out_dir + "/figures";
    std::filesystem::create_directories(figures_dir, ec);
    DLB_REQUIRE(!ec, "report: cannot create {}: {}", figures_dir, ec.message());
    for (const ReportFigure& f : figures) {
      try {
        svg_of[f.name] = draw_figure(f, figures_dir, *gnuplot);
      } catch (const UserError& e) {
        if (failures++ == 0) first_failure = e.what();
        continue;
      }
      auto target = std::find_if(doc.sections.begin(), doc.sections.end(),
                                 [&](const ReportSection& s) { return s.id == f.section; });
      DLB_CHECK(target != doc.sections.end(), "figure {} illustrates no section ({})", f.name, f.section);
      target->figures.push_back({f.name, f.title});
      std::printf("report: wrote %s/%s.{dat,gp,svg,png}\n", figures_dir.c_str(), f.name.c_str());
    }
  }
  for (const auto& [name, text] :
       {std::pair{"report.md", report_markdown(doc)}, std::pair{"report.html", report_html(doc, svg_of)},
        std::pair{"points.jsonl", report_points_jsonl(input)}}) {
    const std::string path = out_dir + "/" + name;
    write_file_atomically(path, text);
    std::printf("report: wrote %s\n", path.c_str());
  }
  DLB_REQUIRE(failures == 0, "{}{}; report.md and report.html are written without {}", first_failure,
              failures > 1 ? fmt::format(" (and {} more figures)", failures - 1) : "",
              failures > 1 ? "them" : "it");
}

}  // namespace dlbench
