#include "bench/sweep.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "bench/system_info.h"
#include "core/status.h"
#include "models/resnet.h"

namespace dlbench {

namespace fs = std::filesystem;

namespace {

std::string self_executable() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  DLB_CHECK(!ec, "sweep: cannot find the dlbench executable: {}", ec.message());
  return self.string();
}

std::string duration_text(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

struct Outcome {
  int exit_code = -1;  // -1: killed by a signal or the time-out
  bool timed_out = false;
  double seconds = 0;
};

// Runs `argv` with stdout and stderr to `log_path`, in its own process group so that a time-out stops
// mpirun and its ranks too.
Outcome run_process(const std::vector<std::string>& argv, const std::string& log_path,
                    double timeout_seconds) {
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  DLB_REQUIRE(log >= 0, "sweep: cannot write {}: {}", log_path, std::strerror(errno));
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(log, STDOUT_FILENO);
    ::dup2(log, STDERR_FILENO);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "dlbench: error: cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(log);
  DLB_REQUIRE(pid > 0, "sweep: cannot start a process: {}", std::strerror(errno));
  Outcome outcome;
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (outcome.seconds > timeout_seconds && !outcome.timed_out) {
      outcome.timed_out = true;
      ::kill(-pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  outcome.exit_code = WIFEXITED(status) && !outcome.timed_out ? WEXITSTATUS(status) : -1;
  return outcome;
}

// The last line a failed point wrote that says what went wrong (an "error" line if there is one).
std::string error_of(const std::string& log_path, const Outcome& outcome) {
  if (outcome.timed_out) return fmt::format("timed out after {:.0f} s", outcome.seconds);
  std::ifstream in(log_path);
  std::string line, last, error;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    last = line;
    if (line.find("error") != std::string::npos) error = line;
  }
  std::string message = !error.empty() ? error : !last.empty() ? last : "no output";
  if (outcome.exit_code < 0) message += " (killed by a signal)";
  return message;
}

void append_line(const std::string& path, const nlohmann::json& line) {
  const std::string text = line.dump() + "\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  DLB_REQUIRE(fd >= 0, "sweep: cannot append to {}: {}", path, std::strerror(errno));
  // One write of the whole line: a sweep stopped mid-point never leaves half a line.
  const ssize_t written = ::write(fd, text.data(), text.size());
  const bool ok = written == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  DLB_REQUIRE(ok, "sweep: writing {} failed: {}", path, std::strerror(errno));
}

}  // namespace

nlohmann::json sweep_point_key(const std::string& model, const std::string& precision, int gpus,
                               int64_t batch_size, const std::string& launcher) {
  return {{"model", model},
          {"precision", precision},
          {"gpus", gpus},
          {"batch_size", batch_size},
          {"launcher", launcher}};
}

std::vector<std::pair<nlohmann::json, std::string>> read_sweep_points(const std::string& path) {
  std::vector<std::pair<nlohmann::json, std::string>> points;
  std::ifstream in(path);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      std::fprintf(stderr, "sweep: %s line %d: not a JSON object; skipped\n", path.c_str(), number);
      continue;
    }
    if (!j.contains("sweep_point") || !j["sweep_point"].is_object() || !j.contains("status") ||
        !j["status"].is_string()) {
      std::fprintf(stderr, "sweep: %s line %d: no %s; skipped\n", path.c_str(), number,
                   j.contains("sweep_point") ? "\"status\"" : "\"sweep_point\"");
      continue;
    }
    points.emplace_back(j["sweep_point"], j["status"].get<std::string>());
  }
  return points;
}

