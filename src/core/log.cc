#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace dlbench {

namespace {
// DLBENCH_LOG_LEVEL (debug, info, warning or error) sets the starting level; info without it. An unknown
// value is reported once and ignored: logging must not stop a run.
int level_from_environment() {
  const char* value = std::getenv("DLBENCH_LOG_LEVEL");
  if (!value || !*value) return static_cast<int>(LogLevel::info);
  const std::string v = value;
  if (v == "debug") return static_cast<int>(LogLevel::debug);
  if (v == "info") return static_cast<int>(LogLevel::info);
  if (v == "warning") return static_cast<int>(LogLevel::warning);
  if (v == "error") return static_cast<int>(LogLevel::error);
  std::fprintf(
      stderr, "[dlbench warning] DLBENCH_LOG_LEVEL='%s' is not debug, info, warning or error: info\n", value);
  return static_cast<int>(LogLevel::info);
}
std::atomic<int> g_level{level_from_environment()};
const char* level_tag(LogLevel level) {
  switch (level) {
    case LogLevel::debug:
      return "debug";
    case LogLevel::info:
      return "info";
    case LogLevel::warning:
      return "warning";
    case LogLevel::error:
      return "error";
  }
  return "";
}
}  // namespace

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

void log_message(LogLevel level, const std::string& message) {
  std::fprintf(stderr, "[dlbench %s] %s\n", level_tag(level), message.c_str());
}

}  // namespace dlbench
