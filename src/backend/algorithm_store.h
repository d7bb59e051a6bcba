// Algorithm choices kept between processes (`--algorithm-cache FILE`), as TensorRT keeps a timing cache.
//
// A backend that times candidates to choose a kernel (the CUDA backend's cuDNN search) looks a shape up
// here before searching and records what it chose after. Two uses: a process skips the searches an earlier
// one made (three timed rounds per convolution direction cost ResNet-50 about 13 s of start-up), and every
// point of a sweep given the same file runs the same kernels, so a speedup between GPU counts or launchers
// is not partly a difference of algorithms.
//
// The file is JSON: {"format": "dlbench-algorithm-cache-1", "choices": {KEY: [integers...]}}. A key names
// everything the choice depends on (the backend builds it: device model, library version, shape, dtype,
// layout, math mode, workspace limit), so one file can serve several machines and library versions.
// Entries are only added; save() writes the file atomically, merged with what it holds by then.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace dlbench {

class AlgorithmStore {
 public:
  // Reads `path` if it exists; UserError naming it when it is not such a file. A missing file is empty.
  explicit AlgorithmStore(std::string path);

  const std::string& path() const { return path_; }
  std::optional<std::vector<int64_t>> find(const std::string& key) const;
  // A choice made in this process; a key already present keeps its first choice.
  void put(const std::string& key, const std::vector<int64_t>& choice);
  size_t size() const;
  // Writes the file (atomically) when this process added entries: the file's current entries, then ours.
  void save();

 private:
  std::string path_;
  mutable std::mutex mutex_;
  std::map<std::string, std::vector<int64_t>> choices_;
  bool added_ = false;
};

// The process's store: set once from --algorithm-cache (the same path again is a no-op; another path is an
// error), consulted by the backends' searches. Null when none was given.
std::shared_ptr<AlgorithmStore> use_algorithm_store(const std::string& path);
std::shared_ptr<AlgorithmStore> algorithm_store();

}  // namespace dlbench
