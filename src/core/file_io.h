// Output files: written whole or not at all, and never over a file dlbench did not mean to replace.
//
// Every output goes through AtomicFile: the content goes to a temporary of its own in the target's folder,
// named ".NAME.dlbench-tmp.HOST.PID.RANDOM" and created with O_EXCL (so no file the user had, not even
// one called NAME.tmp, is ever opened or removed), and commit() syncs it, renames it over the target and
// syncs the folder. An AtomicFile destroyed uncommitted (an error, an exception) removes its temporary; a
// SIGINT or SIGTERM that ends the process removes every open one (core/signals.h); one left by a process
// that was killed outright (SIGKILL, power loss) is removed by the next AtomicFile for the same target on
// the same host, once its process is gone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dlbench {

class AtomicFile {
 public:
  // Creates the temporary; UserError naming `path` if its folder does not exist, is not writable, or
  // `path` is a directory.
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // All n bytes or UserError ("disk full?"), the temporary removed.
  void write(const void* data, size_t n);
  void write(const std::string& text) { write(text.data(), text.size()); }
  // Syncs, renames over the target, syncs the folder. UserError (temporary removed) if any of it fails.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temporary_path() const { return temporary_; }
  uint64_t bytes_written() const { return written_; }

 private:
  [[noreturn]] void fail(const char* what, int error);
  void discard();

  std::string path_, temporary_;
  int fd_ = -1;
  int slot_ = -1;  // the temporary's entry in the signal handler's list (core/signals.h)
  uint64_t written_ = 0;
};

// `content` as the whole of `path`, through an AtomicFile.
void write_file_atomically(const std::string& path, const std::string& content);

// Appends `line` and a newline to `path` (JSON Lines results) whole or not at all: one write at the end
// of the file, then fsync; if either fails (a full disk) the file is cut back to its length before, so
// the next line never lands on half of this one. UserError naming the file and the cause.
void append_line(const std::string& path, const std::string& line);

// What an output flag writes, and so what a file already at its path may be for dlbench to replace it
// (or, for json_lines, to append to it). Anything else there is the user's: a slip such as
// `--checkpoint train.py` must stop the run before it starts, not destroy the file when it ends.
enum class OutputKind {
  json_object,      // --json: one JSON object (a result, the system table)
  json_lines,       // sweep --results: JSON Lines, appended to; its first line a JSON object
  checkpoint,       // --checkpoint: a file starting with the checkpoint's magic "DLBCKPT\0"
  trace,            // --trace: a Chrome trace, a JSON object with "traceEvents"
  mlperf_log,       // --mlperf-log: lines starting ":::MLLOG"
  algorithm_cache,  // --algorithm-cache: a JSON object with "format" and "choices"
  report_markdown,  // report's report.md: starts "# dlbench report"
  report_html,      // report's report.html: an HTML page titled "dlbench report"
};

// UserError (naming `flag`) unless a file can be created at `path`: its folder exists and is writable and
// `path` is not a directory; and unless what is at `path` is nothing, an empty file, or a file of `kind`.
// Creates and removes a temporary of its own (never `path` itself); call it before a long run, not after.
void check_writable(const std::string& path, const std::string& flag, OutputKind kind);

// Whether `name` (a file name, no folder) is one of dlbench's temporaries.
bool is_temporary_name(const std::string& name);

// A new name for a temporary of `path` in its folder (".NAME.dlbench-tmp.HOST.PID.RANDOM"), for a folder
// built before it is renamed into place (pack, export-images); nothing is created.
std::string temporary_name_for(const std::string& path);

// Removes the temporaries of `path` (files or folders) that a killed dlbench left on this host: those
// whose process is gone.
void remove_stale_temporaries(const std::string& path);

}  // namespace dlbench
