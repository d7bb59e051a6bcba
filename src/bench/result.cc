#include "bench/result.h"

#include <cmath>

namespace dlbench {

namespace {

using nlohmann::json;

// A number that may be NaN, as JSON writes it: null (JSON has no NaN).
json number_or_null(double value) { return std::isnan(value) ? json(nullptr) : json(value); }

template <class T>
json optional_or_null(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

json numbers_or_nulls(const std::vector<double>& values) {
  json j = json::array();
  for (double v : values) j.push_back(number_or_null(v));
  return j;
}

// Reads the fields of one JSON object, each checked for its type; `where` is the object's path in the
// result ("step_ms."), for the error's field name. Absent and null fields leave the target as it was.
class FieldReader {
 public:
  FieldReader(const json& j, std::string where) : j_(j), where_(std::move(where)) {
    if (!j_.is_object()) fail("", "is " + shown(j_) + ": not an object");
  }

  bool contains(const char* key) const { return j_.contains(key); }
  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  const json& at(const char* key) const { return j_[key]; }
  FieldReader object(const char* key) const { return FieldReader(j_[key], where_ + key + "."); }

  void read(const char* key, std::string& out) const {
    if (!has(key)) return;
    if (!j_[key].is_string()) fail(key, "is " + shown(j_[key]) + ": not a string");
    out = j_[key].get<std::string>();
  }
  void read(const char* key, bool& out) const {
    if (!has(key)) return;
    if (!j_[key].is_boolean()) fail(key, "is " + shown(j_[key]) + ": not true or false");
    out = j_[key].get<bool>();
  }
  void read(const char* key, int64_t& out) const {
    if (!has(key)) return;
    const json& v = j_[key];
    if (!v.is_number_integer()) fail(key, "is " + shown(v) + ": not a whole number");
    out = v.get<int64_t>();
  }
  void read(const char* key, double& out) const {
    if (!has(key)) return;
    if (!j_[key].is_number()) fail(key, "is " + shown(j_[key]) + ": not a number");
    out = j_[key].get<double>();
  }
  // A number written as null where it was NaN (a loss that was not finite).
  void read_nan_as_null(const char* key, double& out) const {
    if (j_.contains(key) && j_[key].is_null()) {
      out = NAN;
      return;
    }
    read(key, out);
  }
  void read(const char* key, std::vector<double>& out) const {
    if (!has(key)) return;
    if (!j_[key].is_array()) fail(key, "is " + shown(j_[key]) + ": not a list of numbers");
    out.clear();
    for (const json& v : j_[key]) {
      if (!v.is_number() && !v.is_null()) fail(key, "holds " + shown(v) + ": not a number");
      out.push_back(v.is_null() ? NAN : v.get<double>());
    }
  }
  template <class T>
  void read(const char* key, std::optional<T>& out) const {
    if (!has(key)) return;
    T value{};
    read(key, value);
    out = value;
  }

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    std::string field = where_ + key;
    if (!field.empty() && field.back() == '.') field.pop_back();
    throw ResultFieldError(field, why);
  }

 private:
  static std::string shown(const json& v) {
    std::string text = v.dump();
    return text.size() > 40 ? text.substr(0, 37) + "..." : text;
  }

  const json& j_;
  std::string where_;
};

json to_json(const EnergyResult* e) {
  return {{"energy_joules", e ? json(e->joules) : json(nullptr)},
          {"energy_joules_per_image", e ? json(e->joules_per_image) : json(nullptr)},
          {"average_power_watts", e ? json(e->average_power_watts) : json(nullptr)}};
}

json to_json(const GpuClocksResult& c) {
  return {{"sm_clock_median_mhz", c.sm_clock_median_mhz},
          {"sm_clock_median_mhz_rank0", c.sm_clock_median_mhz_rank0},
          {"sm_clock_min_mhz_rank0", c.sm_clock_min_mhz_rank0},
          {"sm_clock_max_mhz_rank0", c.sm_clock_max_mhz_rank0},
          {"power_mean_watts_rank0", c.power_mean_watts_rank0},
          {"power_capped_fraction", c.power_capped_fraction},
          {"thermal_slowdown_fraction", c.thermal_slowdown_fraction},
          {"hardware_slowdown_fraction", c.hardware_slowdown_fraction},
          {"samples_rank0", c.samples_rank0},
          {"period_ms", c.period_ms}};
}

GpuClocksResult clocks_from(const FieldReader& r) {
  GpuClocksResult c;
  r.read("sm_clock_median_mhz", c.sm_clock_median_mhz);
  r.read("sm_clock_median_mhz_rank0", c.sm_clock_median_mhz_rank0);
  r.read("sm_clock_min_mhz_rank0", c.sm_clock_min_mhz_rank0);
  r.read("sm_clock_max_mhz_rank0", c.sm_clock_max_mhz_rank0);
  r.read("power_mean_watts_rank0", c.power_mean_watts_rank0);
  r.read("power_capped_fraction", c.power_capped_fraction);
  r.read("thermal_slowdown_fraction", c.thermal_slowdown_fraction);
  r.read("hardware_slowdown_fraction", c.hardware_slowdown_fraction);
  r.read("samples_rank0", c.samples_rank0);
  r.read("period_ms", c.period_ms);
  return c;
}

Distribution distribution_from(const FieldReader& r) {
  Distribution d;
  r.read("count", d.count);
  r.read("median", d.median);
  r.read("mean", d.mean);
  r.read("p5", d.p5);
  r.read("p95", d.p95);
  r.read("min", d.min);
  r.read("max", d.max);
  r.read("stddev", d.stddev);
  r.read("ci95", d.ci95);
  r.read("jitter", d.jitter);
  return d;
}

std::vector<LayerTime> layer_times_from(const FieldReader& r, const char* key) {
  if (!r.at(key).is_array()) r.fail(key, "is not a list of layers");
  std::vector<LayerTime> times;
  for (size_t i = 0; i < r.at(key).size(); ++i) {
    const FieldReader layer(r.at(key)[i], fmt::format("{}[{}].", key, i));
    LayerTime t;
    layer.read("layer", t.name);
    layer.read("kind", t.kind);
    layer.read("forward_ms", t.forward_ms);
    layer.read("backward_ms", t.backward_ms);
    layer.read("forward_macs", t.forward_macs);
    layer.read("plan", t.plan);
    times.push_back(std::move(t));
  }
  return times;
}

void write_bench(const BenchFigures& b, json& j) {
  j["warmup_steps"] = b.warmup_steps;
  j["step_times_ms"] = b.step_times_ms;
  j["window_seconds"] = b.window_seconds;
  j.update(to_json(b.energy ? &*b.energy : nullptr));
  j["gpu_clocks"] = b.clocks ? to_json(*b.clocks) : json(nullptr);
  j["seconds_to_first_timed_step"] = b.seconds_to_first_timed_step;
  j["flops_per_image"] = b.flops_per_image;
  if (b.per_layer) j["per_layer"] = to_json(*b.per_layer);
}

BenchFigures bench_from(const FieldReader& r) {
  BenchFigures b;
  r.read("warmup_steps", b.warmup_steps);
  r.read("step_times_ms", b.step_times_ms);
  r.read("window_seconds", b.window_seconds);
  if (r.has("energy_joules")) {
    EnergyResult e;
    r.read("energy_joules", e.joules);
    r.read("energy_joules_per_image", e.joules_per_image);
    r.read("average_power_watts", e.average_power_watts);
    b.energy = e;
  }
  if (r.has("gpu_clocks")) b.clocks = clocks_from(r.object("gpu_clocks"));
  r.read("seconds_to_first_timed_step", b.seconds_to_first_timed_step);
  r.read("flops_per_image", b.flops_per_image);
  if (r.has("per_layer")) b.per_layer = layer_times_from(r, "per_layer");
  return b;
}

void write_train(const TrainFigures& t, json& j) {
  j["first_step"] = t.first_step;
  j["epochs"] = t.epochs;
  j["losses"] = numbers_or_nulls(t.losses);
  if (const auto& d = t.data_pipeline) {
    j["data_wait_ms_per_step"] = d->data_wait_ms_per_step;
    j["compute_images_per_second"] = d->compute_images_per_second;
    j["data_threads"] = d->data_threads;
    j["bad_images_skipped"] = d->bad_images_skipped;
    j["images_decoded_on_gpu_engines"] = d->images_decoded_on_gpu_engines;
    j["images_decoded_on_gpu_cuda"] = d->images_decoded_on_gpu_cuda;
  }
  if (t.cpu_seconds_per_1000_images) j["cpu_seconds_per_1000_images"] = *t.cpu_seconds_per_1000_images;
  j["train_seconds"] = t.train_seconds;
  if (const auto& test = t.test) {
    j["test_accuracy"] = number_or_null(test->test_accuracy);
    j["test_images"] = test->test_images;
    j["evaluations"] = json::array();
    for (const EvaluationResult& e : test->evaluations)
      j["evaluations"].push_back({{"epoch", e.epoch},
                                  {"step", e.step},
                                  {"test_accuracy", number_or_null(e.test_accuracy)},
                                  {"test_images", e.test_images}});
  }
}

TrainFigures train_from(const FieldReader& r) {
  TrainFigures t;
  r.read("first_step", t.first_step);
  r.read("epochs", t.epochs);
  r.read("losses", t.losses);
  if (r.has("data_wait_ms_per_step")) {
    DataPipelineResult d;
    r.read("data_wait_ms_per_step", d.data_wait_ms_per_step);
    r.read("compute_images_per_second", d.compute_images_per_second);
    r.read("data_threads", d.data_threads);
    r.read("bad_images_skipped", d.bad_images_skipped);
    r.read("images_decoded_on_gpu_engines", d.images_decoded_on_gpu_engines);
    r.read("images_decoded_on_gpu_cuda", d.images_decoded_on_gpu_cuda);
    t.data_pipeline = d;
  }
  r.read("cpu_seconds_per_1000_images", t.cpu_seconds_per_1000_images);
  r.read("train_seconds", t.train_seconds);
  if (r.contains("test_accuracy") || r.contains("evaluations")) {
    TestFigures test;
    r.read_nan_as_null("test_accuracy", test.test_accuracy);
    r.read("test_images", test.test_images);
    if (r.has("evaluations")) {
      if (!r.at("evaluations").is_array()) r.fail("evaluations", "is not a list of evaluations");
      for (size_t i = 0; i < r.at("evaluations").size(); ++i) {
        const FieldReader e(r.at("evaluations")[i], fmt::format("evaluations[{}].", i));
        EvaluationResult evaluation;
        e.read("epoch", evaluation.epoch);
        e.read("step", evaluation.step);
        e.read_nan_as_null("test_accuracy", evaluation.test_accuracy);
        e.read("test_images", evaluation.test_images);
        test.evaluations.push_back(evaluation);
      }
    }
    t.test = std::move(test);
  }
  return t;
}

}  // namespace

json to_json(const RunResult& r) {
  json j = r.unknown.is_object() ? r.unknown : json::object();
  j["model"] = r.model;
  j["parameters"] = r.parameters;
  j["device"] = r.device;
  j["device_index"] = r.device_index;
  j["backend"] = r.backend;
  j["precision"] = r.precision;
  j["batch_size"] = r.batch_size;
  j["global_batch_size"] = r.global_batch_size;
  j["ranks"] = r.ranks;
  j["launcher"] = r.launcher;
  j["threads"] = r.threads;
  j["decode"] = r.decode;
  if (r.images_decoded_on_cpu) j["images_decoded_on_cpu"] = *r.images_decoded_on_cpu;
  j["communication_ms"] = optional_or_null(r.communication_ms);
  j["peak_memory_bytes"] = r.peak_memory_bytes;
  j["algorithm_digest"] = r.algorithm_digest;
  if (!r.algorithm_search.is_null()) j["algorithm_search"] = r.algorithm_search;
  j["largest_batch"] = optional_or_null(r.largest_batch);
  j["loss_scale"] = r.loss_scale;
  j["skipped_steps"] = r.skipped_steps;
  j["date"] = r.date;
  j["config"] = r.config;
  j["system"] = r.system;
  j["steps"] = r.steps;
  j["final_loss"] = number_or_null(r.final_loss);
  j["cuda_graph"] = r.cuda_graph;
  j["images_per_second"] = optional_or_null(r.images_per_second);
  j["images_per_second_per_device"] = optional_or_null(r.images_per_second_per_device);
  if (r.tokens_per_second) {
    j["tokens_per_second"] = *r.tokens_per_second;
    j["sequences_per_second"] = optional_or_null(r.images_per_second);
  }
  if (r.tokens_per_second_per_device) j["tokens_per_second_per_device"] = *r.tokens_per_second_per_device;
  if (r.val_loss) j["val_loss"] = number_or_null(*r.val_loss);
  if (r.model_flops_per_token) j["model_flops_per_token"] = *r.model_flops_per_token;
  if (r.mfu) j["mfu"] = *r.mfu;
  if (r.mfu_peak_tflops) j["mfu_peak_tflops"] = *r.mfu_peak_tflops;
  if (r.gemm_ceiling_tflops) j["gemm_ceiling_tflops"] = *r.gemm_ceiling_tflops;
  if (r.mfu_of_gemm_ceiling) j["mfu_of_gemm_ceiling"] = *r.mfu_of_gemm_ceiling;
  j["step_ms"] = r.step_ms ? to_json(*r.step_ms) : json(nullptr);
  if (r.measurement_note) j["measurement_note"] = *r.measurement_note;
  if (r.bench) write_bench(*r.bench, j);
  if (r.train) write_train(*r.train, j);
  for (const std::string& key : r.absent) j.erase(key);
  return j;
}

RunResult run_result_from_json(const json& j) {
  const FieldReader r(j, "");
  RunResult result;
  r.read("model", result.model);
  r.read("parameters", result.parameters);
  r.read("device", result.device);
  r.read("device_index", result.device_index);
  r.read("backend", result.backend);
  r.read("precision", result.precision);
  r.read("batch_size", result.batch_size);
  r.read("global_batch_size", result.global_batch_size);
  r.read("ranks", result.ranks);
  r.read("launcher", result.launcher);
  r.read("threads", result.threads);
  r.read("decode", result.decode);
  r.read("images_decoded_on_cpu", result.images_decoded_on_cpu);
  r.read("communication_ms", result.communication_ms);
  r.read("peak_memory_bytes", result.peak_memory_bytes);
  r.read("algorithm_digest", result.algorithm_digest);
  if (j.contains("algorithm_search")) result.algorithm_search = j["algorithm_search"];
  r.read("largest_batch", result.largest_batch);
  r.read("loss_scale", result.loss_scale);
  r.read("skipped_steps", result.skipped_steps);
  r.read("date", result.date);
  if (r.has("config")) {
    if (!j["config"].is_object()) r.fail("config", "is not an object");
    result.config = j["config"];
  }
  if (j.contains("system")) result.system = j["system"];
  r.read("steps", result.steps);
  r.read_nan_as_null("final_loss", result.final_loss);
  r.read("cuda_graph", result.cuda_graph);
  r.read("images_per_second", result.images_per_second);
  r.read("images_per_second_per_device", result.images_per_second_per_device);
  r.read("tokens_per_second", result.tokens_per_second);
  r.read("tokens_per_second_per_device", result.tokens_per_second_per_device);
  r.read("val_loss", result.val_loss);
  r.read("model_flops_per_token", result.model_flops_per_token);
  r.read("mfu", result.mfu);
  r.read("mfu_peak_tflops", result.mfu_peak_tflops);
  r.read("gemm_ceiling_tflops", result.gemm_ceiling_tflops);
  r.read("mfu_of_gemm_ceiling", result.mfu_of_gemm_ceiling);
  if (r.has("step_ms")) result.step_ms = distribution_from(r.object("step_ms"));
  r.read("measurement_note", result.measurement_note);
  // bench writes its warm-up; train its first step and losses.
  if (j.contains("warmup_steps")) result.bench = bench_from(r);
  if (j.contains("first_step") || j.contains("losses")) result.train = train_from(r);
  // What this version does not write stays as it was read, and what it writes but the file lacks (a
  // result of an older version) stays absent.
  const json written = to_json(result);
  for (const auto& [key, value] : j.items())
    if (!written.contains(key)) result.unknown[key] = value;
  for (const auto& [key, value] : written.items())
    if (!j.contains(key)) result.absent.insert(key);
  return result;
}

bool is_run_result(const json& j) {
  return j.is_object() && j.contains("config") && j["config"].is_object() && !j.contains("framework");
}

}  // namespace dlbench
