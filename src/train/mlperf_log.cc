#include "train/mlperf_log.h"

#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/status.h"

namespace dlbench {

MlperfLog::MlperfLog(const std::string& path) {
  if (path.empty()) return;
  file_ = std::fopen(path.c_str(), "w");
  DLB_REQUIRE(file_ != nullptr, "--mlperf-log {}: cannot create it: {}", path, std::strerror(errno));
}

MlperfLog::~MlperfLog() {
  if (!file_) return;
  if (run_started_ && !run_stopped_) {
    try {
      end("run_stop", nullptr, {{"status", "aborted"}});
    } catch (...) {
    }
  }
  std::fclose(file_);
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
  std::fprintf(file_, ":::MLLOG %s\n", line.dump().c_str());
  std::fflush(file_);  // a run that dies keeps every line before it
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
