// SIGINT and SIGTERM: stop cleanly, leaving nothing half-written behind.
//
// main() installs the handler at start. Until a command says it can stop at safe points, a signal ends
// the process at once: the handler removes every open AtomicFile temporary (unlink is async-signal-safe)
// and exits with 128 + the signal (130 for SIGINT, 143 for SIGTERM). A command with safe points (train
// between steps, pack between files, sweep between points) calls defer_stop_to_safe_points(): the first
// signal then only sets a flag that its loop polls (stop_requested()), and the loop stops where it is
// consistent — a train run saves its checkpoint first — says where it stopped, and throws Stopped, which
// main turns into exit 128 + signal. A second signal ends the process at once, as above.
#pragma once

#include <string>

#include "core/status.h"

namespace dlbench {

void install_stop_handler();
void defer_stop_to_safe_points();

bool stop_requested();
// The signal that asked to stop (SIGINT, SIGTERM), or 0.
int stop_signal();
// As a signal would (tests; a command stopping its children).
void request_stop(int signal_number);
// The exit code for a run stopped by `signal_number`: 128 + it.
int stopped_exit_code(int signal_number);
// "SIGINT", "SIGTERM".
std::string signal_name(int signal_number);

// Thrown at a safe point after a stop was asked; its message says where the command stopped and what is on
// disk. main prints it and exits with stopped_exit_code(signal()).
class Stopped : public Error {
 public:
  Stopped(int signal_number, const std::string& what) : Error(what), signal_(signal_number) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

// Throws Stopped(stop_signal(), `where`) if a stop was asked.
void throw_if_stop_requested(const std::string& where);

// The handler's list of temporaries to remove (AtomicFile's; the pack's shards): a slot, or -1 when the
// list is full (the file is then only removed by the next run, as after SIGKILL).
int register_temporary(const std::string& path);
void unregister_temporary(int slot);

}  // namespace dlbench
