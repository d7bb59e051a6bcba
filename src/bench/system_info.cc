#include "bench/system_info.h"

#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <ctime>
#include <fstream>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <thread>

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
  j["dlbench_version"] = DLBENCH_VERSION;
  j["git_commit"] = DLBENCH_GIT_COMMIT;
  return j;
}

}  // namespace dlbench
