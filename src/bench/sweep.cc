#include "bench/sweep.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "backend/backend_factory.h"
#include "bench/report.h"
#include "bench/system_info.h"
#include "core/file_io.h"
#include "core/file_paths.h"
#include "core/process.h"
#include "core/signals.h"
#include "core/status.h"
#include "data/decode_mode.h"
#include "models/gpt.h"
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

// The line of a failed point's log that says what went wrong: dlbench's own "dlbench: error: ..." where
// there is one, else the last line naming an error, else the last line. CLI11's closing hint ("Run with
// --help for more information.") says nothing about the point and is never the reason.
std::string error_of(const std::string& log_path, const ProcessResult& outcome) {
  if (outcome.timed_out) return fmt::format("timed out after {:.0f} s", outcome.seconds);
  std::ifstream in(log_path);
  std::string line, last, error, dlbench_error;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (line.rfind("Run with --help", 0) == 0) continue;
    last = line;
    if (line.rfind("dlbench: error:", 0) == 0) dlbench_error = line;
    if (line.find("error") != std::string::npos) error = line;
  }
  std::string message = !dlbench_error.empty() ? dlbench_error
                        : !error.empty()       ? error
                        : !last.empty()        ? last
                                               : "no output";
  if (outcome.exit_code < 0) message += " (killed by a signal)";
  return message;
}

// Whether a dlbench point's process stopped at parsing its command line: exit code 2 (apps/dlbench.cc). The
// sweep's own flags are valid, so the cause is --bench-args, and every point of the grid would fail the
// same way.
bool is_usage_error(int exit_code) { return exit_code == 2; }

// Where the peers' scripts are: --peers, $DLBENCH_PEERS, peers/ beside the binary or one or two folders up
// (a build folder inside the repository), else the source tree this binary was built from.
std::string find_peers_dir(const std::string& given) {
  if (!given.empty()) return given;
  if (const char* env = std::getenv("DLBENCH_PEERS")) return env;
  const fs::path exe_dir = fs::path(self_executable()).parent_path();
  for (const fs::path& candidate :
       {exe_dir / "peers", exe_dir / ".." / "peers", exe_dir / ".." / ".." / "peers"})
    if (fs::exists(candidate / "pytorch" / "train.py")) return fs::weakly_canonical(candidate).string();
#ifdef DLBENCH_PEERS_DIR
  return DLBENCH_PEERS_DIR;
#else
  return "peers";
#endif
}

// A --batch-sizes entry that is a number of images or sequences (not "max"), short enough for stoll.
bool is_batch_number(const std::string& text) {
  return !text.empty() && text.size() < 10 && std::all_of(text.begin(), text.end(), ::isdigit);
}

bool is_peer(const std::string& framework) {
  const auto& peers = peer_frameworks();
  return std::find(peers.begin(), peers.end(), framework) != peers.end();
}

struct Point {
  std::string model, precision;
  int gpus;
  std::string batch;  // a number or "max"
  int64_t steps, warmup_steps;
};

// What a point runs where the sweep was not told: on a GPU the study's (resnet50, batch 256, 60 steps
// after 20); on the CPU what `dlbench bench` picks there (train/config.cc), so that a point takes
// seconds, not hours: resnet20 at batch 128, 20 steps after 2 (an ImageNet model: batch 16, 10 steps).
// A GPT model takes bench's batch of sequences (train/config.cc: 16 on a GPU, 4 on the CPU; gpt-mini 64
// and 16).
std::vector<std::string> default_models(bool on_gpu) { return {on_gpu ? "resnet50" : "resnet20"}; }
std::string default_batch(const std::string& model, bool on_gpu) {
  if (is_gpt_model(model)) return model == "gpt-mini" ? (on_gpu ? "64" : "16") : (on_gpu ? "16" : "4");
  return on_gpu ? "256" : model == "resnet20" ? "128" : "16";
}
int64_t default_steps(const std::string& model, bool on_gpu) {
  return on_gpu ? 60 : model == "resnet20" ? 20 : 10;
}
int64_t default_warmup_steps(bool on_gpu) { return on_gpu ? 20 : 2; }

