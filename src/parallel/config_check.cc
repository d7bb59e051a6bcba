#include "parallel/config_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/status.h"

namespace dlbench::parallel {

namespace {

void collect_differences(const nlohmann::json& a, const nlohmann::json& b, const std::string& prefix,
                         std::vector<std::string>& out) {
  if (!a.is_object() || !b.is_object()) {
    if (a != b) out.push_back(prefix);
    return;
  }
  std::set<std::string> keys;
  for (const auto& [key, value] : a.items()) keys.insert(key);
  for (const auto& [key, value] : b.items()) keys.insert(key);
  for (const std::string& key : keys) {
    const std::string path = prefix.empty() ? key : prefix + "/" + key;
    if (!a.contains(key) || !b.contains(key)) {
      out.push_back(path);
    } else {
      collect_differences(a[key], b[key], path, out);
    }
  }
}

// "batch_size" is the flag --batch-size (config keys follow the flags' names).
std::string flag_of(const std::string& key) {
  std::string flag = key.substr(key.rfind('/') + 1);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return "--" + flag;
}

std::string value_at(const nlohmann::json& config, const std::string& path) {
  const nlohmann::json* node = &config;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    const std::string key = path.substr(start, end - start);
    if (!node->is_object() || !node->contains(key)) return "(not set)";
    node = &(*node)[key];
    start = end + 1;
  }
  return node->dump();
}

}  // namespace

std::vector<std::string> differing_keys(const nlohmann::json& a, const nlohmann::json& b) {
  std::vector<std::string> out;
  collect_differences(a, b, "", out);
  std::sort(out.begin(), out.end());
  return out;
}

void check_same_config(Communicator& comm, const nlohmann::json& resolved_config,
                       const std::vector<std::string>& rank_specific) {
  nlohmann::json mine = resolved_config;
  for (const std::string& key : rank_specific) mine.erase(key);
  const std::vector<std::string> all = comm.all_gather(mine.dump());
  const nlohmann::json reference = nlohmann::json::parse(all.front());
  std::vector<std::string> details;
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all.front()) continue;
    const nlohmann::json other = nlohmann::json::parse(all[r]);
    for (const std::string& key : differing_keys(reference, other)) {
      details.push_back(fmt::format("{} ({}): rank 0 has {}, rank {} has {}", flag_of(key), key,
                                    value_at(reference, key), r, value_at(other, key)));
    }
  }
  if (details.empty()) return;
  constexpr size_t kShown = 4;  // one line: the first few are enough to see what happened
  const size_t more = details.size() > kShown ? details.size() - kShown : 0;
  details.resize(std::min(details.size(), kShown));
  throw_user_error(
      "the ranks were started with different settings: {}{}; start every rank with the same flags",
      fmt::join(details, "; "), more ? fmt::format(" (and {} more)", more) : "");
}

}  // namespace dlbench::parallel
