// Logging: leveled, to stderr, with an optional rank prefix once several ranks run.
// Progress and results a user asked for go to stdout through plain printing, not through the log.
#pragma once

#include <fmt/format.h>

#include <string>

namespace dlbench {

enum class LogLevel : int { debug = 0, info = 1, warning = 2, error = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_message(LogLevel level, const std::string& message);

template <typename... Args>
void log_debug(fmt::format_string<Args...> f, Args&&... args) {
  if (log_level() <= LogLevel::debug)
    log_message(LogLevel::debug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  if (log_level() <= LogLevel::info) log_message(LogLevel::info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_warning(fmt::format_string<Args...> f, Args&&... args) {
  if (log_level() <= LogLevel::warning)
    log_message(LogLevel::warning, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace dlbench
