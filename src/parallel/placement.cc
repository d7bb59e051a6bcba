#include "parallel/placement.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include "core/status.h"
#include "parallel/mpi_runtime.h"

namespace dlbench::parallel {

std::string this_host() {
#if DLBENCH_WITH_MPI
  if (mpi_active()) {
    char name[MPI_MAX_PROCESSOR_NAME] = {0};
    int length = 0;
    if (MPI_Get_processor_name(name, &length) == MPI_SUCCESS && length > 0)
      return std::string(name, static_cast<size_t>(length));
  }
#endif
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

int gpu_of_local_rank(int local_rank, int gpus_on_node, const std::string& host) {
  DLB_REQUIRE(local_rank >= 0 && local_rank < gpus_on_node,
              "--device cuda under mpirun: this process is number {} on host {} but {} has {} CUDA GPU(s); "
              "start at most one process per GPU of each host (a hostfile line `{} slots={}`)",
              local_rank, host, host, gpus_on_node, host, std::max(gpus_on_node, 1));
  return local_rank;
}

RankPlace place_of(const Launch& launch, int slot, Backend& backend) {
  RankPlace place;
  place.host = this_host();
  place.local_rank = launch.node_local_rank(slot);
  if (backend.device().kind == DeviceKind::cuda) {
    place.gpu = backend.device().index;
    if (const std::optional<DeviceMemory> memory = backend.device_memory()) place.gpu_name = memory->name;
  }
  return place;
}

std::vector<RankPlace> gather_places(Communicator& comm, RankPlace mine) {
  mine.rank = comm.rank();
  const nlohmann::json own = {
      {"host", mine.host}, {"local_rank", mine.local_rank}, {"gpu", mine.gpu}, {"gpu_name", mine.gpu_name}};
  std::vector<RankPlace> places;
  int rank = 0;
  for (const std::string& text : comm.all_gather(own.dump())) {
    const nlohmann::json j = nlohmann::json::parse(text);
    places.push_back({rank++, j["host"].get<std::string>(), j["local_rank"].get<int>(), j["gpu"].get<int>(),
                      j["gpu_name"].get<std::string>()});
  }
  return places;
}

std::string host_of(std::span<const RankPlace> places, int rank) {
  return rank >= 0 && rank < static_cast<int>(places.size()) ? places[static_cast<size_t>(rank)].host : "?";
}

std::vector<std::string> host_names(std::span<const RankPlace> places) {
  std::vector<std::string> names;
  for (const RankPlace& p : places) names.push_back(p.host);
  return names;
}

nlohmann::json hosts_json(std::span<const RankPlace> places) {
  nlohmann::json hosts = nlohmann::json::array();
  for (const RankPlace& p : places) {
    auto it = std::find_if(hosts.begin(), hosts.end(),
                           [&](const nlohmann::json& h) { return h["name"] == p.host; });
    if (it == hosts.end()) {
      hosts.push_back({{"name", p.host},
                       {"ranks", nlohmann::json::array()},
                       {"local_ranks", nlohmann::json::array()},
                       {"gpus", nlohmann::json::array()},
                       {"gpu_names", nlohmann::json::array()}});
      it = hosts.end() - 1;
    }
    (*it)["ranks"].push_back(p.rank);
    (*it)["local_ranks"].push_back(p.local_rank);
    if (p.gpu >= 0) {
      (*it)["gpus"].push_back(p.gpu);
      (*it)["gpu_names"].push_back(p.gpu_name);
    }
  }
  return hosts;
}

}  // namespace dlbench::parallel

namespace dlbench::parallel {

std::string hosts_summary(std::span<const RankPlace> places) {
  const nlohmann::json hosts = hosts_json(places);
  std::vector<std::string> parts;
  for (const nlohmann::json& h : hosts)
    parts.push_back(fmt::format("{} (rank{} {})", h["name"].get<std::string>(),
                                h["ranks"].size() > 1 ? "s" : "",
                                fmt::join(h["ranks"].get<std::vector<int>>(), ", ")));
  return fmt::format("{} host{}: {}", hosts.size(), hosts.size() > 1 ? "s" : "", fmt::join(parts, ", "));
}

}  // namespace dlbench::parallel
