// DIR/report.html: the report as one self-contained page, to open from disk or send as one file. The same
// sections and tables as report.md (one ReportDocument renders to both), a contents list, inline CSS, and
// each figure's SVG inline, where its section is; no script, and no URL but the SVG namespaces'.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "bench/report.h"

namespace dlbench {

// The page of `document`; `svg_of` maps a figure's name to the text of its NAME.svg (figures absent from it
// are left out).
std::string report_html(const ReportDocument& document, const std::map<std::string, std::string>& svg_of);

// Text for HTML content and attribute values: & < > " ' escaped.
std::string html_escape(std::string_view text);

// The <svg> element of an SVG file, ready to sit inside a page: without the XML prolog, doctype and
// comments before it, and with its ids (and the references to them) prefixed by `id_prefix`, so that two
// figures' identical ids (gnuplot names its markers the same in every file) cannot clash.
std::string inline_svg(const std::string& svg_file, const std::string& id_prefix);

}  // namespace dlbench
