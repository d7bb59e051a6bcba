#include "core/status.h"

namespace dlbench {

void throw_check_failure(const char* file, int line, const char* what, const std::string& detail) {
  throw Error(
      fmt::format("{}:{}: check failed: {}{}{}", file, line, what, detail.empty() ? "" : ": ", detail));
}

}  // namespace dlbench
