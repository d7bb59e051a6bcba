#include "backend/algorithm_store.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/file_io.h"
#include "core/status.h"

namespace dlbench {

namespace {

constexpr const char* kFormat = "dlbench-algorithm-cache-1";

// The entries of the file at `path`: empty when it does not exist; UserError when it is not a cache.
std::map<std::string, std::vector<int64_t>> read_choices(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  DLB_REQUIRE(
      j.is_object() && j.value("format", "") == kFormat && j.contains("choices") && j["choices"].is_object(),
      "--algorithm-cache {}: not a dlbench algorithm cache (delete it, or name another file)", path);
  std::map<std::string, std::vector<int64_t>> choices;
  for (const auto& [key, value] : j["choices"].items()) {
    bool integers = value.is_array();
    for (const auto& v : value) integers = integers && v.is_number_integer();
    DLB_REQUIRE(integers, "--algorithm-cache {}: entry '{}' is not a list of integers", path, key);
    choices[key] = value.get<std::vector<int64_t>>();
  }
  return choices;
}

std::mutex& process_store_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::shared_ptr<AlgorithmStore>& process_store() {
  static std::shared_ptr<AlgorithmStore> store;
  return store;
}

}  // namespace

AlgorithmStore::AlgorithmStore(std::string path) : path_(std::move(path)), choices_(read_choices(path_)) {}

std::optional<std::vector<int64_t>> AlgorithmStore::find(const std::string& key) const {
  std::lock_guard lock(mutex_);
  auto it = choices_.find(key);
  if (it == choices_.end()) return std::nullopt;
  return it->second;
}

void AlgorithmStore::put(const std::string& key, const std::vector<int64_t>& choice) {
  std::lock_guard lock(mutex_);
  if (choices_.emplace(key, choice).second) added_ = true;
}

size_t AlgorithmStore::size() const {
  std::lock_guard lock(mutex_);
  return choices_.size();
}

void AlgorithmStore::save() {
  std::lock_guard lock(mutex_);
  if (!added_) return;
  // Another process may have saved since we read: keep its entries, ours only where it has none.
  auto merged = read_choices(path_);
  for (const auto& [key, choice] : choices_) merged.emplace(key, choice);
  nlohmann::json j = {{"format", kFormat}, {"choices", merged}};
  write_file_atomically(path_, j.dump(1) + "\n");
  choices_ = std::move(merged);
  added_ = false;
}

std::shared_ptr<AlgorithmStore> use_algorithm_store(const std::string& path) {
  std::lock_guard lock(process_store_mutex());
  auto& store = process_store();
  if (store) {
    DLB_CHECK(store->path() == path, "algorithm cache {} already in use, not {}", store->path(), path);
    return store;
  }
  check_writable(path, "--algorithm-cache");
  store = std::make_shared<AlgorithmStore>(path);
  return store;
}

std::shared_ptr<AlgorithmStore> algorithm_store() {
  std::lock_guard lock(process_store_mutex());
  return process_store();
}

}  // namespace dlbench
