// A folder built under a temporary name beside its destination and renamed into place only when complete
// (`pack`, `export-images`): DST then holds the whole result or nothing new, whatever stops the command.
//
// The temporary is ".NAME.dlbench-tmp.HOST.PID.RANDOM" beside DST (core/file_io.h's temporary_name_for), so
// one left by a killed run (SIGKILL, power loss) is recognised and removed by the next run for the same
// DST once its process is gone. The files inside are written plainly: the folder itself is the atomic
// unit, and rename(2) puts it in place of a new or empty DST in one step.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace dlbench {

class StagedFolder {
 public:
  // UserError (naming `command`, e.g. "pack") unless DST is missing or an empty directory. Removes the
  // temporaries of DST that killed runs left, creates DST's missing parent folders and the temporary one.
  StagedFolder(std::string destination, std::string command);
  // Uncommitted (an error, a stop): removes the temporary folder and the parent folders it created.
  ~StagedFolder();
  StagedFolder(const StagedFolder&) = delete;
  StagedFolder& operator=(const StagedFolder&) = delete;

  // Where to build: the temporary folder.
  const std::string& path() const { return temporary_; }
  const std::string& destination() const { return destination_; }

  // `size` bytes as the new file path()/RELATIVE; UserError naming DST/RELATIVE and the cause (a full disk,
  // a file-size limit) if any of it fails.
  void write_file(const std::string& relative, const void* data, size_t size) const;
  void write_file(const std::string& relative, const std::string& text) const {
    write_file(relative, text.data(), text.size());
  }

  // Renames the temporary folder to DST and syncs DST's parent. UserError (the
  // temporary removed) if DST is no longer new or empty or the rename fails.
  void commit();

 private:
  void create_missing_parents();
  void remove_everything();

  std::string destination_, command_, target_, temporary_;
  std::vector<std::string> created_parents_;  // outermost first
  bool committed_ = false;
};

// Why a write failed, for a message: strerror, with advice for a full disk or a file-size limit.
std::string write_failure(int error);

}  // namespace dlbench
