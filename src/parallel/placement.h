// Where the launcher placed a run's ranks: each rank's host, its index among that host's ranks (the local
// rank, which picks its GPU) and its GPU; gathered once at the start so that a result names every node
// (`system.hosts`) and a mismatch or a fault names the host as well as the rank.
//
// Under mpirun the host is MPI's processor name (the node's host name) and the local rank the launcher's
// (OMPI_COMM_WORLD_LOCAL_RANK and its relatives, read in parallel/mpi_runtime.cc), else the rank's index in
// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED): never the global rank, which on the second node of a 2x8 run
// is 8..15.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/launch.h"

namespace dlbench::parallel {

struct RankPlace {
  int rank = 0;
  std::string host;
  int local_rank = 0;
  int gpu = -1;          // the CUDA device index of a GPU rank; -1 for a CPU rank
  std::string gpu_name;  // "NVIDIA H200", where known
};

// This process's host name: MPI_Get_processor_name under MPI, else gethostname.
std::string this_host();

// The GPU of the process that is number `local_rank` among the `gpus_on_node`-GPU node `host`'s processes;
// a UserError naming the host when the node has fewer GPUs than processes.
int gpu_of_local_rank(int local_rank, int gpus_on_node, const std::string& host);

// Local rank `slot` of `launch`, running on `backend`: this host, its place on it, and its GPU where the
// backend is on one.
RankPlace place_of(const Launch& launch, int slot, Backend& backend);

// Collective: every rank's place, in rank order (each rank passes its own; `rank` is set from `comm`).
std::vector<RankPlace> gather_places(Communicator& comm, RankPlace mine);

// "nodeb" for rank 2 of `places`, "?" when out of range.
std::string host_of(std::span<const RankPlace> places, int rank);

// Each rank's host, in rank order (what the ranks' agreement checks name).
std::vector<std::string> host_names(std::span<const RankPlace> places);

// "2 hosts: nodea (ranks 0, 1), nodeb (ranks 2, 3)" (what the headers print).
std::string hosts_summary(std::span<const RankPlace> places);

// The result's system.hosts: one entry per host, in the order of its first rank,
//   [{"name": "nodea", "ranks": [0, 1], "local_ranks": [0, 1], "gpus": [0, 1], "gpu_names": [...]}, ...]
// ("gpus" and "gpu_names" empty for CPU ranks).
nlohmann::json hosts_json(std::span<const RankPlace> places);

}  // namespace dlbench::parallel
