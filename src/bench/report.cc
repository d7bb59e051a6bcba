#include "bench/report.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "bench/system_info.h"
#include "core/file_io.h"
#include "core/status.h"

namespace dlbench {

namespace {

std::optional<double> number_at(const nlohmann::json& j, const char* key) {
  if (j.is_object() && j.contains(key) && j[key].is_number()) return j[key].get<double>();
  return std::nullopt;
}

// One result object as a point; the name of the missing field when it is not one.
std::optional<std::string> to_point(const nlohmann::json& r, const std::string& source, ReportPoint& p) {
  for (const char* key : {"model", "precision"})
    if (!r.contains(key) || !r[key].is_string()) return std::string(key);
  if (!number_at(r, "images_per_second")) return std::string("images_per_second");
  p.source = source;
  p.framework = r.value("framework", std::string("dlbench"));
  p.model = r["model"];
  p.precision = r["precision"];
  p.launcher = r.value("launcher", std::string());
  p.gpus = static_cast<int>(number_at(r, "ranks").value_or(number_at(r, "world_size").value_or(1)));
  p.batch_size = static_cast<int64_t>(number_at(r, "batch_size").value_or(0));
  p.images_per_second = *number_at(r, "images_per_second");
  if (r.contains("step_ms")) {
    const auto& d = r["step_ms"];
    p.step_median_ms = number_at(d, "median");
    p.step_mean_ms = number_at(d, "mean");
    p.step_ci95_ms = number_at(d, "ci95");
    p.step_p5_ms = number_at(d, "p5");
    p.step_p95_ms = number_at(d, "p95");
    p.jitter = number_at(d, "jitter");
  }
  p.peak_memory_bytes = number_at(r, "peak_memory_bytes");
  p.system = r.contains("system") ? r["system"] : nlohmann::json();
  return std::nullopt;
}

void take(const nlohmann::json& j, const std::string& file, int line, ReportInput& in) {
  const std::string source = fmt::format("{}:{}", file, line);
  auto add = [&](const nlohmann::json& r, const char* where) {
    ReportPoint p;
    if (auto missing = to_point(r, source, p)) {
      std::fprintf(stderr, "report: %s line %d: %shas no \"%s\"; skipped\n", file.c_str(), line,
                   *where ? fmt::format("{} ", where).c_str() : "", missing->c_str());
      ++in.skipped_lines;
      return;
    }
    in.points.push_back(std::move(p));
  };
  if (j.contains("sweep_point")) {  // a dlbench sweep line
    if (j.value("status", std::string()) == "ok" && j.contains("result")) {
      add(j["result"], "the result");
    } else {
      const auto& k = j["sweep_point"];
      in.failed.push_back(fmt::format("{} {} {} GPU(s) batch {} ({}): {}", k.value("model", "?"),
                                      k.value("precision", "?"), k.value("gpus", 0), k.value("batch_size", 0),
                                      k.value("launcher", "?"),
                                      j.value("error", std::string("no error recorded"))));
    }
  } else if (j.contains("dlbench_result") || j.contains("peer_result")) {  // bench/gpu_*.sh lines
    if (j.contains("dlbench_result") && j["dlbench_result"].is_object())
      add(j["dlbench_result"], "dlbench_result");
    if (j.contains("peer_result") && j["peer_result"].is_object()) add(j["peer_result"], "peer_result");
  } else {
    add(j, "");
  }
}

std::string gib(double bytes) { return fmt::format("{:.1f}", bytes / double(1 << 30)); }
std::string rate(double v) {
  // Thousands separated, as the study's tables: 12,345
  std::string digits = fmt::format("{:.0f}", v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// The point of (framework, model, precision, gpus) with the highest rate: a file may hold repeats (two
// launchers, two runs); the table shows the best and the statistics section lists them all.
using Key = std::tuple<std::string, std::string, std::string, int>;

}  // namespace

ReportInput read_report_input(const std::vector<std::string>& paths) {
  ReportInput in;
  for (const std::string& path : paths) {
    std::ifstream file(path);
    DLB_REQUIRE(file.good(), "report: cannot read {}", path);
    std::stringstream whole;
    whole << file.rdbuf();
    const std::string text = whole.str();
    // A whole-file JSON object (a --json result), else JSON Lines.
    nlohmann::json single = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!single.is_discarded() && single.is_object()) {
      take(single, path, 1, in);
      continue;
    }
    std::istringstream lines(text);
    std::string line;
    for (int number = 1; std::getline(lines, line); ++number) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        std::fprintf(stderr, "report: %s line %d: not a JSON object; skipped\n", path.c_str(), number);
        ++in.skipped_lines;
        continue;
      }
      take(j, path, number, in);
    }
  }
  return in;
}

