// Errors: one family of check macros, each reporting file, line and the library's own message.
//
// Library code throws dlbench::Error (or returns Status where a caller is expected to branch on it);
// only main() turns an error into a message and an exit code. UserError is the kind caused by bad input
// (a flag, a file): main prints its message alone, on one line, with no file/line noise.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace dlbench {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Bad input from the user: the message says what was wrong and what to do.
class UserError : public Error {
 public:
  explicit UserError(const std::string& what) : Error(what) {}
};

class Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) { return Status(std::move(message)); }
  bool is_ok() const { return message_.empty(); }
  explicit operator bool() const { return is_ok(); }
  const std::string& message() const { return message_; }
  // Throws UserError when not ok.
  void throw_if_error() const {
    if (!is_ok()) throw UserError(message_);
  }

 private:
  explicit Status(std::string message) : message_(std::move(message)) {}
  std::string message_;
};

[[noreturn]] void throw_check_failure(const char* file, int line, const char* what,
                                      const std::string& detail);

template <typename... Args>
[[noreturn]] void throw_user_error(fmt::format_string<Args...> format, Args&&... args) {
  throw UserError(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace dlbench

// DLB_CHECK(condition, "format {}", args...): an internal invariant; failure throws dlbench::Error.
#define DLB_CHECK(cond, ...)                                                                          \
  do {                                                                                                \
    if (!(cond)) ::dlbench::throw_check_failure(__FILE__, __LINE__, #cond, fmt::format(__VA_ARGS__)); \
  } while (0)

// DLB_REQUIRE(condition, "format {}", args...): a condition on user input; failure throws UserError.
#define DLB_REQUIRE(cond, ...)                             \
  do {                                                     \
    if (!(cond)) ::dlbench::throw_user_error(__VA_ARGS__); \
  } while (0)
