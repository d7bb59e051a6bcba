#include "parallel/config_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "core/status.h"
#include "parallel/progress.h"

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

// The values that differ from rank 0's, each with the ranks that hold it, in the order of their first rank.
struct Group {
  std::string value;
  std::vector<int> ranks;
};
std::vector<Group> differing_groups(const std::vector<std::string>& values) {
  std::vector<Group> groups;
  for (size_t r = 1; r < values.size(); ++r) {
    if (values[r] == values.front()) continue;
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.value == values[r]; });
    if (it == groups.end()) it = groups.insert(groups.end(), Group{values[r], {}});
    it->ranks.push_back(static_cast<int>(r));
  }
  return groups;
}

constexpr size_t kShown = 4;  // one line: the first few differences are enough to see what happened

std::string first_few(std::vector<std::string> details) {
  const size_t more = details.size() > kShown ? details.size() - kShown : 0;
  details.resize(std::min(details.size(), kShown));
  return fmt::format("{}{}", fmt::join(details, "; "), more ? fmt::format(" (and {} more)", more) : "");
}

// Every rank stops with the same error; rank 0 alone says it (one line for the run, not one per rank).
[[noreturn]] void stop_every_rank(Communicator& comm, const std::string& message) {
  throw UserError(comm.rank() == 0 ? message : std::string());
}

// Collective: where some rank's `value` differs from rank 0's, "rank 0 (host nodea): A; ranks 2, 3 (host
// nodeb): B", else nullopt.
std::optional<std::string> differing_values(Communicator& comm, const std::string& value,
                                            const std::vector<std::string>& hosts) {
  const std::vector<std::string> all = comm.all_gather(value);
  const std::vector<Group> groups = differing_groups(all);
  if (groups.empty()) return std::nullopt;
  std::vector<std::string> details;
  for (const Group& g : groups)
    details.push_back(fmt::format("{}: {}", ranks_named(g.ranks, hosts), g.value));
  const int zero = 0;
  return fmt::format("{}: {}; {}", ranks_named({&zero, 1}, hosts), all.front(), first_few(details));
}

}  // namespace

void check_same_version(Communicator& comm, const std::string& version,
                        const std::vector<std::string>& hosts) {
  if (auto differences = differing_values(comm, version, hosts))
    stop_every_rank(comm,
                    fmt::format("the ranks run different builds of dlbench: {}; install the same dlbench "
                                "on every host",
                                *differences));
}

void check_same_data(Communicator& comm, const std::string& digest, const std::vector<std::string>& hosts) {
  if (auto differences = differing_values(comm, digest, hosts))
    stop_every_rank(comm, fmt::format("the ranks load different training data: {}; give every host the same "
                                      "data set",
                                      *differences));
}

std::vector<std::string> differing_keys(const nlohmann::json& a, const nlohmann::json& b) {
  std::vector<std::string> out;
  collect_differences(a, b, "", out);
  std::sort(out.begin(), out.end());
  return out;
}

void check_same_config(Communicator& comm, const nlohmann::json& resolved_config,
                       const std::vector<std::string>& rank_specific, const std::vector<std::string>& hosts) {
  nlohmann::json mine = resolved_config;
  for (const std::string& key : rank_specific) mine.erase(key);
  const std::vector<std::string> all = comm.all_gather(mine.dump());
  if (std::all_of(all.begin(), all.end(), [&](const std::string& c) { return c == all.front(); })) return;
  std::vector<nlohmann::json> configs;
  for (const std::string& text : all) configs.push_back(nlohmann::json::parse(text));
  // The keys that differ somewhere, in the order of the first rank where they do.
  std::vector<std::string> keys;
  for (size_t r = 1; r < configs.size(); ++r)
    for (const std::string& key : differing_keys(configs.front(), configs[r]))
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  const int zero = 0;
  std::vector<std::string> details;
  for (const std::string& key : keys) {
    std::vector<std::string> values;
    for (const nlohmann::json& c : configs) values.push_back(value_at(c, key));
    std::vector<std::string> others;
    for (const Group& g : differing_groups(values))
      others.push_back(fmt::format("{} {} {}", ranks_named(g.ranks, hosts),
                                   g.ranks.size() == 1 ? "has" : "have", g.value));
    details.push_back(fmt::format("{} ({}): {} has {}, {}", flag_of(key), key, ranks_named({&zero, 1}, hosts),
                                  values.front(), fmt::join(others, ", ")));
  }
  stop_every_rank(comm,
                  fmt::format("the ranks were started with different settings: {}; start every rank with "
                              "the same flags",
                              first_few(details)));
}

}  // namespace dlbench::parallel
