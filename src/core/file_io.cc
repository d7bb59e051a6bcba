#include "core/file_io.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/signals.h"
#include "core/status.h"

namespace dlbench {

namespace fs = std::filesystem;

namespace {

constexpr const char* kTemporaryMark = ".dlbench-tmp.";

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "host";
  std::string host(name);
  for (char& c : host)
    if (c == '.' || c == '/') c = '_';
  return host;
}

std::string folder_of(const std::string& path) {
  const std::string parent = fs::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

// ".NAME.dlbench-tmp.HOST." — what every temporary of `path` made on this host starts with.
std::string temporary_prefix(const std::string& path) {
  return "." + fs::path(path).filename().string() + kTemporaryMark + host_name() + ".";
}

// Durability of a rename: sync the folder. Best effort (some file systems refuse to sync a directory).
void sync_folder(const std::string& folder) {
  const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

void require_folder(const std::string& path, const std::string& what) {
  DLB_REQUIRE(!path.empty(), "{}: empty path", what);
  std::error_code ec;
  DLB_REQUIRE(!fs::is_directory(path, ec), "{} {}: is a directory; give a file name", what, path);
  const std::string folder = folder_of(path);
  if (!fs::is_directory(folder, ec)) {
    DLB_REQUIRE(!fs::exists(folder, ec), "{} {}: {} is not a directory; choose another path", what, path,
                folder);
    throw_user_error("{} {}: directory {} does not exist; create it or choose another path", what, path,
                     folder);
  }
}

}  // namespace

bool is_temporary_name(const std::string& name) {
  return !name.empty() && name[0] == '.' && name.find(kTemporaryMark) != std::string::npos;
}

void remove_stale_temporaries(const std::string& path) {
  const std::string folder = folder_of(path), prefix = temporary_prefix(path);
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    // The rest is PID.RANDOM: remove it only when that process is gone.
    const std::string rest = name.substr(prefix.size());
    char* after = nullptr;
    const long pid = std::strtol(rest.c_str(), &after, 10);
    if (pid <= 0 || after == rest.c_str() || *after != '.') continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code ignored;
    fs::remove_all(it->path(), ignored);  // a file, or a folder under construction (pack, export-images)
  }
}

std::string temporary_name_for(const std::string& path) {
  static thread_local std::mt19937_64 random(std::random_device{}());
  return (fs::path(folder_of(path)) / temporary_prefix(path)).string() + std::to_string(::getpid()) + "." +
         std::to_string(random() % 1000000000u);
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  require_folder(path_, "cannot write");
  remove_stale_temporaries(path_);
  for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
    temporary_ = temporary_name_for(path_);
    slot_ = register_temporary(temporary_);
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      const int error = errno;
      unregister_temporary(slot_);
      slot_ = -1;
      if (error != EEXIST)
        throw_user_error("cannot write {} (creating a file in {}: {}); choose a writable path", path_,
                         folder_of(path_), std::strerror(error));
    }
  }
  DLB_CHECK(fd_ >= 0, "no unique temporary name for {}", path_);
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
    ::unlink(temporary_.c_str());
  }
  unregister_temporary(slot_);
  slot_ = -1;
}

void AtomicFile::fail(const char* what, int error) {
  discard();
  throw_user_error("cannot write {}: {} failed ({}); {} is as it was{}", path_, what, std::strerror(error),
                   path_, error == ENOSPC || error == EFBIG || error == EDQUOT ? " — free disk space" : "");
}

void AtomicFile::write(const void* data, size_t n) {
  DLB_CHECK(fd_ >= 0, "write to {} after commit", path_);
  const char* bytes = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t done = ::write(fd_, bytes, n);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) fail("writing", done < 0 ? errno : ENOSPC);
    bytes += done;
    n -= static_cast<size_t>(done);
    written_ += static_cast<uint64_t>(done);
  }
}

void AtomicFile::commit() {
  DLB_CHECK(fd_ >= 0, "commit of {} twice", path_);
  if (::fsync(fd_) != 0) fail("syncing", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    fd_ = ::open("/dev/null", O_RDONLY);  // so that discard() removes the temporary
    fail("closing", errno);
  }
  if (std::rename(temporary_.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary_.c_str());
    unregister_temporary(slot_);
    slot_ = -1;
    throw_user_error("cannot write {}: renaming its temporary to it failed ({})", path_,
                     std::strerror(error));
  }
  unregister_temporary(slot_);
  slot_ = -1;
  sync_folder(folder_of(path_));
}

