// `--mlperf-log FILE`: a training run's events as MLPerf Training's logging library writes them, one
// ":::MLLOG {json}" line each (namespace, time_ms since the Unix epoch, event_type POINT_IN_TIME /
// INTERVAL_START / INTERVAL_END, key, value, metadata), so that the tools that read MLPerf logs (the
// compliance checker's parsers, result summarisers) read dlbench's runs too.
//
// The run writes: init_start, the hyperparameters (global_batch_size, opt_name, opt_base_learning_rate,
// opt_learning_rate_warmup_epochs, opt_weight_decay, ...), init_stop, run_start, epoch_start/epoch_stop
// per epoch, eval_start/eval_accuracy/eval_stop per evaluation, run_stop with status "success" — or
// "aborted" when the run ends any other way (an error, an interruption): the destructor writes it. The lines
// go to an AtomicFile (core/file_io.h), put in place when the log ends: FILE is a whole log or the one that
// was there before, never half of one.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/file_io.h"

namespace dlbench {

class MlperfLog {
 public:
  // An empty path: a log that writes nothing. UserError when the file cannot be created.
  explicit MlperfLog(const std::string& path);
  ~MlperfLog();
  MlperfLog(const MlperfLog&) = delete;
  MlperfLog& operator=(const MlperfLog&) = delete;

  bool enabled() const { return file_ != nullptr; }
  void point(const std::string& key, const nlohmann::json& value = nullptr,
             const nlohmann::json& metadata = nlohmann::json::object());
  void start(const std::string& key, const nlohmann::json& value = nullptr,
             const nlohmann::json& metadata = nlohmann::json::object());
  void end(const std::string& key, const nlohmann::json& value = nullptr,
           const nlohmann::json& metadata = nlohmann::json::object());
  // run_stop with status "success"; without it the destructor writes "aborted".
  void run_succeeded();

 private:
  void write(const char* event_type, const std::string& key, const nlohmann::json& value,
             const nlohmann::json& metadata);
  std::unique_ptr<AtomicFile> file_;
  bool run_started_ = false, run_stopped_ = false;
};

}  // namespace dlbench
