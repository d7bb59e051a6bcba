// The report's figures and its HTML page: gnuplot draws every figure as well-formed SVG and as a 900x540
// PNG, the same input gives the same files, the page embeds each SVG inline with nothing external, text
// from the results is escaped, a missing or failing gnuplot is one clear line, and Chromium renders the
// page to a screenshot with the figures in it. Tests that need gnuplot, xmllint or chromium skip
// themselves, saying which package to install, when it is not on PATH.
#include "bench/report_figures.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "bench/report.h"
#include "bench/report_html.h"
#include "core/process.h"
#include "temp_dir.h"

namespace dlbench {
namespace {

namespace fs = std::filesystem;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

const std::string kFixture = std::string(DLBENCH_SOURCE_DIR) + "/tests/bench/fixtures/study_small.jsonl";
// The figures of the fixture: two models, resnet50 in two precisions on 1 and 2 GPUs, a training run.
const std::vector<std::string> kFigures = {"throughput_resnet20_fp32",
                                           "throughput_resnet50_fp32",
                                           "throughput_resnet50_fp16",
                                           "speedup_resnet50",
                                           "step_times",
                                           "loss"};

// ---- PNG: chunks, the header, and the pixel rows (zlib inflates the image data) ----

struct Png {
  uint32_t width = 0, height = 0;
  int bit_depth = 0, colour_type = 0, interlace = 0;
  std::string compressed;  // the IDAT chunks, joined
};

uint32_t big_endian(const std::string& b, size_t at) {
  return (uint32_t(uint8_t(b[at])) << 24) | (uint32_t(uint8_t(b[at + 1])) << 16) |
         (uint32_t(uint8_t(b[at + 2])) << 8) | uint32_t(uint8_t(b[at + 3]));
}

// nullopt (and a test failure saying why) when `bytes` is not a PNG.
std::optional<Png> parse_png(const std::string& bytes, const std::string& what) {
  static const std::string signature = "\x89PNG\r\n\x1a\n";
  if (bytes.compare(0, signature.size(), signature) != 0) {
    ADD_FAILURE() << what << ": no PNG signature (" << bytes.size() << " bytes)";
    return std::nullopt;
  }
  Png png;
  for (size_t at = signature.size(); at + 12 <= bytes.size();) {
    const uint32_t length = big_endian(bytes, at);
    const std::string type = bytes.substr(at + 4, 4);
    if (at + 12 + length > bytes.size()) break;
    const std::string data = bytes.substr(at + 8, length);
    if (type == "IHDR" && length >= 13) {
      png.width = big_endian(data, 0);
      png.height = big_endian(data, 4);
      png.bit_depth = uint8_t(data[8]);
      png.colour_type = uint8_t(data[9]);
      png.interlace = uint8_t(data[12]);
    } else if (type == "IDAT") {
      png.compressed += data;
    }
    at += 12 + length;
  }
  if (png.width == 0) {
    ADD_FAILURE() << what << ": no IHDR chunk";
    return std::nullopt;
  }
  return png;
}

// The pixel rows of an 8-bit, non-interlaced PNG (the kinds Chromium and cairo write), unfiltered.
std::vector<std::vector<uint8_t>> pixel_rows(const Png& png) {
  const std::map<int, int> channels = {{0, 1}, {2, 3}, {4, 2}, {6, 4}};
  if (png.bit_depth != 8 || png.interlace != 0 || !channels.count(png.colour_type)) {
    ADD_FAILURE() << "cannot decode PNG colour type " << png.colour_type << ", depth " << png.bit_depth;
    return {};
  }
  const size_t bpp = static_cast<size_t>(channels.at(png.colour_type)), stride = png.width * bpp;
  std::vector<uint8_t> raw((stride + 1) * png.height);
  uLongf size = raw.size();
  const int rc = uncompress(raw.data(), &size, reinterpret_cast<const Bytef*>(png.compressed.data()),
                            png.compressed.size());
  if (rc != Z_OK || size != raw.size()) {
    ADD_FAILURE() << "the image data does not inflate to " << raw.size() << " bytes (zlib " << rc << ")";
    return {};
  }
  std::vector<std::vector<uint8_t>> rows(png.height, std::vector<uint8_t>(stride));
  for (size_t y = 0; y < png.height; ++y) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* in = &raw[y * (stride + 1) + 1];
    std::vector<uint8_t>& row = rows[y];
    for (size_t x = 0; x < stride; ++x) {
      const int a = x >= bpp ? row[x - bpp] : 0, b = y > 0 ? rows[y - 1][x] : 0,
                c = x >= bpp && y > 0 ? rows[y - 1][x - bpp] : 0;
      int predictor = 0;
      switch (filter) {
        case 1:
          predictor = a;
          break;
        case 2:
          predictor = b;
          break;
        case 3:
          predictor = (a + b) / 2;
          break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          predictor = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default:
          break;
      }
      row[x] = static_cast<uint8_t>(in[x] + predictor);
    }
  }
  return rows;
}

// ---- XML: enough of a parser to say whether tags balance, and what the root element is ----

struct XmlCheck {
  std::string error;      // empty when well-formed
  std::string root_name;  // "svg"
  std::map<std::string, std::string> root_attributes;
};

// Where the markup at `at` that is not an element (<?xml?>, <!DOCTYPE>, a comment, CDATA) ends; `at` if
// there is none there, npos if it never ends.
size_t skip_markup(const std::string& text, size_t at) {
  for (const auto& [opening, closing] :
       {std::pair<std::string, std::string>{"<?", "?>"}, {"<!--", "-->"}, {"<![CDATA[", "]]>"}, {"<!", ">"}})
    if (text.compare(at, opening.size(), opening) == 0) {
      const size_t end = text.find(closing, at);
      return end == std::string::npos ? end : end + closing.size();
    }
  return at;
}

XmlCheck check_xml(const std::string& text) {
  XmlCheck check;
  auto fail = [&](const std::string& why) {
    check.error = why;
    return check;
  };
  std::vector<std::string> open;
  static const std::regex attribute(R"re(([\w:.-]+)\s*=\s*(?:"([^"]*)"|'([^']*)'))re");
  static const std::regex entity(R"(^&(#[0-9]+|#x[0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);)");
  size_t at = 0;
  while (at < text.size()) {
    if (text[at] != '<') {
      if (text[at] == '&' && !std::regex_search(text.substr(at, 12), entity))
        return fail("a bare '&' at byte " + std::to_string(at));
      ++at;
      continue;
    }
    if (const size_t end = skip_markup(text, at); end != at) {
      if (end == std::string::npos) return fail("unclosed markup at byte " + std::to_string(at));
      at = end;
      continue;
    }
    // A tag: it ends at the first '>' outside quoted attribute values.
    size_t end = at + 1;
    for (char quote = 0; end < text.size() && (quote || text[end] != '>'); ++end)
      if (text[end] == '"' || text[end] == '\'') quote = quote == text[end] ? 0 : quote ? quote : text[end];
    if (end >= text.size()) return fail("unclosed tag at byte " + std::to_string(at));
    const std::string tag = text.substr(at + 1, end - at - 1);
    at = end + 1;
    if (tag.empty()) return fail("an empty tag");
    if (tag[0] == '/') {
      const std::string name = tag.substr(1, tag.find_first_of(" \t\r\n", 1) - 1);
      if (open.empty() || open.back() != name)
        return fail("</" + name + "> closes <" + (open.empty() ? "" : open.back()) + ">");
      open.pop_back();
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" \t\r\n/"));
    if (check.root_name.empty()) {
      check.root_name = name;
      for (auto it = std::sregex_iterator(tag.begin(), tag.end(), attribute); it != std::sregex_iterator();
           ++it)
        check.root_attributes[(*it)[1]] = (*it)[2].matched ? (*it)[2].str() : (*it)[3].str();
    } else if (open.empty()) {
      return fail("a second root element <" + name + ">");
    }
    if (tag.back() != '/') open.push_back(name);
  }
  if (check.root_name.empty()) return fail("no element");
  if (!open.empty()) return fail("<" + open.back() + "> is never closed");
  return check;
}

std::optional<std::string> program(const std::string& name) { return find_program(name); }

// `xmllint --noout FILE`: libxml2's own verdict, where it is installed.
void expect_xmllint_accepts(const std::string& path) {
  const std::optional<std::string> xmllint = program("xmllint");
  if (!xmllint) {
    std::printf(
        "[   INFO   ] xmllint not on PATH (apt-get install libxml2-utils); tag balance checked only\n");
    return;
  }
  ProcessOptions options;
  options.timeout_seconds = 60;
  const ProcessResult run = run_process({*xmllint, "--noout", path}, options);
  EXPECT_EQ(run.exit_code, 0) << path << ": " << run.err;
  EXPECT_EQ(run.err, "") << path;
}

// The fixture's report, made once for the tests that read it (with figures where gnuplot is installed).
class ReportPage : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    error_ = new std::string();
    ::testing::internal::CaptureStdout();
    ::testing::internal::CaptureStderr();
    try {
      run_report({kFixture}, out());
    } catch (const std::exception& e) {
      *error_ = e.what();
    }
    stdout_ = new std::string(::testing::internal::GetCapturedStdout());
    ::testing::internal::GetCapturedStderr();
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete stdout_;
    delete error_;
  }
  void SetUp() override { ASSERT_EQ(*error_, "") << "the report of " << kFixture << " failed"; }
  static std::string out() { return dir_->file("report"); }
  static std::string figure(const std::string& name, const std::string& ext) {
    return out() + "/figures/" + name + "." + ext;
  }
  static bool have_gnuplot() { return program("gnuplot").has_value(); }

  static TempDir* dir_;
  static std::string *stdout_, *error_;
};
TempDir* ReportPage::dir_ = nullptr;
std::string* ReportPage::stdout_ = nullptr;
std::string* ReportPage::error_ = nullptr;