void write_file_atomically(const std::string& path, const std::string& content) {
  AtomicFile file(path);
  file.write(content);
  file.commit();
}

void append_line(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  DLB_REQUIRE(fd >= 0, "cannot append to {} ({})", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    throw_user_error("cannot append to {} ({})", path, std::strerror(error));
  }
  const off_t before = st.st_size;
  const std::string text = line + "\n";
  // Blocked while the line is written: a signal that ends the process cannot cut it in half.
  sigset_t all, previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &previous);
  size_t done = 0;
  int error = 0;
  while (done < text.size()) {
    const ssize_t n = ::pwrite(fd, text.data() + done, text.size() - done, before + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = n < 0 ? errno : ENOSPC;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (error != 0) {
    // Whole or not at all: cut the file back to the last whole line.
    const int ignored = ::ftruncate(fd, before);
    (void)ignored;
    ::fsync(fd);
  }
  ::close(fd);
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (error != 0)
    throw_user_error("appending to {} failed ({}); the file is as it was before this line{}", path,
                     std::strerror(error),
                     error == ENOSPC || error == EFBIG || error == EDQUOT ? " — free disk space" : "");
}

namespace {

// Whether the file at `path` is one dlbench writes as `kind` (OutputKind).
bool holds_output_of_kind(const std::string& path, OutputKind kind) {
  std::ifstream in(path, std::ios::binary);
  auto head = [&](size_t bytes) {  // the file's first `bytes`, or all of it if shorter
    std::string text(bytes, '\0');
    in.read(text.data(), static_cast<std::streamsize>(bytes));
    text.resize(static_cast<size_t>(in.gcount()));
    return text;
  };
  auto starts_with = [&](const std::string& prefix) { return head(prefix.size()) == prefix; };
  auto json_object = [&] {
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    return j.is_object() ? j : nlohmann::json();
  };
  switch (kind) {
    case OutputKind::json_object:
      return json_object().is_object();
    case OutputKind::json_lines: {
      std::string line;
      while (std::getline(in, line) && line.find_first_not_of(" \t\r") == std::string::npos) {
      }
      return nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false).is_object();
    }
    case OutputKind::checkpoint:
      return starts_with(std::string("DLBCKPT\0", 8));  // train/checkpoint.h's magic
    case OutputKind::trace:
      return json_object().contains("traceEvents");
    case OutputKind::mlperf_log:
      return starts_with(":::MLLOG");
    case OutputKind::algorithm_cache: {
      const nlohmann::json j = json_object();
      return j.contains("format") && j.contains("choices");
    }
    case OutputKind::report_markdown:
      return starts_with("# dlbench report");
    case OutputKind::report_html: {
      const std::string page = head(4096);
      return page.rfind("<!DOCTYPE html>", 0) == 0 &&
             page.find("<title>dlbench report</title>") != std::string::npos;
    }
  }
  return false;
}

const char* output_kind_name(OutputKind kind) {
  switch (kind) {
    case OutputKind::json_object:
      return "a JSON object";
    case OutputKind::json_lines:
      return "JSON Lines";
    case OutputKind::checkpoint:
      return "a dlbench checkpoint";
    case OutputKind::trace:
      return "a trace (Chrome trace JSON)";
    case OutputKind::mlperf_log:
      return "an MLPerf log";
    case OutputKind::algorithm_cache:
      return "a dlbench algorithm cache";
    case OutputKind::report_markdown:
      return "a dlbench report";
    case OutputKind::report_html:
      return "a dlbench report's HTML page";
  }
  return "";
}

}  // namespace

void check_writable(const std::string& path, const std::string& flag, OutputKind kind) {
  require_folder(path, flag);
  std::error_code ec;
  const bool occupied = fs::is_regular_file(path, ec) && fs::file_size(path, ec) > 0 && !ec;
  DLB_REQUIRE(!occupied || holds_output_of_kind(path, kind),
              "{} {}: the file exists and is not {} (what {} writes); move it or choose another path", flag,
              path, output_kind_name(kind), flag);
  try {
    AtomicFile probe(path);
  } catch (const UserError& e) {
    throw_user_error("{} {}: {}", flag, path, e.what());
  }
}

}  // namespace dlbench
