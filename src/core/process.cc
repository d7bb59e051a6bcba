#include "core/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "core/signals.h"
#include "core/status.h"

namespace dlbench {

std::optional<std::string> find_program(const std::string& program) {
  auto runnable = [](const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos)
    return runnable(program) ? std::optional<std::string>(program) : std::nullopt;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  for (size_t begin = 0; begin <= dirs.size();) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = end > begin ? dirs.substr(begin, end - begin) : ".";  // an empty entry is "."
    if (!dirs.empty() && runnable(dir + "/" + program)) return dir + "/" + program;
    begin = end + 1;
  }
  return std::nullopt;
}

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options) {
  DLB_CHECK(!argv.empty(), "run_process: no program given");
  const bool to_log = !options.log_path.empty();
  // Output: both streams to the log file, or a pipe each.
  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  int log = -1;
  if (to_log) {
    log = ::open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    DLB_REQUIRE(log >= 0, "cannot write {}: {}", options.log_path, std::strerror(errno));
  } else {
    DLB_REQUIRE(::pipe2(out_pipe, O_CLOEXEC) == 0 && ::pipe2(err_pipe, O_CLOEXEC) == 0,
                "cannot create a pipe: {}", std::strerror(errno));
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // Built before the fork: the child may only make async-signal-safe calls until it execs.
  const std::string cannot_start = "dlbench: error: cannot run " + argv[0] +
                                   (options.cwd.empty() ? "" : " in " + options.cwd) +
                                   ": not found or not executable\n";
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(to_log ? log : out_pipe[1], STDOUT_FILENO);
    ::dup2(to_log ? log : err_pipe[1], STDERR_FILENO);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    if (options.cwd.empty() || ::chdir(options.cwd.c_str()) == 0) ::execvp(args[0], args.data());
    [[maybe_unused]] ssize_t ignored = ::write(STDERR_FILENO, cannot_start.data(), cannot_start.size());
    ::_exit(127);
  }
  if (to_log) ::close(log);
  for (int fd : {out_pipe[1], err_pipe[1]})
    if (fd >= 0) ::close(fd);
  if (pid < 0) {
    for (int fd : {out_pipe[0], err_pipe[0]})
      if (fd >= 0) ::close(fd);
    throw_user_error("cannot start {}: {}", argv[0], std::strerror(errno));
  }
  ::setpgid(pid, pid);  // also here, so that a kill right after the fork reaches the group

  using Clock = std::chrono::steady_clock;
  const auto deadline = start + std::chrono::duration<double>(options.timeout_seconds);
  std::optional<Clock::time_point> exited_at;
  ProcessResult result;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  char buffer[65536];
  for (;;) {
    const int open_pipes = (fds[0].fd >= 0) + (fds[1].fd >= 0);
    if (!exited_at) {
      // Exited, but left unreaped (WNOWAIT) so that its process group id cannot be reused yet.
      siginfo_t info{};
      if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          info.si_pid == pid)
        exited_at = Clock::now();
    }
    // A helper the program left behind may hold the pipes open: stop reading shortly after it exits.
    if (exited_at && (open_pipes == 0 || Clock::now() - *exited_at > std::chrono::milliseconds(500))) break;
    if (!exited_at && !result.timed_out && !result.stopped && Clock::now() > deadline) {
      result.timed_out = true;
      ::kill(-pid, SIGKILL);
    }
    if (!exited_at && !result.timed_out && !result.stopped && stop_requested()) {
      result.stopped = true;
      ::kill(-pid, SIGKILL);
    }
    // poll() with no open descriptor just waits: the log-file case checks the child every 50 ms.
    if (::poll(fds, 2, 50) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
      }
    }
  }
  for (pollfd& p : fds)
    if (p.fd >= 0) {
      ::kill(-pid, SIGKILL);  // the helpers still holding the pipes were started by this run
      ::close(p.fd);
    }
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.exit_code = WIFEXITED(status) && !result.timed_out && !result.stopped ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace dlbench