// How the progress lines and log names count a point's workers: GPUs, or on the CPU processes (ranks).
std::string workers_text(int count, bool on_gpu) {
  if (on_gpu) return fmt::format("{} GPU{}", count, count > 1 ? "s" : "");
  return count > 1 ? fmt::format("{} ranks (CPU)", count) : std::string("1 process (CPU)");
}

}  // namespace

std::string sweep_algorithm_cache(const SweepOptions& o, bool on_gpu) {
  if (o.algorithm_cache == "none") return {};
  if (o.algorithm_cache == "auto") return on_gpu ? o.results + ".algorithms.json" : std::string();
  return o.algorithm_cache;
}

namespace {

// Whether dlbench's points given --device `device` train on a GPU ("auto" picks one when there is one).
bool runs_on_gpu(const std::string& device) {
  return device.rfind("cuda", 0) == 0 || (device == "auto" && cuda_backend_available());
}

// A point's identity in the results file: sweep_point_key, and dlbench's extra bench flags when given.
nlohmann::json point_key(const SweepOptions& o, const std::string& model, const std::string& precision,
                         int gpus, const std::string& batch_size) {
  nlohmann::json key = sweep_point_key(o.framework, model, precision, gpus, batch_size, o.launcher);
  if (o.framework == "dlbench" && !o.bench_args.empty()) key["bench_args"] = o.bench_args;
  if (o.framework == "dlbench" && o.decode != "auto") key["decode"] = o.decode;
  return key;
}

// The command line of one point.
std::vector<std::string> point_command(const SweepOptions& o, const Point& p, const std::string& json_path,
                                       const std::string& peers_dir, const std::string& device) {
  std::vector<std::string> argv;
  const bool mpi = o.launcher == "mpi" && (o.framework == "dlbench" || p.gpus > 1);
  if (mpi) {
    argv = {o.mpirun, "-np", std::to_string(p.gpus)};
    argv.insert(argv.end(), o.mpirun_args.begin(), o.mpirun_args.end());
  }
  const std::vector<std::string> common = {"--model",        p.model,
                                           "--precision",    p.precision,
                                           "--batch-size",   p.batch,
                                           "--steps",        std::to_string(p.steps),
                                           "--warmup-steps", std::to_string(p.warmup_steps),
                                           "--device",       device,
                                           "--json",         json_path};
  if (o.framework == "dlbench") {
    argv.insert(argv.end(), {self_executable(), "bench"});
    argv.insert(argv.end(), common.begin(), common.end());
    if (o.launcher == "threads")
      argv.insert(argv.end(), {"--gpus", std::to_string(p.gpus), "--launcher", "threads"});
    else
      argv.insert(argv.end(), {"--launcher", "mpi"});
    if (const std::string cache = sweep_algorithm_cache(o, runs_on_gpu(device)); !cache.empty())
      argv.insert(argv.end(), {"--algorithm-cache", cache});
    else if (o.algorithm_cache == "none" && runs_on_gpu(device))
      argv.insert(argv.end(), {"--algorithm-cache", "none"});  // not the user's cache folder either
    if (o.decode != "auto") argv.insert(argv.end(), {"--decode", o.decode});
    argv.insert(argv.end(), o.bench_args.begin(), o.bench_args.end());
    return argv;
  }
  const bool jax = o.framework == "jax";
  // The PyTorch peer of a GPT model is nanoGPT's step (peers/pytorch/gpt.py); the JAX peer has none (its
  // GPT points are recorded unavailable: why_peer_cannot_run).
  const bool gpt = is_gpt_model(p.model);
  const std::string script = peers_dir + (jax   ? "/jax/train.py"
                                          : gpt ? "/pytorch/gpt.py"
                                                : "/pytorch/train.py");
  argv.push_back(o.python);
  if (p.gpus > 1 && !mpi)
    argv.insert(argv.end(),
                {"-m", "torch.distributed.run", "--standalone", "--nproc_per_node", std::to_string(p.gpus)});
  argv.push_back(script);
  argv.insert(argv.end(), common.begin(), common.end());
  // The PyTorch peer at its best on a GPU: channels-last (the tensor cores' layout), compiled if asked.
  if (!jax && !gpt) argv.push_back("--channels-last");
  if (o.framework == "pytorch-compiled") argv.push_back("--compile");
  return argv;
}

// Why a peer cannot run point `p` ("" where it can), so that the point is recorded as unavailable without
// starting anything: no peer trains in fp8 by itself; the JAX peer trains ResNets on one GPU; the PyTorch
// peer of a GPT model (peers/pytorch/gpt.py) trains in one process, so that N of them under torchrun would
// each write one GPU's result for the N-GPU point, and takes a batch given in numbers.
std::string why_peer_cannot_run(const std::string& framework, const Point& p) {
  if (p.precision == "fp8") return "the peers do not train in fp8 (dlbench's fp8 compares with its own bf16)";
  const bool gpt = is_gpt_model(p.model);
  if (framework == "jax") {
    if (gpt) return "the JAX peer has no GPT model";
    return p.gpus > 1 ? "the JAX peer trains on one GPU only" : "";
  }
  if (!gpt) return "";
  if (p.gpus > 1) return "the PyTorch GPT peer (peers/pytorch/gpt.py) trains on one GPU only";
  return p.batch == "max" ? "the PyTorch GPT peer (peers/pytorch/gpt.py) takes no --batch-size max" : "";
}

// How many points of `o` failed (recorded in the results file); unavailable peers are not failures.
struct SweepTally {
  bool interrupted = false;  // stopped by a signal: points were left
  size_t run = 0;            // points whose process ran them (ok, failed or interrupted)
  int failed = 0, skipped = 0, unavailable = 0;
  std::string unavailable_reason;
};

// The point's line from how its process ended: ok with its result, interrupted, unavailable (a peer not
// installed), or failed with the line of its log that says why; its outcome counted in `tally`.
void record_outcome(const SweepOptions& o, const ProcessResult& outcome, const std::string& json_path,
                    const std::string& log_path, const nlohmann::json& system, nlohmann::json& line,
                    SweepTally& tally) {
  const bool peer = o.framework != "dlbench";
  const char* who = peer ? "compare" : "sweep";
  nlohmann::json result;
  if (outcome.exit_code == 0) {
    std::ifstream in(json_path);
    result = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  }
  if (outcome.stopped) {
    line["status"] = "interrupted";
    line["error"] = fmt::format("the sweep was stopped {:.0f} s into this point", outcome.seconds);
    line["system"] = system;
    tally.interrupted = true;
    std::printf("%s:   interrupted: the sweep was asked to stop\n", who);
  } else if (outcome.exit_code == 0 && result.is_object()) {
    line["status"] = "ok";
    line["result"] = result;
    if (result.contains("tokens_per_second") && result["tokens_per_second"].is_number())
      std::printf("%s:   %.0f tokens/s\n", who, result["tokens_per_second"].get<double>());
    else
      std::printf("%s:   %.1f img/s\n", who, result.value("images_per_second", 0.0));
  } else if (peer && (outcome.exit_code == 3 || outcome.exit_code == 127)) {
    // The peer says its framework is not installed (3), or its interpreter could not be started (127).
    tally.unavailable_reason = error_of(log_path, outcome);
    line["status"] = "unavailable";
    line["error"] = tally.unavailable_reason;
    line["system"] = system;
    ++tally.unavailable;
    std::printf("%s:   %s is not available here: %s\n", who, o.framework.c_str(),
                tally.unavailable_reason.c_str());
  } else {
    line["status"] = "failed";
    line["error"] = outcome.exit_code == 0 ? "no result written" : error_of(log_path, outcome);
    line["system"] = system;
    ++tally.failed;
    std::printf("%s:   failed: %s\n", who, line["error"].get<std::string>().c_str());
  }
  std::fflush(stdout);
}

// A dlbench point refused at its command line: the sweep's own flags are valid, so --bench-args is at
// fault and every point would fail the same way. The sweep stops with the line that says what was wrong,
// recording nothing, so that the same grid with the flags corrected runs every point.
[[noreturn]] void refuse_command_line(const SweepOptions& o, std::string reason, const std::string& log) {
  const std::string prefix = "dlbench: error: ";
  if (reason.rfind(prefix, 0) == 0) reason = reason.substr(prefix.size());
  std::string flags;
  for (const std::string& a : o.bench_args) flags += (flags.empty() ? "" : ",") + a;
  throw_user_error("sweep: {}{}; no point was run or recorded (every point would fail the same way; see {})",
                   o.bench_args.empty() ? "" : fmt::format("--bench-args {}: ", flags), reason, log);
}

// The grid's flags, checked before anything runs; UserError naming the first bad one.
void check_grid(const SweepOptions& o, bool on_gpu) {
  DLB_REQUIRE(!o.results.empty(), "{}: give --results FILE", o.framework == "dlbench" ? "sweep" : "compare");
  DLB_REQUIRE(o.framework == "dlbench" || is_peer(o.framework),
              "--frameworks {}: unknown; choose among pytorch, pytorch-compiled, jax", o.framework);
  if (o.framework == "dlbench")
    DLB_REQUIRE(o.launcher == "threads" || o.launcher == "mpi", "--launcher {}: choose threads or mpi",
                o.launcher);
  else
    DLB_REQUIRE(o.launcher == "torchrun" || o.launcher == "mpi", "--launcher {}: choose torchrun or mpi",
                o.launcher);
  DLB_REQUIRE(o.steps.value_or(1) >= 1, "--steps {}: must be positive", o.steps.value_or(1));
  DLB_REQUIRE(o.warmup_steps.value_or(0) >= 0, "--warmup-steps {}: must be 0 or more",
              o.warmup_steps.value_or(0));
  DLB_REQUIRE(o.point_timeout_seconds > 0, "--point-timeout {}: must be positive", o.point_timeout_seconds);
  parse_decode_mode(o.decode, "--decode");  // the value checked here; each point resolves it
  for (const std::string& m : o.models) DLB_REQUIRE(is_model_name(m), "--models {}: unknown model", m);
  for (const std::string& p : o.precisions)
    DLB_REQUIRE(p == "fp32" || p == "tf32" || p == "fp16" || p == "bf16" || p == "fp8",
                "--precisions {}: choose among fp32, tf32, fp16, bf16, fp8", p);
  for (int g : o.gpus) {
    DLB_REQUIRE(g >= 1, "--gpus {}: must be 1 or more", g);
    // One dlbench process trains on one CPU rank: several need one process each.
    DLB_REQUIRE(on_gpu || g == 1 || o.framework != "dlbench" || o.launcher == "mpi",
                "--gpus {}: on the CPU a point runs one rank per process; give --launcher mpi for {} ranks",
                g, g);
  }
  for (const std::string& b : o.batch_sizes) {
    DLB_REQUIRE(b == "max" || (is_batch_number(b) && std::stoll(b) >= 1),
                "--batch-sizes {}: give numbers of images (GPT models: sequences) per GPU, or max", b);
  }
}

// The files a sweep writes, refused where two are one (say --algorithm-cache naming the results file),
// and the results file checked writable before hours of points.
void check_sweep_paths(const SweepOptions& o, const std::string& logs, bool on_gpu) {
  std::vector<PathUse> uses = {{"--results", o.results, PathRole::writes_file},
                               {"the logs folder", logs, PathRole::writes_tree}};
  if (o.framework == "dlbench")
    uses.push_back({"--algorithm-cache", sweep_algorithm_cache(o, on_gpu), PathRole::writes_file});
  check_path_uses(uses);
  check_writable(o.results, "--results", OutputKind::json_lines);
}

// The grid's points, each with its batch and steps (given, or the device's defaults for its model).
std::vector<Point> grid_points(const SweepOptions& o, bool on_gpu) {
  std::vector<Point> points;
  for (const auto& m : o.models.empty() ? default_models(on_gpu) : o.models)
    for (const auto& p : o.precisions)
      for (int g : o.gpus)
        for (const std::string& b :
             o.batch_sizes.empty() ? std::vector<std::string>{default_batch(m, on_gpu)} : o.batch_sizes)
          points.push_back({m, p, g, b, o.steps.value_or(default_steps(m, on_gpu)),
                            o.warmup_steps.value_or(default_warmup_steps(on_gpu))});
  return points;
}

// The results' points already run (ok, or failed unless --retry-failed) are skipped; the others returned
// in the grid's order.
std::vector<Point> points_to_run(const SweepOptions& o, bool on_gpu, SweepTally& tally) {
  const auto recorded = read_sweep_points(o.results);
  auto already = [&](const nlohmann::json& key) {
    for (const auto& [point, status] : recorded)
      // An interrupted point always runs again; a failed one only when asked.
      if (point == key && (status == "ok" || (status != "interrupted" && !o.retry_failed))) return true;
    return false;
  };
  std::vector<Point> todo;
  for (const Point& p : grid_points(o, on_gpu)) {
    if (already(point_key(o, p.model, p.precision, p.gpus, p.batch))) {
      ++tally.skipped;
    } else {
      todo.push_back(p);
    }
  }
  return todo;
}

// What every point of one sweep shares.
struct SweepRun {
  explicit SweepRun(const SweepOptions& options) : o(options) {}
  const SweepOptions& o;
  bool on_gpu = false, peer = false;
  const char* who = "sweep";  // the command, in the lines it prints
  std::string logs;           // the folder of the points' logs and result files
  std::string peers_dir, device;
  nlohmann::json system;
};

// Point i of `count`: run as its own process, or recorded as unavailable without starting anything; its
// line appended to the results. `spent`: the seconds the points so far took, for the time left.
void run_point(const SweepRun& r, const Point& p, size_t i, size_t count, double& spent, SweepTally& tally) {
  const SweepOptions& o = r.o;
  const std::string name = fmt::format("{}-{}-{}-{}{}-b{}-{}", o.framework, p.model, p.precision, p.gpus,
                                       r.on_gpu ? "gpu" : "rank", p.batch, o.launcher);
  const std::string json_path = r.logs + "/" + name + ".json", log_path = r.logs + "/" + name + ".log";
  nlohmann::json line = {{"date", iso_date_utc()},
                         {"sweep_point", point_key(o, p.model, p.precision, p.gpus, p.batch)}};
  // A peer found missing, or a point it cannot run, is recorded without starting anything; the missing
  // peer's reason without the program that gave it ("pytorch gpt peer: "), which may be another model's.
  std::string not_run = tally.unavailable_reason;
  constexpr std::string_view kNamedBy = " peer: ";
  if (const size_t named = not_run.find(kNamedBy); named != std::string::npos)
    not_run = not_run.substr(named + kNamedBy.size());
  if (not_run.empty() && r.peer) not_run = why_peer_cannot_run(o.framework, p);
  if (!not_run.empty()) {
    line["status"] = "unavailable";
    line["error"] = not_run;
    line["system"] = r.system;
    ++tally.unavailable;
    append_line(o.results, line.dump());
    return;
  }
  std::error_code ec;
  fs::remove(json_path, ec);
  const std::vector<std::string> argv = point_command(o, p, json_path, r.peers_dir, r.device);

  const double eta = i > 0 ? spent / static_cast<double>(i) * static_cast<double>(count - i) : 0;
  std::printf("%s: point %zu of %zu: %s %s %s, %s, batch %s, %s%s\n", r.who, i + 1, count,
              o.framework.c_str(), p.model.c_str(), p.precision.c_str(),
              workers_text(p.gpus, r.on_gpu).c_str(), p.batch.c_str(), o.launcher.c_str(),
              i > 0 ? fmt::format(" | about {} left", duration_text(eta)).c_str() : "");
  std::fflush(stdout);
  ProcessOptions run;
  run.log_path = log_path;
  run.timeout_seconds = o.point_timeout_seconds;
  const ProcessResult outcome = run_process(argv, run);
  spent += outcome.seconds;
  line["seconds"] = outcome.seconds;
  line["log"] = log_path;
  if (!r.peer && !outcome.stopped && is_usage_error(outcome.exit_code))
    refuse_command_line(o, error_of(log_path, outcome), log_path);
  record_outcome(o, outcome, json_path, log_path, r.system, line, tally);
  // A peer that turned out not to be installed ran no point: it counts among the unavailable ones alone.
  if (line["status"] != "unavailable") ++tally.run;
  append_line(o.results, line.dump());
}

SweepTally sweep_points(const SweepOptions& o) {
  // Stopped by `timeout` or Ctrl-C, from here on: the running point's processes are killed and the point
  // recorded as interrupted (run again on the next start), instead of vanishing with the sweep.
  defer_stop_to_safe_points();
  SweepRun r(o);
  r.peer = o.framework != "dlbench";
  r.on_gpu = runs_on_gpu(o.device);
  r.who = r.peer ? "compare" : "sweep";
  check_grid(o, r.on_gpu);
  r.logs = o.results + ".logs";
  check_sweep_paths(o, r.logs, r.on_gpu);
  std::error_code ec;
  fs::create_directories(r.logs, ec);
  DLB_REQUIRE(!ec, "sweep: cannot create {}: {}", r.logs, ec.message());

  SweepTally tally;
  const std::vector<Point> todo = points_to_run(o, r.on_gpu, tally);
  std::printf("%s: %s: %zu points to run, %d already in %s\n", r.who, o.framework.c_str(), todo.size(),
              tally.skipped, o.results.c_str());
  if (!r.peer) {
    if (const std::string cache = sweep_algorithm_cache(o, r.on_gpu); !cache.empty())
      std::printf("%s: algorithm choices kept in %s: every point runs the first one's kernels\n", r.who,
                  cache.c_str());
  }
  std::fflush(stdout);

  r.peers_dir = r.peer ? find_peers_dir(o.peers_dir) : std::string();
  r.device = o.device != "auto" || !r.peer ? o.device : (r.on_gpu ? "cuda" : "cpu");
  r.system = system_info();
  double spent = 0;
  for (size_t i = 0; i < todo.size() && !stop_requested(); ++i)
    run_point(r, todo[i], i, todo.size(), spent, tally);
  std::printf("%s: %s done: %zu run, %d failed, %d not available, %d skipped; results in %s\n", r.who,
              o.framework.c_str(), tally.run, tally.failed, tally.unavailable, tally.skipped,
              o.results.c_str());
  std::fflush(stdout);
  return tally;
}

}  // namespace

