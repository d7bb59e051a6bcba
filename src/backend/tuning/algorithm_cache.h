// The algorithm cache: the kernel choices a backend's timed searches made, kept for the processes after,
// as TensorRT keeps a timing cache. One object per launch, made by the run (src/app) and handed to every
// backend it creates: the ranks of one process (--gpus N) share it, so they run the same kernels, and a
// second process given the same file skips the searches (ResNet-50's cost about 15-25 s of start-up).
//
// An entry is a JSON value under a key the backend builds from everything the choice depends on (shape,
// dtype, layout, math mode, workspace limit, the options that decide the candidates). The file holds the
// machine it was made on (GPU model, driver, cuDNN and dlbench versions): a file of another machine, of an
// older format or that is not JSON at all is named in one warning line, ignored and rebuilt, never an
// error. Writing takes an exclusive lock on PATH.lock, merges what the file holds by then (another process
// may have saved since), and replaces the file atomically (a temporary renamed), so several processes may
// share one file.
//
// The file's format: {"format": "dlbench-algorithm-cache-2", "machine": {...}, "choices": {KEY: VALUE}}.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace dlbench::tuning {

// What the choices of a cache were timed on.
struct MachineKey {
  std::string gpu;      // the GPU model's name
  std::string driver;   // the driver's version (as the CUDA runtime reports it)
  std::string library;  // the libraries that run the kernels, e.g. "cudnn 91900"
  std::string dlbench;  // dlbench's version

  bool operator==(const MachineKey&) const = default;
  nlohmann::json to_json() const;
  std::string describe() const;  // "NVIDIA H200, driver 13000, cudnn 91900, dlbench 0.1.0"
};

// A choice whose two fastest candidates were close: how far apart they were, for the run's result.
struct CloseCall {
  std::string what;  // the key and the direction, e.g. "cudnn-conv ... fwd"
  double chosen_ms = 0, fastest_ms = 0, second_ms = 0;
};

class AlgorithmCache {
 public:
  // Held in memory only (--algorithm-cache none, a backend made without one): every shape is searched.
  AlgorithmCache() = default;
  // Backed by the file at `path`; nothing is read before bind().
  explicit AlgorithmCache(std::string path);
  AlgorithmCache(const AlgorithmCache&) = delete;
  AlgorithmCache& operator=(const AlgorithmCache&) = delete;

  // "" when held in memory only.
  const std::string& path() const { return path_; }
  // The machine whose choices this cache holds, told by the first backend that uses it: the file's entries
  // are taken when they were made on this machine. A later backend on another machine (a second GPU
  // model) adds its entries under their own keys; the file keeps the first machine's name.
  void bind(const MachineKey& machine);
  // What the file held when bound ("" when nothing was read): a line for the run's header.
  const std::string& load_note() const { return load_note_; }

  std::optional<nlohmann::json> find(const std::string& key) const;
  // Records a choice made in this process and returns the one the cache holds: the first recorded wins
  // (with --gpus N, every rank runs the choice of the first that searched).
  nlohmann::json put(const std::string& key, nlohmann::json value);
  // Drops an entry the backend could not read (named in one warning line), to be searched again.
  void forget(const std::string& key, const std::string& why);
  size_t size() const;
  size_t read_from_file() const { return read_; }

  // Writes the file when this process added entries (see the top of this file); a file that cannot be
  // written is named in one warning line (the run goes on: the cache only saves time).
  void save();

  void record_close_call(CloseCall call);
  // [{"what": ..., "chosen_ms": ..., "fastest_ms": ..., "second_ms": ...}, ...] in the order recorded.
  nlohmann::json close_calls() const;

 private:
  std::string path_;
  mutable std::mutex mutex_;
  std::optional<MachineKey> machine_;
  std::map<std::string, nlohmann::json> choices_;
  std::vector<CloseCall> close_calls_;
  std::string load_note_;
  size_t read_ = 0;
  bool added_ = false;
};

// The file's entries when it is a cache of `machine`; nullopt, with `why` saying what it is instead, when
// it is missing, not a cache, or another machine's. Never throws.
std::optional<std::map<std::string, nlohmann::json>> read_cache_file(const std::string& path,
                                                                     const MachineKey& machine,
                                                                     std::string& why);

}  // namespace dlbench::tuning
