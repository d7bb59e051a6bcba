// The report as Markdown (report.md): the document's sections in order, tables as pipe tables, figures as
// links to figures/NAME.png.
#include <fmt/format.h>

#include <string>

#include "bench/report.h"

namespace dlbench {
namespace {

// A Markdown table cell: a '|' would end the cell.
std::string markdown_cell(const ReportCell& cell) {
  std::string text;
  for (char c : cell.text) {
    if (c == '|') text += '\\';
    text += c;
  }
  return cell.strong && !text.empty() ? fmt::format("**{}**", text) : text;
}

std::string markdown_table(const ReportTable& t) {
  std::string md = "|";
  for (const std::string& c : t.columns) md += fmt::format(" {} |", c);
  md += "\n|";
  for (bool numeric : t.numeric) md += numeric ? " ---: |" : " --- |";
  md += "\n";
  for (const auto& row : t.rows) {
    md += "|";
    for (const ReportCell& cell : row) md += fmt::format(" {} |", markdown_cell(cell));
    md += "\n";
  }
  return md;
}

}  // namespace

std::string report_markdown(const ReportDocument& doc) {
  std::string md = "# " + doc.title + "\n\n";
  for (const ReportSection& s : doc.sections) {
    md += "## " + s.title + "\n\n";
    for (const std::string& p : s.paragraphs) md += p + "\n\n";
    if (!s.preformatted.empty()) {
      md += "```\n" + s.preformatted;
      if (s.preformatted.back() != '\n') md += '\n';
      md += "```\n\n";
    }
    if (s.table) md += markdown_table(*s.table) + "\n";
    for (const std::string& item : s.items) md += "- " + item + "\n";
    if (!s.items.empty()) md += "\n";
    for (const std::string& p : s.closing) md += p + "\n\n";
    for (const ReportFigureRef& f : s.figures)
      md += fmt::format("![{0}](figures/{0}.png)\n\n*{1}*\n\n", f.name, f.title);
  }
  md.pop_back();  // one newline at the end, not a blank line
  return md;
}

}  // namespace dlbench
