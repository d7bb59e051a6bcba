#include "bench/report_html.h"

#include <fmt/format.h>

#include <regex>
#include <set>

namespace dlbench {

namespace {

// Light, print-friendly, readable at a laptop's width; tables scroll sideways rather than squeeze.
constexpr const char* kStyle = R"(
:root { color-scheme: light; }
body { margin: 0; background: #eef0f3; color: #1d2433;
       font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width: 1240px; margin: 0 auto; padding: 28px 32px 56px; background: #fff; }
h1 { font-size: 28px; margin: 0 0 12px; }
h2 { font-size: 20px; margin: 40px 0 12px; padding-bottom: 4px; border-bottom: 2px solid #e3e6eb; }
nav { background: #f6f7f9; border: 1px solid #e3e6eb; border-radius: 6px; padding: 8px 16px; }
nav ol { columns: 2; margin: 4px 0; padding-left: 20px; }
a { color: #2e5e9e; text-decoration: none; }
a:hover { text-decoration: underline; }
.table-wrap { overflow-x: auto; margin: 8px 0 16px; }
table { border-collapse: collapse; font-size: 13.5px; font-variant-numeric: tabular-nums; }
th, td { padding: 4px 9px; border-bottom: 1px solid #e3e6eb; text-align: left; white-space: nowrap; }
th { background: #f0f2f5; font-weight: 600; border-bottom: 2px solid #cfd4dc; }
tbody tr:nth-child(even) { background: #fafbfc; }
th.num, td.num { text-align: right; }
strong.flag { color: #b42318; }
pre { background: #f6f7f9; border: 1px solid #e3e6eb; border-radius: 6px; padding: 12px 16px; overflow-x: auto;
      font: 13px/1.45 ui-monospace, "DejaVu Sans Mono", monospace; }
ul { padding-left: 22px; }
li { margin: 3px 0; }
figure { margin: 20px 0 28px; }
figure svg { display: block; width: 100%; max-width: 900px; height: auto; border: 1px solid #e3e6eb; }
figure svg text, figure svg tspan { font-family: "DejaVu Sans", "Helvetica Neue", Arial, sans-serif; }
figcaption { max-width: 900px; margin-top: 6px; color: #555d6b; font-size: 13.5px; }
)";

void html_table(const ReportTable& t, std::string& html) {
  auto cls = [&](size_t column) {
    return column < t.numeric.size() && t.numeric[column] ? " class=\"num\"" : "";
  };
  html += "<div class=\"table-wrap\"><table>\n<thead><tr>";
  for (size_t c = 0; c < t.columns.size(); ++c)
    html += fmt::format("<th{}>{}</th>", cls(c), html_escape(t.columns[c]));
  html += "</tr></thead>\n<tbody>\n";
  for (const auto& row : t.rows) {
    html += "<tr>";
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string text = html_escape(row[c].text);
      html +=
          fmt::format("<td{}>{}</td>", cls(c),
                      row[c].strong && !text.empty() ? "<strong class=\"flag\">" + text + "</strong>" : text);
    }
    html += "</tr>\n";
  }
  html += "</tbody></table></div>\n";
}

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string inline_svg(const std::string& svg_file, const std::string& id_prefix) {
  static const std::regex root("<svg[\\s>]");
  std::smatch start;
  if (!std::regex_search(svg_file, start, root)) return "";
  const size_t end = svg_file.rfind("</svg>");
  if (end == std::string::npos || end < static_cast<size_t>(start.position(0))) return "";
  const std::string svg = svg_file.substr(start.position(0), end + 6 - start.position(0));

  std::set<std::string> ids;
  static const std::regex id_attribute("\\bid=['\"]([^'\"]+)['\"]");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), id_attribute); it != std::sregex_iterator();
       ++it)
    ids.insert((*it)[1].str());
  // The ids themselves and every reference to one: href='#gpPt5', url(#clip1).
  static const std::regex id_or_reference("(\\bid=['\"]|#)([A-Za-z_][\\w.:-]*)(?=['\")])");
  std::string out;
  auto last = svg.cbegin();
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), id_or_reference); it != std::sregex_iterator();
       ++it) {
    const std::smatch& m = *it;
    if (!ids.count(m[2].str())) continue;
    out.append(last, m[0].first);
    out += m[1].str() + id_prefix + m[2].str();
    last = m[0].second;
  }
  out.append(last, svg.cend());
  return out;
}

std::string report_html(const ReportDocument& doc, const std::map<std::string, std::string>& svg_of) {
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<title>{0}</title>\n<style>{1}</style>\n</head>\n<body>\n<main>\n<h1>{0}</h1>\n",
      html_escape(doc.title), kStyle);
  html += "<nav><strong>Contents</strong>\n<ol>\n";
  for (const ReportSection& s : doc.sections)
    html += fmt::format("<li><a href=\"#{}\">{}</a></li>\n", html_escape(s.id), html_escape(s.title));
  html += "</ol></nav>\n";

  for (const ReportSection& s : doc.sections) {
    html += fmt::format("\n<section id=\"{}\">\n<h2>{}</h2>\n", html_escape(s.id), html_escape(s.title));
    for (const std::string& p : s.paragraphs) html += "<p>" + html_escape(p) + "</p>\n";
    if (!s.preformatted.empty()) html += "<pre>" + html_escape(s.preformatted) + "</pre>\n";
    if (s.table) html_table(*s.table, html);
    if (!s.items.empty()) {
      html += "<ul>\n";
      for (const std::string& item : s.items) html += "<li>" + html_escape(item) + "</li>\n";
      html += "</ul>\n";
    }
    for (const std::string& p : s.closing) html += "<p>" + html_escape(p) + "</p>\n";
    for (const ReportFigureRef& f : s.figures) {
      auto svg = svg_of.find(f.name);
      if (svg == svg_of.end()) continue;
      std::string element = inline_svg(svg->second, f.name + "-");
      // gnuplot titles every SVG "Gnuplot"; a browser shows that title on hover, so say what it shows.
      const std::string generic = "<title>Gnuplot</title>";
      if (const size_t at = element.find(generic); at != std::string::npos)
        element.replace(at, generic.size(), "<title>" + html_escape(f.title) + "</title>");
      html += fmt::format("<figure id=\"figure-{}\">\n{}\n<figcaption>{}</figcaption>\n</figure>\n",
                          html_escape(f.name), element, html_escape(f.title));
    }
    html += "</section>\n";
  }
  html += "</main>\n</body>\n</html>\n";
  return html;
}

}  // namespace dlbench
