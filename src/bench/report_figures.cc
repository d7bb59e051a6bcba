#include "bench/report_figures.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "bench/measure.h"
#include "core/file_io.h"
#include "core/process.h"
#include "core/status.h"

namespace dlbench {

namespace {

// Tableau's ten colours: distinct for the colour-blind and in grey print.
constexpr const char* kColours[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
constexpr int kColourCount = sizeof(kColours) / sizeof(kColours[0]);

// A gnuplot string: double-quoted, where "\n" breaks a line.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// A data-file comment naming a block: one line, whatever the name holds.
std::string comment(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return "# " + s + "\n";
}

std::string number(double v) { return fmt::format("{:.9g}", v); }

std::string file_stem(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') c = '_';
  return s;
}

// The head of every script: the terminal chosen by output_format, the house style, the title. A figure
// with a subtitle centres both on the whole image rather than over the plot (which long names at its left
// push off centre).
std::string script_head(const std::string& name, const std::string& title, const std::string& subtitle = "") {
  std::string gp = fmt::format(
      "# {0}: drawn by `dlbench report` from {0}.dat. To draw it again, in this folder:\n"
      "#   gnuplot {0}.gp > {0}.svg\n"
      "#   gnuplot -e \"output_format='png'\" {0}.gp > {0}.png\n"
      "if (!exists(\"output_format\")) output_format = 'svg'\n"
      "if (output_format eq 'png') {{\n"
      "  set terminal pngcairo size 900,540\n"
      "}} else {{\n"
      "  set terminal svg size 900,540 dynamic enhanced font 'sans,12'\n"
      "}}\n"
      "set encoding utf8\n"
      "{1}"
      "set border 3\n"
      "set tics nomirror\n"
      "set grid ytics lt 1 lc rgb '#dddddd'\n"
      "set key noenhanced\n",
      name,
      subtitle.empty()
          ? fmt::format("set title {} noenhanced\n", quoted(title))
          : fmt::format("set tmargin 5\n"
                        "set label 1 {} at screen 0.5, screen 0.955 center noenhanced\n"
                        "set label 2 {} at screen 0.5, screen 0.915 center font ',10' noenhanced\n",
                        quoted(title), quoted(subtitle)));
  for (int i = 0; i < kColourCount; ++i)
    gp += fmt::format("set linetype {} lc rgb '{}' lw 2 pt 7 ps 1.2\n", i + 1, kColours[i]);
  return gp;
}

// `set xtics ("1 GPU" 0, "2 GPUs" 1)`: names at positions of the axis "x" or "y".
std::string tics(const char* axis, const std::vector<std::pair<std::string, double>>& names) {
  std::string gp = fmt::format("set {0}tics noenhanced\nset {0}tics (", axis);
  for (size_t i = 0; i < names.size(); ++i)
    gp += fmt::format("{}{} {}", i ? ", " : "", quoted(names[i].first), number(names[i].second));
  return gp + ")\n";
}

std::string plot(const std::vector<std::string>& clauses) {
  std::string gp = "plot ";
  for (size_t i = 0; i < clauses.size(); ++i) gp += (i ? ", \\\n     " : "") + clauses[i];
  return gp + "\n";
}

void keep_best(std::map<int, const ReportPoint*>& by_gpus, const ReportPoint& p) {
  const ReportPoint*& cell = by_gpus[p.gpus];
  if (!cell || cell->rate < p.rate) cell = &p;
}

// One framework's points of one model and precision: the best point of each GPU count.
struct Series {
  explicit Series(std::string n) : name(std::move(n)) {}
  std::string name;
  std::map<int, const ReportPoint*> by_gpus;
  // The one-GPU point speedups are taken against when the series has none of its own (a launcher that
  // ran only multi-GPU points: one GPU under mpirun is the one-GPU run again).
  const ReportPoint* base = nullptr;
  const ReportPoint* one_gpu() const {
    auto one = by_gpus.find(1);
    return one != by_gpus.end() ? one->second : base;
  }
  double speedup(int gpus) const {
    const ReportPoint* one = one_gpu();
    auto many = by_gpus.find(gpus);
    return !one || many == by_gpus.end() ? NAN : many->second->rate / one->rate;
  }
};

// The series of one model and precision: one per framework, but dlbench's multi-GPU points one per
// launcher where they ran under several ("dlbench threads", "dlbench mpi"): the two ways of starting
// ranks are what such a study compares. Each launcher keeps its own 1-GPU point as the base of its
// speedups, else the framework's best 1-GPU point (drawn once, under the launcher that ran it).
std::vector<Series> series_of(const ReportInput& in, const ReportAxes& axes, const std::string& model,
                              const std::string& precision) {
  std::vector<Series> all;
  std::set<int64_t> batches;  // of this model and precision
  for (const ReportPoint& p : in.points)
    if (p.model == model && p.precision == precision) batches.insert(p.batch_size);
  // A series per batch size too, where the inputs hold several: a speedup across batch sizes is the
  // batches' difference, not the GPUs'.
  for (const std::string& f : axes.frameworks)
    for (int64_t batch : axes.batch_sizes) {
      const std::string label = batches.size() > 1 ? fmt::format("{} batch {}", f, batch) : f;
      std::vector<const ReportPoint*> points;
      std::set<std::string> launchers;
      for (const ReportPoint& p : in.points)
        if (p.framework == f && p.model == model && p.precision == precision && p.batch_size == batch) {
          points.push_back(&p);
          if (p.gpus > 1) launchers.insert(p.launcher);
        }
      if (points.empty()) continue;
      if (f != "dlbench" || launchers.size() < 2) {
        Series s(label);
        for (const ReportPoint* p : points) keep_best(s.by_gpus, *p);
        all.push_back(std::move(s));
        continue;
      }
      std::map<int, const ReportPoint*> one_gpu;
      for (const ReportPoint* p : points)
        if (p->gpus == 1) keep_best(one_gpu, *p);
      // A 1-GPU point of a launcher with no multi-GPU point (a plain local run) is drawn with the first.
      bool local_drawn = false;
      for (const std::string& launcher : launchers) {
        Series s(fmt::format("{} {}", label, launcher.empty() ? "(no launcher)" : launcher));
        for (const ReportPoint* p : points)
          if (p->launcher == launcher) keep_best(s.by_gpus, *p);
        if (!s.by_gpus.count(1) && !one_gpu.empty()) {
          const ReportPoint* best = one_gpu.begin()->second;
          if (!launchers.count(best->launcher) && !local_drawn) {
            s.by_gpus[1] = best;
            local_drawn = true;
          } else {
            s.base = best;
          }
        }
        all.push_back(std::move(s));
      }
    }
  return all;
}

ReportFigure figure(std::string name, std::string title, std::string section) {
  ReportFigure f;
  f.name = std::move(name);
  f.title = std::move(title);
  f.section = std::move(section);
  return f;
}

// Each series keeps its colour in every figure.
class Colours {
 public:
  int of(const std::string& series) {
    auto it = index_.try_emplace(series, static_cast<int>(index_.size())).first;
    return 1 + it->second % kColourCount;
  }

 private:
  std::map<std::string, int> index_;
};

ReportFigure throughput_figure(const std::string& model, const std::string& precision,
                               const std::vector<Series>& series, const ReportAxes& axes, Colours& colours) {
  // CPU points count processes and ranks, not GPUs.
  const std::string count = axes.on_cpu_only ? "rank count" : axes.on_cpu ? "GPU or rank count" : "GPU count";
  const std::string together = axes.on_cpu_only ? "all ranks"
                               : axes.on_cpu    ? "all GPUs or ranks"
                                                : "all GPUs";
  const std::string one = axes.on_cpu_only ? "one process" : "one GPU";
  const std::string unit = rate_unit_names(rate_unit_of(model)).spelled;
  ReportFigure f = figure(file_stem(fmt::format("throughput_{}_{}", model, precision)),
                          fmt::format("{} {}: {} on each {}, {} together; a bar's label is its speedup over "
                                      "the same framework on {}.",
                                      model, precision, unit, count, together, one),
                          report_section_id("throughput", model));
  std::set<int> gpu_set;
  double highest = 0;
  for (const Series& s : series)
    for (const auto& [g, p] : s.by_gpus) {
      gpu_set.insert(g);
      highest = std::max(highest, p->rate);
    }
  const std::vector<int> gpus(gpu_set.begin(), gpu_set.end());
  // Clustered bars: the cluster of GPU count r is centred on x = r, its bars side by side (and no wider
  // than a third of the cluster, so that a lone bar does not fill the figure).
  const double n = static_cast<double>(series.size()), width = std::min(0.8 / n, 0.34);
  std::vector<std::string> clauses;
  f.data =
      fmt::format("# x, {}, label (speedup over the same series on one GPU); a block per series\n", unit);
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& s = series[i];
    f.data += comment(s.name);
    bool labelled = false;
    for (size_t r = 0; r < gpus.size(); ++r) {
      auto it = s.by_gpus.find(gpus[r]);
      if (it == s.by_gpus.end()) continue;
      const double x = static_cast<double>(r) + (static_cast<double>(i) - (n - 1) / 2) * width;
      const double speedup = gpus[r] > 1 ? s.speedup(gpus[r]) : NAN;
      labelled |= !std::isnan(speedup);
      f.data += fmt::format("{} {} \"{}\"\n", number(x), number(it->second->rate),
                            std::isnan(speedup) ? "" : fmt::format("{:.2f}x", speedup));
    }
    f.data += "\n\n";
    const int colour = colours.of(s.name);
    clauses.push_back(fmt::format("'{}.dat' index {} using 1:2 with boxes lt {} title {} noenhanced", f.name,
                                  i, colour, quoted(s.name)));
    if (labelled)
      clauses.push_back(
          fmt::format("'' index {} using 1:2:3 with labels offset 0,0.7 font ',10' notitle", i));
  }
  std::vector<std::pair<std::string, double>> names;
  for (size_t r = 0; r < gpus.size(); ++r)
    names.emplace_back(report_workers_text(gpus[r], axes), static_cast<double>(r));
  f.script = script_head(f.name, fmt::format("{} {}: throughput", model, precision)) + tics("x", names) +
             fmt::format(
                 "set key outside below center horizontal\n"
                 "set ylabel '{} ({} together)'\n"
                 "set xrange [-0.6:{}]\n"
                 "set yrange [0:{}]\n"
                 "set boxwidth {} absolute\n"
                 "set style fill solid 0.9 noborder\n",
                 unit, together, number(static_cast<double>(gpus.size()) - 0.4), number(highest * 1.12),
                 number(width * 0.9)) +
             plot(clauses);
  return f;
}

// Speedup over one GPU against GPU count, a line per framework x precision, beside the ideal y = x.
std::optional<ReportFigure> speedup_figure(const std::string& model, const ReportInput& in,
                                           const ReportAxes& axes, Colours& colours) {
  ReportFigure f = figure(
      file_stem("speedup_" + model),
      fmt::format("{}: speedup over one GPU against GPU count, a line per framework and precision; the "
                  "dashed line is perfect scaling.",
                  model),
      report_section_id("speedup", model));
  // Point types tell the precisions apart; colours the frameworks.
  const std::map<std::string, int> point_type = {{"fp32", 7}, {"tf32", 5}, {"fp16", 9}, {"bf16", 13}};
  std::vector<std::string> clauses;
  std::string blocks;
  int most = 1, block = 1;  // block 0 is the ideal line
  double highest = 1;
  for (const std::string& precision : axes.precisions)
    for (const Series& s : series_of(in, axes, model, precision)) {
      const bool own_base = s.by_gpus.count(1) > 0;
      if (!s.one_gpu() || s.by_gpus.size() < (own_base ? 2u : 1u)) continue;
      const std::string name = s.name + " " + precision;
      blocks += comment(name);
      if (!own_base) blocks += "1 1\n";  // its base, another launcher's one-GPU point
      for (const auto& [g, p] : s.by_gpus) {
        blocks += fmt::format("{} {}\n", g, number(s.speedup(g)));
        most = std::max(most, g);
        highest = std::max(highest, s.speedup(g));
      }
      blocks += "\n\n";
      auto pt = point_type.find(precision);
      clauses.push_back(fmt::format("'' index {} using 1:2 with linespoints lt {} pt {} title {} noenhanced",
                                    block++, colours.of(s.name), pt == point_type.end() ? 11 : pt->second,
                                    quoted(name)));
    }
  if (clauses.empty()) return std::nullopt;
  f.data =
      "# GPUs, speedup over one GPU; block 0 is the ideal line, then a block per framework x precision\n" +
      comment("ideal") + fmt::format("1 1\n{} {}\n\n\n", most, most) + blocks;
  clauses.insert(clauses.begin(), fmt::format("'{}.dat' index 0 using 1:2 with lines dt 2 lw 1.5 lc rgb "
                                              "'#777777' title 'ideal (linear)'",
                                              f.name));
  std::set<int> gpu_counts;
  for (const ReportPoint& p : in.points)
    if (p.model == model) gpu_counts.insert(p.gpus);
  std::vector<std::pair<std::string, double>> names;
  for (int g : gpu_counts) names.emplace_back(std::to_string(g), g);
  f.script = script_head(f.name, model + ": speedup over one GPU") + tics("x", names) +
             fmt::format(
                 "set key top left\n"
                 "set xlabel 'GPUs'\n"
                 "set ylabel 'speedup over one GPU'\n"
                 "set xrange [0.8:{}]\n"
                 "set yrange [0:{}]\n",
                 number(most * 1.05), number(std::max<double>(most, highest) * 1.1)) +
             plot(clauses);
  return f;
}

// How tables' labels name points, made distinct: the launcher, then a count, where two points share one.
std::vector<std::string> distinct_labels(const std::vector<const ReportPoint*>& points, bool with_model) {
  std::vector<std::string> labels;
  std::map<std::string, int> count;
  for (const ReportPoint* p : points) ++count[report_point_label(*p, with_model)];
  std::map<std::string, int> seen;
  for (const ReportPoint* p : points) {
    std::string label = report_point_label(*p, with_model);
    if (count[label] > 1 && !p->launcher.empty()) label += " " + p->launcher;
    if (const int k = ++seen[label]; k > 1) label += fmt::format(" #{}", k);
    labels.push_back(label);
  }
  return labels;
}

// Each point's step times relative to its own median, so that the spreads of a 37 ms and a 256 ms step
// compare on one axis (the median itself, in ms, is beside the point's name). Lying boxes, a point per
// row: the names stay level and readable however many points there are.
std::optional<ReportFigure> step_times_figure(const std::vector<const ReportPoint*>& sorted,
                                              bool with_model) {
  struct Box {
    const ReportPoint* point;
    double p5, p25, median, p75, p95;
    bool from_steps;
  };
  std::vector<Box> boxes;
  for (const ReportPoint* p : sorted) {
    if (!p->step_times_ms.empty()) {
      const std::vector<double>& v = p->step_times_ms;
      boxes.push_back({p, percentile(v, 5), percentile(v, 25), percentile(v, 50), percentile(v, 75),
                       percentile(v, 95), true});
    } else if (p->step_p5_ms && p->step_median_ms && p->step_p95_ms) {
      const double m = *p->step_median_ms;
      boxes.push_back({p, *p->step_p5_ms, m, m, m, *p->step_p95_ms, false});
    }
  }
  std::erase_if(boxes, [](const Box& b) { return !(b.median > 0); });
  if (boxes.empty()) return std::nullopt;
  ReportFigure f = figure("step_times",
                          "The step times of each point relative to its own median (in ms beside its name): "
                          "whiskers p5-p95, box p25-p75, from the timed steps where the result lists them, "
                          "else from its p5 and p95 alone.",
                          report_section_id("statistics"));
  std::vector<const ReportPoint*> points;
  for (const Box& b : boxes) points.push_back(b.point);
  const std::vector<std::string> labels = distinct_labels(points, with_model);
  std::vector<std::pair<std::string, double>> names;
  double low = 100, high = 100;
  std::string blocks[2];
  for (size_t i = 0; i < boxes.size(); ++i) {
    const Box& b = boxes[i];
    auto rel = [&](double v) { return number(100.0 * v / b.median); };
    names.emplace_back(fmt::format("{}  ({:.1f} ms)", labels[i], b.median), i);
    low = std::min(low, 100.0 * b.p5 / b.median);
    high = std::max(high, 100.0 * b.p95 / b.median);
    blocks[b.from_steps ? 0 : 1] +=
        fmt::format("{} {} {} {} {} {}\n", i, rel(b.p5), rel(b.p25), rel(b.median), rel(b.p75), rel(b.p95));
  }
  const double pad = std::max(1.0, (high - low) * 0.08);
  f.data = "# row, p5, p25, median, p75, p95: percent of the point's median step time\n";
  std::vector<std::string> clauses;
  int block = 0;
  for (int kind = 0; kind < 2; ++kind) {
    if (blocks[kind].empty()) continue;
    const bool steps = kind == 0;
    f.data +=
        comment(steps ? "points with step times" : "points with p5/median/p95 only") + blocks[kind] + "\n\n";
    const std::string source = block == 0 ? fmt::format("'{}.dat'", f.name) : std::string("''");
    clauses.push_back(fmt::format("{} index {} using 4:1:2:6 with xerrorbars lt {} ps 0 title '{}'", source,
                                  block, kind + 1, steps ? "p5-p95" : "p5-p95 (only p5 and p95 known)"));
    if (steps)
      clauses.push_back(fmt::format(
          "'' index {} using 4:1:3:5:($1-0.28):($1+0.28) with boxxyerror lt 1 title 'p25-p75'", block));
    clauses.push_back(
        fmt::format("'' index {} using 4:($1-0.34):(0):(0.68) with vectors nohead lw 3 lc rgb '#1d2433' {}",
                    block, block == 0 ? "title 'median'" : "notitle"));
    ++block;
  }
  f.script = script_head(f.name, "Step times around each point's median",
                         "whiskers p5-p95, box p25-p75, bar: median; orange: only p5 and p95 known") +
             tics("y", names) + (boxes.size() > 14 ? "set ytics font ',9'\n" : "") +
             fmt::format(
                 "set grid noytics xtics\n"
                 "unset key\n"
                 "set xlabel \"step time, % of the point's median\"\n"
                 "set format x '%g%%'\n"
                 "set xrange [{}:{}]\n"
                 "set yrange [{}:-0.6]\n"
                 "set style fill solid 0.35 border\n"
                 "set errorbars 1.5\n",
                 number(low - pad), number(high + pad), number(static_cast<double>(boxes.size()) - 0.4)) +
             plot(clauses);
  return f;
}

// The loss of every step, a line per training run.
std::optional<ReportFigure> loss_figure(const std::vector<const ReportPoint*>& sorted, bool with_model) {
  std::vector<const ReportPoint*> runs;
  for (const ReportPoint* p : sorted)
    if (std::any_of(p->losses.begin(), p->losses.end(), [](double l) { return std::isfinite(l); }))
      runs.push_back(p);
  if (runs.empty()) return std::nullopt;
  ReportFigure f =
      figure("loss", "The training loss of every step, a line per training run.", report_section_id("loss"));
  const std::vector<std::string> labels = distinct_labels(runs, with_model);
  f.data = "# step, loss ('?': not finite); a block per run\n";
  std::vector<std::string> clauses;
  for (size_t i = 0; i < runs.size(); ++i) {
    f.data += comment(labels[i] + " (" + runs[i]->source + ")");
    for (size_t step = 0; step < runs[i]->losses.size(); ++step) {
      const double loss = runs[i]->losses[step];
      f.data += fmt::format("{} {}\n", step + 1, std::isfinite(loss) ? number(loss) : "?");
    }
    f.data += "\n\n";
    clauses.push_back(fmt::format("{} index {} using 1:2 with lines lt {} title {} noenhanced",
                                  i == 0 ? fmt::format("'{}.dat'", f.name) : "''", i,
                                  1 + static_cast<int>(i) % kColourCount, quoted(labels[i])));
  }
  f.script = script_head(f.name, "Training loss") +
             "set datafile missing '?'\n"
             "set key top right\n"
             "set xlabel 'step'\n"
             "set ylabel 'loss'\n"
             "set yrange [0:*]\n" +
             plot(clauses);
  return f;
}

std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return "";
  size_t begin = text.rfind('\n', end);
  begin = begin == std::string::npos ? 0 : begin + 1;
  const size_t first = text.find_first_not_of(" \t", begin);
  return text.substr(first, end + 1 - first);
}

}  // namespace

