#include "train/mlperf_log.h"

#include <chrono>
#include <cstdio>

#include "core/status.h"

namespace dlbench {

MlperfLog::MlperfLog(const std::string& path) {
  if (path.empty()) return;
  try {
    file_ = std::make_unique<AtomicFile>(path);
  } catch (const UserError& e) {
    throw_user_error("--mlperf-log {}: {}", path, e.what());
  }
}

MlperfLog::~MlperfLog() {
  if (!file_) return;
  try {
    if (run_started_ && !run_stopped_) end("run_stop", nullptr, {{"status", "aborted"}});
    file_->commit();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dlbench: %s\n", e.what());  // a destructor cannot throw; the temporary is removed
  }
}

void MlperfLog::write(const char* event_type, const std::string& key, const nlohmann::json& value,
                      const nlohmann::json& metadata) {
  if (!file_) return;
  if (key == "run_start") run_started_ = true;
  if (key == "run_stop") run_stopped_ = true;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  nlohmann::json line = {{"namespace", ""},
                         {"time_ms", std::chrono::duration_cast<std::chrono::milliseconds>(now).count()},
                         {"event_type", event_type},
                         {"key", key},
                         {"value", value},
                         {"metadata", metadata}};
  try {
    file_->write(":::MLLOG " + line.dump() + "\n");
  } catch (const UserError&) {
    file_.reset();  // the write removed the temporary: nothing is left to end or to put in place
    throw;
  }
}

void MlperfLog::point(const std::string& key, const nlohmann::json& value, const nlohmann::json& metadata) {
  write("POINT_IN_TIME", key, value, metadata);
}
void MlperfLog::start(const std::string& key, const nlohmann::json& value, const nlohmann::json& metadata) {
  write("INTERVAL_START", key, value, metadata);
}
void MlperfLog::end(const std::string& key, const nlohmann::json& value, const nlohmann::json& metadata) {
  write("INTERVAL_END", key, value, metadata);
}
void MlperfLog::run_succeeded() { end("run_stop", nullptr, {{"status", "success"}}); }

}  // namespace dlbench
