// The files a command reads and writes, checked together before any work: each path is resolved to the
// file it really names (symbolic links followed, "." and ".." removed, hard links told by device and
// inode), and a command whose outputs would overwrite one of its inputs or one another, or land inside a
// folder it reads, stops with one line naming both flags.
#pragma once

#include <string>
#include <vector>

namespace dlbench {

enum class PathRole {
  reads_file,   // --resume, --algorithm-cache (read, then written: give it as both)
  reads_tree,   // a data folder, the source of `pack`
  writes_file,  // --json, --checkpoint, --trace, --mlperf-log, results
  writes_tree,  // the destination folder of `pack` and `export-images`
};

struct PathUse {
  std::string flag;  // as the user knows it: "--json", "DST"
  std::string path;  // as given; empty = not used
  PathRole role;
};

// The path with symbolic links and ".." resolved as far as it exists, the rest appended as given.
std::string resolved_path(const std::string& path);

// UserError unless every output names a file of its own: no two outputs are the same file, no output is
// an input (a file that is both read and written, like --algorithm-cache, is given once, as writes_file),
// no output lies inside a folder that is read, and no folder written holds or lies inside one read.
void check_path_uses(const std::vector<PathUse>& uses);

}  // namespace dlbench
