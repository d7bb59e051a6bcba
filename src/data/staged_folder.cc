#include "data/staged_folder.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/file_io.h"
#include "core/file_paths.h"
#include "core/status.h"

namespace dlbench {

namespace fs = std::filesystem;

namespace {

// Best effort (some file systems refuse to sync a directory): the rename is then still atomic, only its
// durability across a power loss is less sure. The files inside are the writer's to sync (pack syncs each
// shard; export-images' thousands of small JPEGs are not, as syncfs or one fsync each costs seconds).
void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::string parent_of(const std::string& path) {
  const std::string parent = fs::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

}  // namespace

std::string write_failure(int error) {
  const bool full = error == ENOSPC || error == EFBIG || error == EDQUOT;
  return fmt::format("{}{}", std::strerror(error), full ? "; free disk space or choose another place" : "");
}

StagedFolder::StagedFolder(std::string destination, std::string command)
    : destination_(std::move(destination)), command_(std::move(command)) {
  DLB_REQUIRE(!destination_.empty(), "{}: give the destination folder", command_);
  while (destination_.size() > 1 && destination_.back() == '/') destination_.pop_back();
  std::error_code ec;
  const fs::file_status status = fs::status(destination_, ec);
  if (status.type() != fs::file_type::not_found) {
    DLB_REQUIRE(!ec, "{}: cannot access {} ({})", command_, destination_, ec.message());
    DLB_REQUIRE(status.type() == fs::file_type::directory,
                "{}: {} exists and is not a directory; give a new or an empty directory", command_,
                destination_);
    DLB_REQUIRE(fs::is_empty(destination_, ec) && !ec,
                "{}: {} exists and is not empty; give a new or an empty directory", command_, destination_);
    // The result replaces DST whole; a folder the user made read-only is not to be replaced.
    DLB_REQUIRE(::access(destination_.c_str(), W_OK) == 0,
                "{}: cannot create files in {} ({}); choose a writable directory", command_, destination_,
                std::strerror(errno));
  }
  // A symbolic link to an empty folder: the result goes where it points, the link stays.
  target_ = fs::is_symlink(destination_, ec) ? resolved_path(destination_) : destination_;
  create_missing_parents();
  remove_stale_temporaries(target_);
  temporary_ = temporary_name_for(target_);
  if (!fs::create_directory(temporary_, ec) || ec) {
    const std::string why = ec ? ec.message() : "it exists";
    remove_everything();
    throw_user_error("{}: cannot create a folder beside {} ({}); choose a writable place", command_,
                     destination_, why);
  }
}

StagedFolder::~StagedFolder() {
  if (!committed_) remove_everything();
}

void StagedFolder::create_missing_parents() {
  std::error_code ec;
  std::vector<fs::path> missing;  // innermost first
  for (fs::path p = fs::absolute(fs::path(target_), ec).parent_path(); !p.empty(); p = p.parent_path()) {
    if (fs::exists(p, ec) || p == p.parent_path()) break;
    missing.push_back(p);
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (!fs::create_directory(*it, ec) && ec) {
      remove_everything();
      throw_user_error("{}: cannot create the directory {} ({}); choose a writable place for {}", command_,
                       it->string(), ec.message(), destination_);
    }
    created_parents_.push_back(it->string());
  }
}

void StagedFolder::remove_everything() {
  std::error_code ec;
  if (!temporary_.empty()) fs::remove_all(temporary_, ec);
  for (auto it = created_parents_.rbegin(); it != created_parents_.rend(); ++it) fs::remove(*it, ec);
}

void StagedFolder::write_file(const std::string& relative, const void* data, size_t size) const {
  const std::string path = temporary_ + "/" + relative;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  int error = fd < 0 ? errno : 0;
  const char* bytes = static_cast<const char*>(data);
  while (error == 0 && size > 0) {
    const ssize_t n = ::write(fd, bytes, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) error = n < 0 ? errno : ENOSPC;
    if (n > 0) {
      bytes += n;
      size -= static_cast<size_t>(n);
    }
  }
  if (fd >= 0 && ::close(fd) != 0 && error == 0) error = errno;
  if (error != 0)
    throw_user_error("{}: writing {}/{} failed ({}); nothing was written to {}", command_, destination_,
                     relative, write_failure(error), destination_);
}

void StagedFolder::commit() {
  DLB_CHECK(!committed_, "{}: {} committed twice", command_, destination_);
  // rename(2) replaces an empty directory and refuses one that is not: DST filled up meanwhile.
  if (std::rename(temporary_.c_str(), target_.c_str()) != 0) {
    const int error = errno;
    remove_everything();
    committed_ = true;  // nothing left to remove
    throw_user_error("{}: cannot move the result into {} ({}); nothing was written to it", command_,
                     destination_,
                     error == ENOTEMPTY || error == EEXIST ? "it is no longer empty" : std::strerror(error));
  }
  committed_ = true;
  sync_directory(parent_of(target_));
}

}  // namespace dlbench
