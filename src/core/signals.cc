#include "core/signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace dlbench {

namespace {

// What the handler may touch: lock-free atomics and fixed arrays (no allocation, no locks).
std::atomic<int> stop_signal_number{0};
std::atomic<bool> deferred{false};

constexpr int kSlots = 64;
constexpr size_t kPathBytes = 4096;
enum SlotState : int { kFree = 0, kFilling = 1, kReady = 2 };
std::atomic<int> slot_state[kSlots];
char slot_path[kSlots][kPathBytes];

void remove_registered_temporaries() {
  for (int i = 0; i < kSlots; ++i)
    if (slot_state[i].load() == kReady) ::unlink(slot_path[i]);
}

void write_stderr(const char* text) {
  const ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

void on_stop_signal(int signal_number) {
  int none = 0;
  const bool first = stop_signal_number.compare_exchange_strong(none, signal_number);
  if (first && deferred.load()) return;  // the command's loop stops at its next safe point
  remove_registered_temporaries();
  write_stderr(signal_number == SIGINT ? "dlbench: stopped by SIGINT; temporary files removed\n"
                                       : "dlbench: stopped by SIGTERM; temporary files removed\n");
  ::_exit(128 + signal_number);
}

}  // namespace

void install_stop_handler() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);
}

void defer_stop_to_safe_points() {
  deferred = true;
  install_stop_handler();
}

bool stop_requested() { return stop_signal_number.load() != 0; }
int stop_signal() { return stop_signal_number.load(); }

void request_stop(int signal_number) {
  int none = 0;
  stop_signal_number.compare_exchange_strong(none, signal_number);
}

int stopped_exit_code(int signal_number) { return 128 + signal_number; }

std::string signal_name(int signal_number) {
  if (signal_number == SIGINT) return "SIGINT";
  if (signal_number == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signal_number);
}

void throw_if_stop_requested(const std::string& where) {
  const int signal_number = stop_signal();
  if (signal_number != 0) throw Stopped(signal_number, where);
}

int register_temporary(const std::string& path) {
  if (path.size() >= kPathBytes) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (!slot_state[i].compare_exchange_strong(expected, kFilling)) continue;
    std::memcpy(slot_path[i], path.c_str(), path.size() + 1);
    slot_state[i] = kReady;
    return i;
  }
  return -1;
}

void unregister_temporary(int slot) {
  if (slot >= 0 && slot < kSlots) slot_state[slot] = kFree;
}

}  // namespace dlbench
