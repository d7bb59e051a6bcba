// What this machine allows a flag to ask for: threads against the cores this process may run on, buffers
// against its memory. Each check refuses with one line naming the flag and the bound.
#pragma once

#include <cstdint>
#include <string>

namespace dlbench {

// The cores this process may run on (its CPU affinity mask; at least 1).
int usable_cores();
// User + system CPU seconds of every thread of this process so far.
double process_cpu_seconds();
// Physical memory in bytes (0 when unknown).
uint64_t physical_memory_bytes();

// `requested` threads for `flag`: 0 means `all_value`; more than usable_cores() is refused (threads beyond
// the cores only wait on one another: a run with thousands of them crawled or crashed).
int resolve_threads(int requested, int all_value, const std::string& flag);

// UserError naming `flag` unless `bytes` (what the flag makes the run hold in host memory, described by
// `what`) is at most half of physical memory.
void require_host_memory(uint64_t bytes, const std::string& flag, const std::string& what);

}  // namespace dlbench