void run_sweep(const SweepOptions& o) {
  DLB_REQUIRE(!o.results.empty(), "sweep: give --results FILE");
  DLB_REQUIRE(o.launcher == "threads" || o.launcher == "mpi", "--launcher {}: choose threads or mpi",
              o.launcher);
  DLB_REQUIRE(o.steps >= 1 && o.warmup_steps >= 0,
              "sweep: --steps must be positive, --warmup-steps 0 or more");
  DLB_REQUIRE(o.point_timeout_seconds > 0, "--point-timeout {}: must be positive", o.point_timeout_seconds);
  for (const std::string& m : o.models) DLB_REQUIRE(is_model_name(m), "--models {}: unknown model", m);
  for (const std::string& p : o.precisions)
    DLB_REQUIRE(p == "fp32" || p == "tf32" || p == "fp16" || p == "bf16",
                "--precisions {}: choose among fp32, tf32, fp16, bf16", p);
  for (int g : o.gpus) DLB_REQUIRE(g >= 1, "--gpus {}: must be 1 or more", g);
  for (int64_t b : o.batch_sizes) DLB_REQUIRE(b >= 1, "--batch-sizes {}: must be 1 or more", b);

  const std::string logs = o.results + ".logs";
  std::error_code ec;
  fs::create_directories(logs, ec);
  DLB_REQUIRE(!ec, "sweep: cannot create {}: {}", logs, ec.message());
  const auto recorded = read_sweep_points(o.results);
  auto already = [&](const nlohmann::json& key) {
    for (const auto& [point, status] : recorded)
      if (point == key && (status == "ok" || !o.retry_failed)) return true;
    return false;
  };

  struct Point {
    std::string model, precision;
    int gpus;
    int64_t batch;
  };
  std::vector<Point> todo;
  int skipped = 0;
  for (const auto& m : o.models)
    for (const auto& p : o.precisions)
      for (int g : o.gpus)
        for (int64_t b : o.batch_sizes) {
          if (already(sweep_point_key(m, p, g, b, o.launcher))) {
            ++skipped;
          } else {
            todo.push_back({m, p, g, b});
          }
        }
  std::printf("sweep: %zu points to run, %d already in %s\n", todo.size(), skipped, o.results.c_str());
  std::fflush(stdout);

  const std::string self = self_executable();
  const nlohmann::json system = system_info();
  int failed = 0;
  double spent = 0;
  for (size_t i = 0; i < todo.size(); ++i) {
    const Point& p = todo[i];
    const std::string name =
        fmt::format("{}-{}-{}gpu-b{}-{}", p.model, p.precision, p.gpus, p.batch, o.launcher);
    const std::string json_path = logs + "/" + name + ".json", log_path = logs + "/" + name + ".log";
    fs::remove(json_path, ec);
    std::vector<std::string> argv;
    if (o.launcher == "mpi") {
      argv = {o.mpirun, "-np", std::to_string(p.gpus)};
      argv.insert(argv.end(), o.mpirun_args.begin(), o.mpirun_args.end());
    }
    argv.insert(argv.end(), {self, "bench", "--model", p.model, "--precision", p.precision, "--batch-size",
                             std::to_string(p.batch), "--steps", std::to_string(o.steps), "--warmup-steps",
                             std::to_string(o.warmup_steps), "--device", o.device, "--json", json_path});
    if (o.launcher == "threads")
      argv.insert(argv.end(), {"--gpus", std::to_string(p.gpus), "--launcher", "threads"});
    else
      argv.insert(argv.end(), {"--launcher", "mpi"});

    const double eta = i > 0 ? spent / static_cast<double>(i) * static_cast<double>(todo.size() - i) : 0;
    std::printf("sweep: point %zu of %zu: %s %s, %d GPU(s), batch %lld, %s%s\n", i + 1, todo.size(),
                p.model.c_str(), p.precision.c_str(), p.gpus, static_cast<long long>(p.batch),
                o.launcher.c_str(), i > 0 ? fmt::format(" | about {} left", duration_text(eta)).c_str() : "");
    std::fflush(stdout);
    const Outcome outcome = run_process(argv, log_path, o.point_timeout_seconds);
    spent += outcome.seconds;

    nlohmann::json line = {
        {"date", iso_date_utc()},
        {"sweep_point", sweep_point_key(p.model, p.precision, p.gpus, p.batch, o.launcher)},
        {"seconds", outcome.seconds},
        {"log", log_path}};
    nlohmann::json result;
    if (outcome.exit_code == 0) {
      std::ifstream in(json_path);
      result = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    }
    if (outcome.exit_code == 0 && result.is_object()) {
      line["status"] = "ok";
      line["result"] = result;
      std::printf("sweep:   %.1f img/s\n", result.value("images_per_second", 0.0));
    } else {
      line["status"] = "failed";
      line["error"] = outcome.exit_code == 0 ? "no result written" : error_of(log_path, outcome);
      line["system"] = system;
      ++failed;
      std::printf("sweep:   failed: %s\n", line["error"].get<std::string>().c_str());
    }
    std::fflush(stdout);
    append_line(o.results, line);
  }
  std::printf("sweep: done: %zu run, %d failed, %d skipped; results in %s\n", todo.size(), failed, skipped,
              o.results.c_str());
  DLB_REQUIRE(failed == 0, "sweep: {} of {} points failed (recorded in {}; --retry-failed runs them again)",
              failed, todo.size(), o.results);
}

}  // namespace dlbench
