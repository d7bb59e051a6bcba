#include "bench/system_info.h"

#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <oneapi/dnnl/dnnl.hpp>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "bench/gpu_info.h"
#include "core/file_io.h"
#include "git_commit.h"  // generated at build time: DLBENCH_GIT_COMMIT
#ifdef DLBENCH_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif
#ifdef DLBENCH_WITH_MPI
#include <mpi.h>
#endif

namespace dlbench {

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

// Sockets and physical cores from /proc/cpuinfo's (physical id, core id) pairs; 0 where it says nothing.
std::pair<int, int> sockets_and_cores() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  std::set<std::string> sockets;
  std::set<std::pair<std::string, std::string>> cores;
  std::string socket;
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos || colon + 2 > line.size()) continue;
    const std::string value = line.substr(colon + 2);
    if (line.rfind("physical id", 0) == 0) {
      socket = value;
      sockets.insert(value);
    } else if (line.rfind("core id", 0) == 0) {
      cores.insert({socket, value});
    }
  }
  return {static_cast<int>(sockets.size()), static_cast<int>(cores.size())};
}

int64_t memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

}  // namespace

std::string iso_date_utc() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

nlohmann::json system_info() {
  nlohmann::json j;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  utsname uts{};
  uname(&uts);
  const dnnl_version_t* dnnl = dnnl_version();
  j["hostname"] = host;
  j["os"] = fmt::format("{} {} {}", uts.sysname, uts.release, uts.machine);
  j["cpu"] = cpu_model();
  j["logical_cores"] = std::thread::hardware_concurrency();
  j["memory_bytes"] = memory_bytes();
  j["compiler"] = fmt::format("g++ {}", __VERSION__);
  j["onednn"] = fmt::format("{}.{}.{}", dnnl->major, dnnl->minor, dnnl->patch);
  const auto [sockets, cores] = sockets_and_cores();
  j["sockets"] = sockets;
  j["physical_cores"] = cores;
#ifdef DLBENCH_WITH_MPI
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int length = 0;
  if (MPI_Get_library_version(mpi, &length) == MPI_SUCCESS) {
    std::string text(mpi, static_cast<size_t>(length));
    j["mpi"] = text.substr(0, text.find_first_of(",\n"));  // "Open MPI v4.1.4"
  }
#endif
#ifdef DLBENCH_WITH_CUDA
  j["cuda"] = cuda_software_info();
#endif
  const nlohmann::json gpus = gpu_info();
  j["gpus"] = gpus["gpus"];
  if (gpus.contains("driver")) j["driver"] = gpus["driver"];
  if (gpus.contains("topology")) j["gpu_topology"] = gpus["topology"];
  j["dlbench_version"] = DLBENCH_VERSION;
  j["git_commit"] = DLBENCH_GIT_COMMIT;
  j["environment"] = run_environment();
  return j;
}

nlohmann::json run_environment() {
  nlohmann::json env = nlohmann::json::object();
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string_view text = *entry;
    const size_t equals = text.find('=');
    if (equals == std::string_view::npos) continue;
    const std::string_view name = text.substr(0, equals);
    if (name.starts_with("DLBENCH_") || name.starts_with("NCCL_") || name == "CUDA_VISIBLE_DEVICES" ||
        name == "CUDA_DEVICE_MAX_CONNECTIONS")
      env[std::string(name)] = std::string(text.substr(equals + 1));
  }
  return env;
}

std::string system_table(const nlohmann::json& s) {
  auto text = [&](const char* key) { return s.contains(key) ? s[key].get<std::string>() : std::string("-"); };
  std::string out;
  out += fmt::format("{:<10} {} (commit {})\n", "dlbench", text("dlbench_version"), text("git_commit"));
  out += fmt::format("{:<10} {}, {}\n", "host", text("hostname"), text("os"));
  // Results written before sockets and cores were recorded have only the thread count.
  out += s.value("sockets", 0) > 0
             ? fmt::format("{:<10} {}: {} socket(s), {} cores, {} threads\n", "cpu", text("cpu"),
                           s.value("sockets", 0), s.value("physical_cores", 0), s.value("logical_cores", 0))
             : fmt::format("{:<10} {}: {} threads\n", "cpu", text("cpu"), s.value("logical_cores", 0));
  out += fmt::format("{:<10} {:.1f} GiB\n", "memory", s.value("memory_bytes", int64_t{0}) / double(1 << 30));
  for (const auto& g : s.value("gpus", nlohmann::json::array())) {
    out += fmt::format(
        "{:<10} {}, {:.0f} GiB, SM up to {} MHz, memory {} MHz, power limit {:.0f} W, {} NVLinks\n",
        fmt::format("gpu {}", g.value("index", 0)), g.value("name", "?"),
        g.value("memory_bytes", 0ull) / double(1 << 30), g.value("max_sm_clock_mhz", 0u),
        g.value("max_memory_clock_mhz", 0u), g.value("power_limit_watts", 0.0), g.value("nvlinks_active", 0));
  }
  if (s.contains("gpu_topology")) {
    const auto& m = s["gpu_topology"];
    out += fmt::format("{:<10}", "topology");
    for (size_t b = 0; b < m.size(); ++b) out += fmt::format(" {:>5}", fmt::format("GPU{}", b));
    out += "\n";
    for (size_t a = 0; a < m.size(); ++a) {
      out += fmt::format("{:<10}", fmt::format("  GPU{}", a));
      for (const auto& cell : m[a]) out += fmt::format(" {:>5}", cell.get<std::string>());
      out += "\n";
    }
  }
  std::string software = fmt::format("{}, oneDNN {}", text("compiler"), text("onednn"));
  if (s.contains("driver")) software += ", driver " + text("driver");
  if (s.contains("cuda")) {
    const auto& c = s["cuda"];
    software += fmt::format(", CUDA runtime {} (driver API {}), cuDNN {}, cuBLAS {}, NCCL {}",
                            c.value("cuda_runtime", "?"), c.value("cuda_driver", "?"), c.value("cudnn", "?"),
                            c.value("cublas", "?"), c.value("nccl", "?"));
  }
  if (s.contains("mpi")) software += ", " + text("mpi");
  out += fmt::format("{:<10} {}\n", "software", software);
  if (s.contains("environment") && s["environment"].is_object() && !s["environment"].empty()) {
    std::string env;
    for (const auto& [name, value] : s["environment"].items())
      env += fmt::format("{}{}={}", env.empty() ? "" : " ", name,
                         value.is_string() ? value.get<std::string>() : value.dump());
    out += fmt::format("{:<10} {}\n", "environ", env);
  }
  return out;
}

void run_info(const std::string& json_path) {
  // Refused before the table is printed: a run that cannot keep its result says so first.
  if (!json_path.empty()) check_writable(json_path, "--json", OutputKind::json_object);
  const nlohmann::json s = system_info();
  std::fputs(system_table(s).c_str(), stdout);
  if (!json_path.empty()) {
    write_file_atomically(json_path, s.dump(2) + "\n");
    std::printf("result written to %s\n", json_path.c_str());
  }
}

}  // namespace dlbench
