#include "core/machine_limits.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>

#include "core/status.h"

namespace dlbench {

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
}

double process_cpu_seconds() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

int resolve_threads(int requested, int all_value, const std::string& flag) {
  DLB_REQUIRE(requested >= 0, "{} {}: must be 0 (all cores) or more", flag, requested);
  if (requested == 0) return std::max(1, all_value);
  const int cores = usable_cores();
  DLB_REQUIRE(requested <= cores,
              "{} {}: this process may run on {} core{}; give at most {} (or 0: all of them)", flag,
              requested, cores, cores == 1 ? "" : "s", cores);
  return requested;
}

void require_host_memory(uint64_t bytes, const std::string& flag, const std::string& what) {
  const uint64_t memory = physical_memory_bytes();
  if (memory == 0) return;
  DLB_REQUIRE(
      bytes <= memory / 2,
      "{}: {} would take {:.1f} GiB, more than half of this machine's {:.1f} GiB; give a smaller value", flag,
      what, static_cast<double>(bytes) / (1 << 30), static_cast<double>(memory) / (1 << 30));
}

}  // namespace dlbench