const char* const kNoGnuplot = "gnuplot is not on PATH (apt-get install gnuplot-nox): no figures to check";

TEST_F(ReportPage, EveryFigureIsDrawnAsSvgAndPng) {
  if (!have_gnuplot()) GTEST_SKIP() << kNoGnuplot;
  for (const std::string& name : kFigures) {
    SCOPED_TRACE(name);
    for (const char* ext : {"dat", "gp", "svg", "png"}) EXPECT_TRUE(fs::exists(figure(name, ext))) << ext;
    EXPECT_CONTAINS(*stdout_, "figures/" + name + ".{dat,gp,svg,png}");

    const std::string svg = read_file(figure(name, "svg"));
    const XmlCheck xml = check_xml(svg);
    EXPECT_EQ(xml.error, "");
    EXPECT_EQ(xml.root_name, "svg");
    // `dynamic` SVGs scale with the page: their 900x540 size is the viewBox, not fixed width/height.
    const bool sized = xml.root_attributes.count("width") && xml.root_attributes.count("height");
    const auto view_box = xml.root_attributes.find("viewBox");
    EXPECT_TRUE(sized || (view_box != xml.root_attributes.end() && view_box->second == "0 0 900 540"))
        << svg.substr(0, 300);
    expect_xmllint_accepts(figure(name, "svg"));

    const std::optional<Png> png = parse_png(read_file(figure(name, "png")), name + ".png");
    ASSERT_TRUE(png);
    EXPECT_EQ(png->width, 900u);
    EXPECT_EQ(png->height, 540u);
  }
  EXPECT_CONTAINS(*stdout_, "report.md");
  EXPECT_CONTAINS(*stdout_, "report.html");
  // Each script redraws its figure by hand, from its folder, as its first lines say.
  EXPECT_CONTAINS(read_file(figure("loss", "gp")), "gnuplot loss.gp > loss.svg");
}