const std::vector<std::string>& peer_frameworks() {
  static const std::vector<std::string> peers = {"pytorch", "pytorch-compiled", "jax"};
  return peers;
}

nlohmann::json sweep_point_key(const std::string& framework, const std::string& model,
                               const std::string& precision, int gpus, const std::string& batch_size,
                               const std::string& launcher) {
  const bool number = is_batch_number(batch_size);
  return {{"framework", framework},
          {"model", model},
          {"precision", precision},
          {"gpus", gpus},
          {"batch_size", number ? nlohmann::json(std::stoll(batch_size)) : nlohmann::json(batch_size)},
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
    nlohmann::json key = j["sweep_point"];
    if (!key.contains("framework")) key["framework"] = "dlbench";
    points.emplace_back(key, j["status"].get<std::string>());
  }
  return points;
}

// After a signal asked the sweep to stop: one line, exit status 1, the rest left for the next start.
void require_not_stopped(const std::string& results) {
  DLB_REQUIRE(!stop_requested(),
              "stopped by a signal; the points not run (and the one interrupted) run when the same command "
              "is started again with {}",
              results);
}

void run_sweep(const SweepOptions& o) {
  const SweepTally tally = sweep_points(o);
  require_not_stopped(o.results);
  DLB_REQUIRE(tally.failed == 0,
              "sweep: {} of {} points failed (recorded in {}; --retry-failed runs them again)", tally.failed,
              tally.run, o.results);
}

