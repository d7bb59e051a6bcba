#include "backend/tuning/algorithm_cache.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/file_io.h"
#include "core/log.h"
#include "core/status.h"

namespace dlbench::tuning {

namespace {

constexpr const char* kFormat = "dlbench-algorithm-cache-2";

// An exclusive lock on PATH.lock for the scope: the writers of one file take turns (flock, released when
// the descriptor closes, also when the process dies).
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return;
    while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace

nlohmann::json MachineKey::to_json() const {
  return {{"gpu", gpu}, {"driver", driver}, {"library", library}, {"dlbench", dlbench}};
}

std::string MachineKey::describe() const {
  return fmt::format("{}, driver {}, {}, dlbench {}", gpu, driver, library, dlbench);
}

std::optional<std::map<std::string, nlohmann::json>> read_cache_file(const std::string& path,
                                                                     const MachineKey& machine,
                                                                     std::string& why) {
  std::ifstream in(path);
  if (!in) {
    why = "no file yet";
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string()) {
    why = "not a dlbench algorithm cache";
    return std::nullopt;
  }
  if (j["format"] != kFormat) {
    why = fmt::format("format {}, not {}", j["format"].get<std::string>(), kFormat);
    return std::nullopt;
  }
  if (!j.contains("choices") || !j["choices"].is_object() || !j.contains("machine") ||
      !j["machine"].is_object()) {
    why = "not a dlbench algorithm cache";
    return std::nullopt;
  }
  const nlohmann::json& m = j["machine"];
  const MachineKey theirs{m.value("gpu", ""), m.value("driver", ""), m.value("library", ""),
                          m.value("dlbench", "")};
  if (!(theirs == machine)) {
    why = fmt::format("made on {}", theirs.describe());
    return std::nullopt;
  }
  std::map<std::string, nlohmann::json> choices;
  for (const auto& [key, value] : j["choices"].items()) choices[key] = value;
  return choices;
}

AlgorithmCache::AlgorithmCache(std::string path) : path_(std::move(path)) {}

void AlgorithmCache::bind(const MachineKey& machine) {
  std::lock_guard lock(mutex_);
  if (machine_) return;
  machine_ = machine;
  if (path_.empty()) return;
  std::string why;
  std::optional<std::map<std::string, nlohmann::json>> entries = read_cache_file(path_, machine, why);
  if (!entries) {
    if (why != "no file yet") {
      log_warning("algorithm cache {}: {}; ignored, and rebuilt for {}", path_, why, machine.describe());
      load_note_ = fmt::format("{} ignored ({}): searching afresh", path_, why);
    }
    return;
  }
  read_ = entries->size();
  for (auto& [key, value] : *entries) choices_.emplace(key, std::move(value));
  load_note_ = fmt::format("{} choices read from {}", read_, path_);
}

std::optional<nlohmann::json> AlgorithmCache::find(const std::string& key) const {
  std::lock_guard lock(mutex_);
  auto it = choices_.find(key);
  if (it == choices_.end()) return std::nullopt;
  return it->second;
}

nlohmann::json AlgorithmCache::put(const std::string& key, nlohmann::json value) {
  std::lock_guard lock(mutex_);
  auto [it, inserted] = choices_.emplace(key, std::move(value));
  if (inserted) added_ = true;
  return it->second;
}

void AlgorithmCache::forget(const std::string& key, const std::string& why) {
  std::lock_guard lock(mutex_);
  if (choices_.erase(key) > 0)
    log_warning("algorithm cache {}: entry '{}' {}; searched again", path_.empty() ? "(memory)" : path_, key,
                why);
}

size_t AlgorithmCache::size() const {
  std::lock_guard lock(mutex_);
  return choices_.size();
}

void AlgorithmCache::save() {
  std::lock_guard lock(mutex_);
  if (path_.empty() || !added_ || !machine_) return;
  const FileLock file_lock(path_);
  if (!file_lock.held()) {
    log_warning("algorithm cache {}: cannot lock {}.lock ({}); not saved", path_, path_,
                std::strerror(errno));
    return;
  }
  // Another process may have saved since we read: its entries stay, ours are added where it has none.
  std::string why;
  std::map<std::string, nlohmann::json> merged =
      read_cache_file(path_, *machine_, why).value_or(std::map<std::string, nlohmann::json>{});
  for (const auto& [key, value] : choices_) merged.emplace(key, value);
  nlohmann::json j = {{"format", kFormat}, {"machine", machine_->to_json()}, {"choices", merged}};
  try {
    write_file_atomically(path_, j.dump(1) + "\n");
  } catch (const std::exception& e) {
    log_warning("algorithm cache {}: not saved: {}", path_, e.what());
    return;
  }
  for (auto& [key, value] : merged) choices_.emplace(key, std::move(value));
  added_ = false;
}

void AlgorithmCache::record_close_call(CloseCall call) {
  std::lock_guard lock(mutex_);
  for (const CloseCall& c : close_calls_)
    if (c.what == call.what) return;  // the ranks of a process plan the same shapes
  close_calls_.push_back(std::move(call));
}

nlohmann::json AlgorithmCache::close_calls() const {
  std::lock_guard lock(mutex_);
  nlohmann::json rows = nlohmann::json::array();
  for (const CloseCall& c : close_calls_)
    rows.push_back({{"what", c.what},
                    {"chosen_ms", c.chosen_ms},
                    {"fastest_ms", c.fastest_ms},
                    {"second_ms", c.second_ms}});
  return rows;
}

}  // namespace dlbench::tuning
