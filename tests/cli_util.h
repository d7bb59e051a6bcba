// Running the dlbench binary from tests: exit code, stdout and stderr of one invocation.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace dlbench::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out, err;
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs a shell command (already quoted) with stdin closed and a time limit.
inline CommandResult run_shell(const std::string& command, int timeout_seconds = 600) {
  static int counter = 0;
  auto dir = std::filesystem::temp_directory_path() /
             ("dlbench_cli_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::create_directories(dir);
  std::string out = (dir / "out").string(), err = (dir / "err").string();
  std::string cmd =
      "timeout " + std::to_string(timeout_seconds) + " " + command + " </dev/null >" + out + " 2>" + err;
  int status = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_text(out);
  r.err = read_text(err);
  std::filesystem::remove_all(dir);
  return r;
}

// Runs `dlbench ARGS` (args already shell-quoted).
inline CommandResult run_dlbench(const std::string& args, int timeout_seconds = 600) {
  return run_shell(std::string(DLBENCH_BINARY) + " " + args, timeout_seconds);
}

// The directories temp_dir made in this process, removed with everything in them when it exits (ctest
// runs each test in a process of its own), so that the suite leaves nothing in /tmp; with
// DLBENCH_KEEP_TEST_DIRS set they stay, to look at after a failure. A child forked by a test that exits
// through exit() runs this destructor too: only the process that made the directories removes them.
class TempDirsOfThisProcess {
 public:
  ~TempDirsOfThisProcess() {
    if (::getpid() != owner_ || std::getenv("DLBENCH_KEEP_TEST_DIRS")) return;
    std::error_code ec;
    for (const std::filesystem::path& dir : dirs_) std::filesystem::remove_all(dir, ec);
  }
  void add(const std::filesystem::path& dir) { dirs_.push_back(dir); }

 private:
  pid_t owner_ = ::getpid();
  std::vector<std::filesystem::path> dirs_;
};

// A fresh temporary directory for a test's files, removed when the test's process exits.
inline std::filesystem::path temp_dir(const std::string& name) {
  static TempDirsOfThisProcess made;
  auto dir =
      std::filesystem::temp_directory_path() / ("dlbench_test_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  made.add(dir);
  return dir;
}

inline int count_lines(const std::string& text) {
  int lines = 0;
  for (char c : text) lines += c == '\n';
  return lines;
}

}  // namespace dlbench::testing
