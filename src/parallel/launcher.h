// --launcher: how the ranks of a run are started (parallel/launch.h says what each gives).
#pragma once

#include <cstdint>
#include <string>

namespace dlbench::parallel {

// automatic: as mpi under mpirun, else as threads with --gpus > 1 on a GPU, else one rank.
enum class Launcher : uint8_t { automatic, threads, mpi };

// auto | threads | mpi; another text throws UserError naming --launcher and the choices.
Launcher parse_launcher(const std::string& text);
const char* launcher_name(Launcher launcher);

}  // namespace dlbench::parallel