TEST_F(ReportPage, TheSameInputGivesTheSameFiles) {
  if (!have_gnuplot()) GTEST_SKIP() << kNoGnuplot;
  TempDir again;
  ::testing::internal::CaptureStdout();
  run_report({kFixture}, again.file("report"));
  ::testing::internal::GetCapturedStdout();
  int compared = 0;
  for (const auto& entry : fs::recursive_directory_iterator(out())) {
    if (!entry.is_regular_file()) continue;
    const std::string relative = fs::relative(entry.path(), out()).string();
    EXPECT_EQ(read_file(entry.path().string()), read_file(again.file("report/" + relative))) << relative;
    ++compared;
  }
  // report.md, report.html, points.jsonl, the figures
  EXPECT_EQ(compared, 3 + 4 * static_cast<int>(kFigures.size()));
}

TEST_F(ReportPage, HtmlEmbedsEveryFigureAndNothingExternal) {
  if (!have_gnuplot()) GTEST_SKIP() << kNoGnuplot;
  const std::string html = read_file(out() + "/report.html");
  for (const std::string& name : kFigures) {
    const size_t at = html.find("<figure id=\"figure-" + name + "\">\n<svg");
    ASSERT_NE(at, std::string::npos) << name;
    // The inline SVG is well-formed on its own, its ids carry the figure's name.
    const size_t end = html.find("</svg>", at);
    const std::string svg = html.substr(html.find("<svg", at), end + 6 - html.find("<svg", at));
    EXPECT_EQ(check_xml(svg).error, "") << name;
    EXPECT_CONTAINS(svg, "id=\"" + name + "-gnuplot_canvas\"");
  }
  EXPECT_EQ(html.find("<?xml"), std::string::npos);
  EXPECT_EQ(html.find("<!DOCTYPE svg"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find(" src="), std::string::npos);
  // The only URLs are the SVG namespaces' names, which nothing fetches.
  static const std::regex url("[\\w:]+=[\"']https?://");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), url); it != std::sregex_iterator(); ++it)
    EXPECT_TRUE(it->str().starts_with("xmlns")) << it->str();
  EXPECT_EQ(std::count(html.begin(), html.end(), '\0'), 0);
  // No id twice on the page: two figures' markers must not answer to the same name.
  static const std::regex id("\\bid=[\"']([^\"']+)[\"']");
  std::set<std::string> ids;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), id); it != std::sregex_iterator(); ++it)
    EXPECT_TRUE(ids.insert((*it)[1]).second) << "id " << (*it)[1] << " twice";
  // The same tables as the Markdown.
  EXPECT_CONTAINS(html, "<td>pytorch (compiled)</td>");
  EXPECT_CONTAINS(html, "<strong class=\"flag\">large spread</strong>");
  EXPECT_CONTAINS(html, "not available: the JAX peer cannot start: No module named &#39;jax&#39;");
  EXPECT_CONTAINS(html, "<td class=\"num\">0.086</td>");
}