void run_compare(const SweepOptions& o, const std::vector<std::string>& frameworks) {
  DLB_REQUIRE(!frameworks.empty(), "compare: give --frameworks (pytorch, pytorch-compiled, jax)");
  for (const std::string& f : frameworks)
    DLB_REQUIRE(is_peer(f), "--frameworks {}: unknown; choose among pytorch, pytorch-compiled, jax", f);
  int failed = 0;
  size_t run = 0;
  std::vector<std::string> missing;
  for (const std::string& f : frameworks) {
    require_not_stopped(o.results);
    SweepOptions peer = o;
    peer.framework = f;
    const SweepTally tally = sweep_points(peer);
    failed += tally.failed;
    run += tally.run;
    if (!tally.unavailable_reason.empty()) missing.push_back(f + " (" + tally.unavailable_reason + ")");
  }
  require_not_stopped(o.results);
  for (const std::string& m : missing) std::printf("compare: not installed here: %s\n", m.c_str());
  DLB_REQUIRE(failed == 0, "compare: {} of {} points failed (recorded in {}; --retry-failed runs them again)",
              failed, run, o.results);
}

void run_study(const StudyOptions& s) {
  const nlohmann::json system = system_info();
  std::printf("%s\n", system_table(system).c_str());
  std::fflush(stdout);
  int failed = 0;
  // Each part runs unless a signal asked the study to stop; the report is written of what was measured.
  auto part = [&](const SweepOptions& grid) {
    if (!stop_requested()) failed += sweep_points(grid).failed;
  };
  // The report's folder must not be (or hold) the results file or its logs.
  check_path_uses({{"--results", s.grid.results, PathRole::writes_file},
                   {"the logs folder", s.grid.results + ".logs", PathRole::writes_tree},
                   {"-o", s.report_dir, PathRole::writes_tree}});
  SweepOptions grid = s.grid;
  if (grid.precisions.empty())
    grid.precisions = runs_on_gpu(grid.device) ? std::vector<std::string>{"fp32", "tf32", "fp16", "bf16"}
                                               : std::vector<std::string>{"fp32"};
  SweepOptions threads = grid;
  threads.framework = "dlbench";
  threads.launcher = "threads";
  part(threads);
  // One process per GPU as well, where several GPUs are asked for and an MPI launcher is found.
  const bool several = std::any_of(s.grid.gpus.begin(), s.grid.gpus.end(), [](int g) { return g > 1; });
  const bool have_mpirun = find_program(s.grid.mpirun).has_value();
  if (several && have_mpirun) {
    SweepOptions mpi = threads;
    mpi.launcher = "mpi";
    // One GPU under mpirun is the one-GPU run again: the threads point is the baseline of both.
    mpi.gpus.clear();
    for (int g : s.grid.gpus)
      if (g > 1) mpi.gpus.push_back(g);
    part(mpi);
  } else if (several) {
    std::printf("study: no %s found; the one-process-per-GPU points are not run\n", s.grid.mpirun.c_str());
  }
  for (const std::string& f : s.frameworks.empty() ? peer_frameworks() : s.frameworks) {
    SweepOptions peer = grid;
    peer.framework = f;
    peer.launcher = "torchrun";
    part(peer);
  }
  run_report({s.grid.results}, s.report_dir);
  require_not_stopped(s.grid.results);
  DLB_REQUIRE(failed == 0, "study: {} points failed (recorded in {} and listed in the report)", failed,
              s.grid.results);
}

}  // namespace dlbench
