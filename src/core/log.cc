#include "core/log.h"

#include <atomic>
#include <cstdio>

namespace dlbench {

namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::info)};
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