TEST(ReportHtml, TextFromTheResultsIsEscaped) {
  TempDir dir;
  const std::string results = dir.file("odd.jsonl");
  write_file(
      results,
      "{\"model\": \"res<net>&\\\"50\\\"\", \"precision\": \"fp32\", \"images_per_second\": 10.0, "
      "\"framework\": \"a&b<c>\", \"step_ms\": {\"median\": 10, \"p5\": 9, \"p95\": 11}}\n"
      "{\"sweep_point\": {\"model\": \"m\", \"precision\": \"fp32\", \"gpus\": 2, \"batch_size\": \"auto\", "
      "\"launcher\": \"mpi\"}, \"status\": \"failed\", \"error\": \"boom <b>&</b> \\\"quoted\\\"\"}\n");
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  run_report({results}, dir.file("out"));
  ::testing::internal::GetCapturedStdout();
  ::testing::internal::GetCapturedStderr();
  const std::string html = read_file(dir.file("out/report.html"));
  EXPECT_CONTAINS(html, "res&lt;net&gt;&amp;&quot;50&quot;");
  EXPECT_CONTAINS(html, "<td>a&amp;b&lt;c&gt;</td>");
  EXPECT_CONTAINS(html, "boom &lt;b&gt;&amp;&lt;/b&gt; &quot;quoted&quot;");
  EXPECT_EQ(html.find("<b>&</b>"), std::string::npos);
  EXPECT_EQ(html.find("<c>"), std::string::npos);
  // gnuplot escapes the names it draws, so the figures stay well-formed too.
  if (fs::exists(dir.file("out/figures"))) {
    for (const auto& entry : fs::directory_iterator(dir.file("out/figures"))) {
      if (entry.path().extension() == ".svg") {
        EXPECT_EQ(check_xml(read_file(entry.path().string())).error, "") << entry.path();
      }
    }
  }
  EXPECT_EQ(html_escape("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
}

TEST(ReportHtml, InlineSvgDropsThePrologAndPrefixesIds) {
  const std::string file =
      "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<!DOCTYPE svg>\n"
      "<svg viewBox=\"0 0 9 5\" xmlns=\"http://www.w3.org/2000/svg\"><defs><path id='gpPt0'/>"
      "<clipPath id=\"c1\"/></defs><use xlink:href='#gpPt0'/><rect fill='#dddddd' clip-path='url(#c1)'/>"
      "</svg>\n";
  EXPECT_EQ(inline_svg(file, "loss-"),
            "<svg viewBox=\"0 0 9 5\" xmlns=\"http://www.w3.org/2000/svg\"><defs><path id='loss-gpPt0'/>"
            "<clipPath id=\"loss-c1\"/></defs><use xlink:href='#loss-gpPt0'/><rect fill='#dddddd' "
            "clip-path='url(#loss-c1)'/></svg>");
  EXPECT_EQ(inline_svg("not an svg", "x-"), "");
}

// PATH set to `dir` for the life of the object: what the report finds of gnuplot.
class PathIs {
 public:
  explicit PathIs(const std::string& dir) : old_(std::getenv("PATH") ? std::getenv("PATH") : "") {
    setenv("PATH", dir.c_str(), 1);
  }
  ~PathIs() { setenv("PATH", old_.c_str(), 1); }

 private:
  std::string old_;
};

TEST(ReportWithoutGnuplot, WritesBothReportsAndSaysSoOnce) {
  TempDir dir;
  fs::create_directories(dir.file("empty-bin"));
  std::string err;
  {
    PathIs path(dir.file("empty-bin"));
    ::testing::internal::CaptureStdout();
    ::testing::internal::CaptureStderr();
    run_report({kFixture}, dir.file("out"));
    err = ::testing::internal::GetCapturedStderr();
    ::testing::internal::GetCapturedStdout();
  }
  const std::string message = "report: gnuplot not found (apt-get install gnuplot-nox); figures skipped\n";
  const size_t at = err.find(message);
  ASSERT_NE(at, std::string::npos) << err;
  EXPECT_EQ(err.find(message, at + 1), std::string::npos) << "said twice: " << err;
  EXPECT_TRUE(fs::exists(dir.file("out/report.md")));
  EXPECT_FALSE(fs::exists(dir.file("out/figures")));
  const std::string html = read_file(dir.file("out/report.html"));
  EXPECT_CONTAINS(html, "<h2>Per-point statistics</h2>");
  EXPECT_EQ(html.find("<svg"), std::string::npos);
}

TEST(ReportWithoutGnuplot, AFailingGnuplotIsOneLineNamingTheFigure) {
  TempDir dir;
  fs::create_directories(dir.file("bin"));
  write_file(dir.file("bin/gnuplot"),
             "#!/bin/sh\necho '\"x.gp\" line 3: undefined variable: boom' >&2\nexit 1\n");
  fs::permissions(dir.file("bin/gnuplot"), fs::perms::owner_all);
  std::string message;
  {
    PathIs path(dir.file("bin"));
    ::testing::internal::CaptureStdout();
    message = testing::user_error_message([&] { run_report({kFixture}, dir.file("out")); });
    ::testing::internal::GetCapturedStdout();
  }
  EXPECT_CONTAINS(
      message,
      "report: gnuplot failed on figure throughput_resnet20_fp32 (svg): \"x.gp\" line 3: undefined "
      "variable: boom");
  EXPECT_CONTAINS(message, "(and 5 more figures)");
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  // The rest is written all the same.
  EXPECT_TRUE(fs::exists(dir.file("out/report.md")));
  EXPECT_TRUE(fs::exists(dir.file("out/report.html")));
}

// A dlbench ResNet-50 point of `precision` on `gpus` GPUs, started by `launcher`, at `rate` img/s.
void add_point(ReportInput& in, const char* precision, int gpus, const char* launcher, double rate) {
  ReportPoint p;
  p.model = "resnet50";
  p.precision = precision;
  p.gpus = gpus;
  p.launcher = launcher;
  p.images_per_second = p.rate = rate;
  in.points.push_back(p);
}

TEST(ReportFigurePlan, DlbenchLaunchersAreSeparateBarsWithTheirSpeedups) {
  ReportInput in;
  add_point(in, "fp16", 1, "local", 1000);
  add_point(in, "fp16", 2, "threads", 1950);
  add_point(in, "fp16", 2, "mpi", 1900);
  add_point(in, "fp16", 4, "mpi", 3600);
  const std::vector<ReportFigure> figures = plan_figures(in);
  ASSERT_GE(figures.size(), 2u);
  EXPECT_EQ(figures[0].name, "throughput_resnet50_fp16");
  const std::string& bars = figures[0].data;
  // Each launcher's bars, the local 1-GPU point the base of both.
  EXPECT_CONTAINS(bars, "# dlbench mpi\n");
  EXPECT_CONTAINS(bars, "# dlbench threads\n");
  EXPECT_CONTAINS(bars, "\"1.95x\"");
  EXPECT_CONTAINS(bars, "\"1.90x\"");
  EXPECT_CONTAINS(bars, "\"3.60x\"");
  EXPECT_EQ(figures[1].name, "speedup_resnet50");
  EXPECT_CONTAINS(figures[1].script, "title \"dlbench mpi fp16\"");
  EXPECT_CONTAINS(figures[1].script, "title \"dlbench threads fp16\"");
  // No step times and no losses: neither of those figures.
  EXPECT_EQ(figures.size(), 2u);
}

// As dlbench writes them: `--gpus 1 --launcher threads` runs as nccl-threads, and a sweep under mpirun
// runs only the multi-GPU points, so the mpi bars take their speedup from the threads' one-GPU point.
TEST(ReportFigurePlan, ALauncherWithoutItsOwnOneGpuPointUsesTheFrameworksBest) {
  ReportInput in;
  add_point(in, "fp32", 1, "nccl-threads", 1000);
  add_point(in, "fp32", 2, "nccl-threads", 2000);
  add_point(in, "fp32", 2, "mpi-nccl", 1990);
  const std::vector<ReportFigure> figures = plan_figures(in);
  ASSERT_GE(figures.size(), 2u);
  const std::string& bars = figures[0].data;
  EXPECT_CONTAINS(bars, "\"2.00x\"");
  EXPECT_CONTAINS(bars, "\"1.99x\"");
  // The one-GPU bar is drawn once, under the launcher that ran it.
  EXPECT_EQ(bars.find(" 1000 "), bars.rfind(" 1000 ")) << bars;
  EXPECT_CONTAINS(figures[1].script, "title \"dlbench mpi-nccl fp32\"");
  EXPECT_CONTAINS(figures[1].data, "1 1\n2 1.99");
}

TEST_F(ReportPage, ChromiumRendersThePageWithItsFigures) {
  const std::optional<std::string> chromium = program("chromium");
  if (!chromium)
    GTEST_SKIP() << "chromium is not on PATH (apt-get install chromium): the page is not rendered";
  const std::string shot = dir_->file("screenshot.png");
  ProcessOptions options;
  options.cwd = dir_->path().string();
  options.timeout_seconds = 60;
  const ProcessResult run = run_process(
      {*chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
       "--hide-scrollbars", "--window-size=1200,3000", "--user-data-dir=" + dir_->file("chromium-profile"),
       "--screenshot=" + shot, "file://" + fs::absolute(out() + "/report.html").string()},
      options);
  ASSERT_FALSE(run.timed_out) << "chromium did not finish in 60 s";
  ASSERT_EQ(run.exit_code, 0) << run.err;
  // DLBENCH_KEEP_SCREENSHOT=FILE keeps the screenshot, to look at the page after a change to its style.
  if (const char* keep = std::getenv("DLBENCH_KEEP_SCREENSHOT"))
    fs::copy_file(shot, keep, fs::copy_options::overwrite_existing);
  const std::optional<Png> png = parse_png(read_file(shot), "the screenshot");
  ASSERT_TRUE(png);
  EXPECT_EQ(png->width, 1200u);
  EXPECT_EQ(png->height, 3000u);
  const std::vector<std::vector<uint8_t>> rows = pixel_rows(*png);
  ASSERT_EQ(rows.size(), 3000u);
  const bool all_alike = std::all_of(rows.begin(), rows.end(), [&](const auto& r) { return r == rows[0]; });
  EXPECT_FALSE(all_alike) << "the screenshot is one colour: the page did not render";
  if (!have_gnuplot()) return;
  // The figures are there: the PyTorch bars' orange (#f28e2b) is nowhere else on the page.
  const size_t bpp = rows[0].size() / 1200;
  int orange = 0;
  for (const auto& r : rows)
    for (size_t x = 0; x + 2 < r.size(); x += bpp)
      orange += r[x] > 220 && r[x + 1] > 120 && r[x + 1] < 175 && r[x + 2] < 90;
  EXPECT_GT(orange, 2000) << "no figure's bars in the first 3000 pixels of the page";
}

}  // namespace
}  // namespace dlbench