std::string report_markdown(const ReportInput& in) {
  std::string md = "# dlbench report\n\n";
  std::map<Key, const ReportPoint*> best;
  std::set<std::string> frameworks, models, precisions;
  std::set<int> gpu_counts;
  for (const ReportPoint& p : in.points) {
    Key k{p.framework, p.model, p.precision, p.gpus};
    if (!best.count(k) || best[k]->images_per_second < p.images_per_second) best[k] = &p;
    frameworks.insert(p.framework);
    models.insert(p.model);
    precisions.insert(p.precision);
    gpu_counts.insert(p.gpus);
  }
  // Precisions in the order of the study: fp32 first.
  std::vector<std::string> order;
  for (const char* p : {"fp32", "tf32", "fp16", "bf16"})
    if (precisions.count(p)) order.push_back(p);
  for (const auto& p : precisions)
    if (std::find(order.begin(), order.end(), p) == order.end()) order.push_back(p);

  md += "## System\n\n";
  const ReportPoint* with_system = nullptr;
  for (const ReportPoint& p : in.points)
    if (p.system.is_object() && p.framework == "dlbench") {
      with_system = &p;
      break;
    }
  md += with_system ? "```\n" + system_table(with_system->system) + "```\n\n"
                    : "No result carries a system description.\n\n";

  for (const std::string& model : models) {
    md += fmt::format("## {}: throughput (images/s, all GPUs together)\n\n", model);
    md +=
        "Each cell is the best point of that framework, precision and GPU count among the inputs (all of "
        "them "
        "are listed under Per-point statistics); compare cells measured in the same run.\n\n";
    md += "| framework | precision |";
    for (int g : gpu_counts) md += fmt::format(" {} GPU{} |", g, g > 1 ? "s" : "");
    md += "\n| --- | --- |";
    for (size_t i = 0; i < gpu_counts.size(); ++i) md += " ---: |";
    md += "\n";
    for (const std::string& f : frameworks)
      for (const std::string& p : order) {
        bool any = false;
        std::string row = fmt::format("| {} | {} |", f, p);
        for (int g : gpu_counts) {
          auto it = best.find({f, model, p, g});
          any |= it != best.end();
          row += it != best.end() ? fmt::format(" {} |", rate(it->second->images_per_second)) : " - |";
        }
        if (any) md += row + "\n";
      }
    md += "\n";

    md += fmt::format("## {}: speedup over one GPU and scaling efficiency\n\n", model);
    md += "| framework | precision | GPUs | speedup | efficiency |\n| --- | --- | ---: | ---: | ---: |\n";
    for (const std::string& f : frameworks)
      for (const std::string& p : order) {
        auto one = best.find({f, model, p, 1});
        if (one == best.end()) continue;
        for (int g : gpu_counts) {
          if (g == 1) continue;
          auto it = best.find({f, model, p, g});
          if (it == best.end()) continue;
          const double speedup = it->second->images_per_second / one->second->images_per_second;
          md += fmt::format("| {} | {} | {} | {:.2f}x | {:.1f}% |\n", f, p, g, speedup, 100.0 * speedup / g);
        }
      }
    md += "\n";

    md += fmt::format("## {}: what FP16 and BF16 gain over FP32\n\n", model);
    md += "| framework | GPUs | fp16 over fp32 | bf16 over fp32 |\n| --- | ---: | ---: | ---: |\n";
    for (const std::string& f : frameworks)
      for (int g : gpu_counts) {
        auto base = best.find({f, model, "fp32", g});
        if (base == best.end()) continue;
        auto gain = [&](const char* p) {
          auto it = best.find({f, model, p, g});
          return it == best.end()
                     ? std::string("-")
                     : fmt::format(
                           "{:+.0f}%",
                           100.0 * (it->second->images_per_second / base->second->images_per_second - 1.0));
        };
        md += fmt::format("| {} | {} | {} | {} |\n", f, g, gain("fp16"), gain("bf16"));
      }
    md += "\n";
  }

  md += "## Per-point statistics\n\n";
  md +=
      "Step times of each point's timed window; jitter = standard deviation / mean. Points whose jitter "
      "exceeds 5% are flagged: their throughput moved during the window.\n\n";
  md +=
      "| framework | model | precision | GPUs | batch/GPU | img/s | median ms | mean +- 95% CI ms | p5 ms | "
      "p95 ms "
      "| jitter | peak GiB | |\n| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
      "---: "
      "| --- |\n";
  std::vector<const ReportPoint*> sorted;
  for (const ReportPoint& p : in.points) sorted.push_back(&p);
  std::stable_sort(sorted.begin(), sorted.end(), [](const ReportPoint* a, const ReportPoint* b) {
    return std::tie(a->model, a->framework, a->precision, a->gpus) <
           std::tie(b->model, b->framework, b->precision, b->gpus);
  });
  auto ms = [](const std::optional<double>& v) { return v ? fmt::format("{:.2f}", *v) : std::string("-"); };
  for (const ReportPoint* p : sorted) {
    const bool flagged = p->jitter && *p->jitter > 0.05;
    md += fmt::format(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", p->framework, p->model,
        p->precision, p->gpus, p->batch_size, rate(p->images_per_second), ms(p->step_median_ms),
        p->step_mean_ms ? fmt::format("{:.2f} +- {}", *p->step_mean_ms, ms(p->step_ci95_ms)) : "-",
        ms(p->step_p5_ms), ms(p->step_p95_ms), p->jitter ? fmt::format("{:.1f}%", 100.0 * *p->jitter) : "-",
        p->peak_memory_bytes ? gib(*p->peak_memory_bytes) : "-", flagged ? "**large spread**" : "");
  }
  md += "\n";
  if (!in.failed.empty()) {
    md += "## Points that failed\n\n";
    for (const std::string& f : in.failed) md += "- " + f + "\n";
    md += "\n";
  }

  // Conclusions, each computed from the tables above.
  md += "## Conclusions\n\n";
  std::vector<std::string> conclusions;
  for (const std::string& model : models) {
    const int most = *gpu_counts.rbegin();
    if (most > 1) {
      std::string best_framework;
      double best_efficiency = -1;
      for (const std::string& f : frameworks)
        for (const std::string& p : order) {
          auto one = best.find({f, model, p, 1}), many = best.find({f, model, p, most});
          if (one == best.end() || many == best.end()) continue;
          const double e = many->second->images_per_second / one->second->images_per_second / most;
          if (e > best_efficiency) {
            best_efficiency = e;
            best_framework = fmt::format("{} ({})", f, p);
          }
        }
      if (best_efficiency > 0)
        conclusions.push_back(fmt::format("{} on {} GPUs: {} scales best, at {:.1f}% efficiency.", model,
                                          most, best_framework, 100.0 * best_efficiency));
    }
    for (const std::string& f : frameworks) {
      auto base = best.find({f, model, "fp32", 1}), half = best.find({f, model, "fp16", 1});
      if (base != best.end() && half != best.end())
        conclusions.push_back(
            fmt::format("{} {} on one GPU: FP16 trains {:.1f}x as fast as FP32 ({:+.0f}%).", f, model,
                        half->second->images_per_second / base->second->images_per_second,
                        100.0 * (half->second->images_per_second / base->second->images_per_second - 1)));
    }
    // The fastest framework at each precision on the largest GPU count both ran.
    for (const std::string& p : order)
      for (int g : gpu_counts) {
        std::vector<std::pair<double, std::string>> rates;
        for (const std::string& f : frameworks) {
          auto it = best.find({f, model, p, g});
          if (it != best.end()) rates.emplace_back(it->second->images_per_second, f);
        }
        if (rates.size() < 2) continue;
        std::sort(rates.rbegin(), rates.rend());
        conclusions.push_back(fmt::format("{} {} on {} GPU(s): {} is {:.2f}x as fast as {}.", model, p, g,
                                          rates[0].second, rates[0].first / rates[1].first, rates[1].second));
      }
  }
  if (conclusions.empty()) conclusions.push_back("Too few points for a comparison.");
  for (const std::string& c : conclusions) md += "- " + c + "\n";
  if (in.skipped_lines > 0)
    md += fmt::format("\n{} malformed input line(s) were skipped (named on stderr).\n", in.skipped_lines);
  return md;
}

void run_report(const std::vector<std::string>& paths, const std::string& out_dir) {
  DLB_REQUIRE(!paths.empty(), "report: give one or more result files");
  const ReportInput input = read_report_input(paths);
  DLB_REQUIRE(!input.points.empty(),
              "report: no result in {} (expected lines of dlbench bench/train --json, "
              "dlbench sweep or bench/*.sh)",
              fmt::join(paths, ", "));
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  DLB_REQUIRE(!ec, "report: cannot create {}: {}", out_dir, ec.message());
  const std::string path = out_dir + "/report.md";
  write_file_atomically(path, report_markdown(input));
  std::printf("report: %zu points%s -> %s\n", input.points.size(),
              input.skipped_lines ? fmt::format(" ({} lines skipped)", input.skipped_lines).c_str() : "",
              path.c_str());
}

}  // namespace dlbench
