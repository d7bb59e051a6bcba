#include "core/file_io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/status.h"

namespace dlbench {

void check_writable(const std::string& path, const std::string& flag) {
  DLB_REQUIRE(!path.empty(), "{}: empty path", flag);
  DLB_REQUIRE(!std::filesystem::is_directory(path), "{} {}: is a directory; give a file name", flag, path);
  std::string probe = path + ".tmp";
  std::FILE* f = std::fopen(probe.c_str(), "wb");
  DLB_REQUIRE(f != nullptr, "{} {}: cannot write there ({}); choose a writable path", flag, path,
              std::strerror(errno));
  std::fclose(f);
  std::remove(probe.c_str());
}

void write_file_atomically(const std::string& path, const std::string& content) {
  std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  DLB_REQUIRE(f != nullptr, "cannot write {} ({})", tmp, std::strerror(errno));
  bool ok = std::fwrite(content.data(), 1, content.size(), f) == content.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    throw_user_error("writing {} failed (disk full?)", path);
  }
  DLB_REQUIRE(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename {} to {} ({})", tmp, path,
              std::strerror(errno));
}

void append_line(const std::string& path, const std::string& line) {
  std::FILE* f = std::fopen(path.c_str(), "ab");
  DLB_REQUIRE(f != nullptr, "cannot append to {} ({})", path, std::strerror(errno));
  std::string with_newline = line + "\n";
  bool ok = std::fwrite(with_newline.data(), 1, with_newline.size(), f) == with_newline.size();
  ok = (std::fclose(f) == 0) && ok;
  DLB_REQUIRE(ok, "appending to {} failed", path);
}

}  // namespace dlbench