std::vector<ReportFigure> plan_figures(const ReportInput& in) {
  std::vector<ReportFigure> figures;
  const ReportAxes axes = report_axes(in);
  Colours colours;
  for (const std::string& model : axes.models) {
    for (const std::string& precision : axes.precisions) {
      const std::vector<Series> series = series_of(in, axes, model, precision);
      if (!series.empty()) figures.push_back(throughput_figure(model, precision, series, axes, colours));
    }
    if (auto f = speedup_figure(model, in, axes, colours)) figures.push_back(std::move(*f));
  }
  const std::vector<const ReportPoint*> sorted = report_points_sorted(in);
  const bool with_model = axes.models.size() > 1;
  if (auto f = step_times_figure(sorted, with_model)) figures.push_back(std::move(*f));
  if (auto f = loss_figure(sorted, with_model)) figures.push_back(std::move(*f));
  // Two models whose names differ only in characters a file name cannot hold would share a file.
  std::set<std::string> names;
  for (ReportFigure& f : figures)
    for (int k = 2; !names.insert(f.name).second; ++k) f.name = fmt::format("{}_{}", f.name, k);
  return figures;
}

std::string draw_figure(const ReportFigure& figure, const std::string& dir, const std::string& gnuplot) {
  write_file_atomically(dir + "/" + figure.name + ".dat", figure.data);
  write_file_atomically(dir + "/" + figure.name + ".gp", figure.script);
  std::string svg;
  for (const std::string format : {"svg", "png"}) {
    ProcessOptions options;
    options.cwd = dir;
    options.timeout_seconds = 120;
    const ProcessResult run =
        run_process({gnuplot, "-e", fmt::format("output_format='{}'", format), figure.name + ".gp"}, options);
    if (run.exit_code != 0 || run.out.empty()) {
      const std::string why = !last_line(run.err).empty() ? last_line(run.err)
                              : run.timed_out             ? std::string("timed out")
                              : run.exit_code != 0        ? fmt::format("exit status {}", run.exit_code)
                                                          : std::string("it wrote nothing");
      throw_user_error("report: gnuplot failed on figure {} ({}): {}", figure.name, format, why);
    }
    write_file_atomically(dir + "/" + figure.name + "." + format, run.out);
    if (format == "svg") svg = run.out;
  }
  return svg;
}

}  // namespace dlbench
