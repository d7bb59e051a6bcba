#include "data/shard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string_view>

#include "core/status.h"
#include "data/staged_folder.h"

namespace dlbench {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kFileMagic = "DLBSHARD";
constexpr std::string_view kFooterMagic = "DLBINDEX";
constexpr uint32_t kVersion = 1;
constexpr uint32_t kRecordMagic = 0x52424c44;  // "DLBR" in little-endian bytes
constexpr uint64_t kHeaderBytes = 16;
constexpr uint64_t kRecordHeaderBytes = 20;
constexpr uint64_t kRecordCrcBytes = 4;
constexpr uint64_t kIndexEntryBytes = 24;  // without the name
constexpr uint64_t kFooterBytes = 32;
constexpr std::string_view kManifestTitle = "dlbench shard set ";
constexpr uint64_t kMaxManifestBytes = uint64_t{64} << 20;
constexpr const char* kRepack = "re-create the shard set with `dlbench pack`";

uint32_t crc32_of(uint32_t crc, const void* data, uint64_t size) {
  const auto* p = static_cast<const Bytef*>(data);
  while (size > 0) {
    const auto chunk = static_cast<uInt>(std::min<uint64_t>(size, uint64_t{1} << 30));
    crc = static_cast<uint32_t>(::crc32(crc, p, chunk));
    p += chunk;
    size -= chunk;
  }
  return crc;
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(p[i]);
  return v;
}
uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(p[i]);
  return v;
}

// `s` fit for a one-line message: control and non-ASCII bytes escaped, cut after `max` bytes.
std::string printable(std::string_view s, size_t max = 100) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f)
      out.push_back(static_cast<char>(c));
    else
      out += fmt::format("\\x{:02x}", c);
  }
  if (s.size() > max) out += "...";
  return out;
}

std::string join_path(const std::string& dir, std::string_view name) {
  return (fs::path(dir) / fs::path(name)).string();
}

std::string record_header(int32_t label, uint64_t name_bytes, uint64_t payload_bytes) {
  std::string h;
  put_u32(h, kRecordMagic);
  put_u32(h, static_cast<uint32_t>(label));
  put_u32(h, static_cast<uint32_t>(name_bytes));
  put_u64(h, payload_bytes);
  return h;
}

// ---------------------------------------------------------------------------------------------------------
// Writing

// The bytes of the regular file `path`; false and `reason` set if it cannot be read or is empty.
bool read_input(const std::string& path, std::string& bytes, std::string& reason) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (regular files ignore the flag).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    reason = std::strerror(errno);
    return false;
  }
  struct stat st {};
  bool ok = false;
  if (::fstat(fd, &st) != 0) {
    reason = std::strerror(errno);
  } else if (S_ISDIR(st.st_mode)) {
    reason = "a directory";
  } else if (!S_ISREG(st.st_mode)) {
    reason = "not a regular file";
  } else if (st.st_size == 0) {
    reason = "empty file";
  } else {
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    ok = true;
    while (done < bytes.size()) {
      const ssize_t n = ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        reason = n < 0 ? std::strerror(errno) : "the file shrank while being read";
        ok = false;
        break;
      }
      done += static_cast<size_t>(n);
    }
  }
  ::close(fd);
  return ok;
}

// Writes one shard set into `folder`, a new empty folder that the caller builds and renames into place
// (data/staged_folder.h): shard files and the manifest under their own names, plain writes. Messages name
// the files as they will be called, under `shown_as`.
class Packer {
 public:
  Packer(std::string folder, std::string shown_as, uint64_t shard_bytes)
      : folder_(std::move(folder)), shown_as_(std::move(shown_as)), shard_bytes_(shard_bytes) {}
  ~Packer() {
    if (fd_ >= 0) ::close(fd_);
  }
  Packer(const Packer&) = delete;
  Packer& operator=(const Packer&) = delete;

  void add(const ShardInput& input, const std::string& payload) {
    const uint64_t record_bytes = kRecordHeaderBytes + input.name.size() + payload.size() + kRecordCrcBytes;
    const uint64_t entry_bytes = kIndexEntryBytes + input.name.size();
    if (fd_ >= 0 && shard_records_ > 0 &&
        shard_size_ + record_bytes + index_.size() + entry_bytes + kFooterBytes > shard_bytes_)
      close_file();
    if (fd_ < 0) open_shard();

    put_u64(index_, shard_size_);
    put_u64(index_, payload.size());
    put_u32(index_, static_cast<uint32_t>(input.label));
    put_u32(index_, static_cast<uint32_t>(input.name.size()));
    index_ += input.name;

    const std::string header = record_header(input.label, input.name.size(), payload.size());
    uint32_t crc = crc32_of(0, header.data(), header.size());
    crc = crc32_of(crc, input.name.data(), input.name.size());
    crc = crc32_of(crc, payload.data(), payload.size());
    buffer_ += header;
    buffer_ += input.name;
    if (payload.size() >= kDirectWriteBytes) {
      flush();
      write_all(payload.data(), payload.size());
    } else {
      buffer_ += payload;
    }
    put_u32(buffer_, crc);
    if (buffer_.size() >= kBufferBytes) flush();
    shard_size_ += record_bytes;
    ++shard_records_;
    ++records_;
  }

  int64_t records() const { return records_; }

  PackResult finish(const std::vector<std::string>& class_names) {
    if (fd_ >= 0) close_file();
    PackResult result;
    std::string manifest = fmt::format("{}{}\nclasses {}\n", kManifestTitle, kVersion, class_names.size());
    for (const std::string& name : class_names) manifest += fmt::format("class {}\n", name);
    manifest += fmt::format("shards {}\n", shards_.size());
    for (size_t k = 0; k < shards_.size(); ++k) {
      manifest += fmt::format("shard {} {} {}\n", shard_file_name(static_cast<int64_t>(k)), shards_[k].first,
                              shards_[k].second);
      result.bytes += static_cast<int64_t>(shards_[k].second);
    }
    manifest += fmt::format("records {}\n", records_);
    manifest += fmt::format("crc32 {:08x}\n", crc32_of(0, manifest.data(), manifest.size()));
    open_file(kShardManifestName);
    buffer_ = manifest;
    close_file();

    result.records = records_;
    result.shards = static_cast<int64_t>(shards_.size());
    result.bytes += static_cast<int64_t>(manifest.size());
    return result;
  }

 private:
  static constexpr size_t kBufferBytes = size_t{4} << 20;
  static constexpr size_t kDirectWriteBytes = size_t{1} << 20;

  void open_file(const std::string& name) {
    file_name_ = name;
    fd_ = ::open(join_path(folder_, name).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw_user_error("pack: cannot create {} ({}); choose a writable directory for the shards",
                       shown_path(), std::strerror(errno));
  }

  void open_shard() {
    open_file(shard_file_name(static_cast<int64_t>(shards_.size())));
    buffer_.assign(kFileMagic);
    put_u32(buffer_, kVersion);
    put_u32(buffer_, static_cast<uint32_t>(shards_.size()));
    shard_size_ = kHeaderBytes;
    shard_records_ = 0;
    index_.clear();
  }

  // A shard's index and footer, or the manifest: the buffer written out, synced and closed.
  void close_file() {
    const bool shard = file_name_ != kShardManifestName;
    const uint64_t index_offset = shard_size_;
    std::string footer;
    if (shard) {
      buffer_ += index_;
      put_u64(footer, index_offset);
      put_u64(footer, static_cast<uint64_t>(shard_records_));
      put_u32(footer, crc32_of(0, index_.data(), index_.size()));
      put_u32(footer, crc32_of(0, footer.data(), footer.size()));
      footer += kFooterMagic;
      buffer_ += footer;
    }
    flush();
    const int fd = fd_;
    fd_ = -1;
    const bool synced = ::fsync(fd) == 0;
    const int sync_errno = errno;
    if (::close(fd) != 0 || !synced)
      throw_user_error("pack: writing {} failed ({}); nothing was written to {}", shown_path(),
                       write_failure(synced ? errno : sync_errno), shown_as_);
    if (shard) shards_.emplace_back(shard_records_, index_offset + index_.size() + footer.size());
  }

  void flush() {
    write_all(buffer_.data(), buffer_.size());
    buffer_.clear();
  }

  void write_all(const char* data, size_t size) {
    while (size > 0) {
      const ssize_t n = ::write(fd_, data, std::min<size_t>(size, size_t{1} << 30));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        throw_user_error("pack: writing {} failed ({}); nothing was written to {}", shown_path(),
                         write_failure(n < 0 ? errno : ENOSPC), shown_as_);
      data += n;
      size -= static_cast<size_t>(n);
    }
  }

  std::string shown_path() const { return join_path(shown_as_, file_name_); }

  std::string folder_, shown_as_;
  uint64_t shard_bytes_;
  int fd_ = -1;              // the file being written
  std::string file_name_;    // its name
  std::string buffer_;       // its bytes not yet written
  std::string index_;        // a shard's index so far
  uint64_t shard_size_ = 0;  // its size so far: header and records
  int64_t shard_records_ = 0;
  int64_t records_ = 0;
  std::vector<std::pair<int64_t, uint64_t>> shards_;  // finished shards: records, bytes
};

// ---------------------------------------------------------------------------------------------------------
// Reading the manifest

struct Manifest {
  std::vector<std::string> classes;
  std::vector<std::pair<uint64_t, uint64_t>> shards;  // records, bytes
};

bool parse_u64(std::string_view s, uint64_t& value) {
  if (s.empty() || s.size() > 20) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  return ec == std::errc() && end == s.data() + s.size();
}

class ManifestParser {
 public:
  ManifestParser(const std::string& path, std::string_view body) : path_(path), body_(body) {}

  std::string_view next_line(const char* expected) {
    if (pos_ >= body_.size())
      fail("it ends early: expected {}, found the checksum line or the end of the file", expected);
    const size_t end = body_.find('\n', pos_);  // the body ends with '\n', so end != npos
    std::string_view line = body_.substr(pos_, end - pos_);
    pos_ = end + 1;
    ++line_number_;
    return line;
  }

  // A line `KEY N`.
  uint64_t number_line(std::string_view key) {
    const std::string expected = fmt::format("`{} N`", key);
    std::string_view line = next_line(expected.c_str());
    uint64_t value = 0;
    if (!line.starts_with(key) || line.size() <= key.size() || line[key.size()] != ' ' ||
        !parse_u64(line.substr(key.size() + 1), value))
      bad_line(line, expected);
    return value;
  }

  bool at_end() const { return pos_ >= body_.size(); }

  [[noreturn]] void bad_line(std::string_view line, std::string_view expected) {
    fail("line {}: expected {}, found '{}'", line_number_, expected, printable(line));
  }

  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
    throw_user_error("{}: {}; {}", path_, fmt::format(format, std::forward<Args>(args)...), kRepack);
  }

 private:
  const std::string& path_;
  std::string_view body_;
  size_t pos_ = 0;
  int64_t line_number_ = 0;
};

Manifest parse_manifest(const std::string& path, std::string_view text) {
  ManifestParser parser(path, text);
  if (!text.starts_with(kManifestTitle)) {
    const std::string_view first = text.substr(0, text.find('\n'));
    throw_user_error("{} is not a dlbench shard set manifest (its first line is '{}'); {}", path,
                     printable(first, 60), kRepack);
  }
  if (text.empty() || text.back() != '\n') parser.fail("it is cut short (no line end at its end)");
  // The checksum line is the last one: body = every byte before it.
  const size_t last_start = text.rfind('\n', text.size() - 2) + 1;  // npos + 1 == 0: a single line
  const std::string_view body = text.substr(0, last_start);
  const std::string_view crc_line = text.substr(last_start, text.size() - 1 - last_start);
  {
    const std::string_view first = text.substr(0, text.find('\n'));  // starts with the title
    const std::string_view version = first.substr(kManifestTitle.size());
    if (version != fmt::format("{}", kVersion))
      parser.fail("format version '{}', this dlbench reads version {}", printable(version, 20), kVersion);
  }
  uint32_t stored = 0;
  const char* hex_begin = crc_line.data() + std::min<size_t>(6, crc_line.size());
  const auto [hex_end, hex_ec] = std::from_chars(hex_begin, crc_line.data() + crc_line.size(), stored, 16);
  if (!crc_line.starts_with("crc32 ") || crc_line.size() != 14 || hex_ec != std::errc() ||
      hex_end != crc_line.data() + crc_line.size())
    parser.fail("its last line is '{}', not the checksum `crc32 XXXXXXXX` (cut short?)",
                printable(crc_line, 60));
  const uint32_t computed = crc32_of(0, body.data(), body.size());
  if (stored != computed)
    parser.fail("checksum mismatch (stored {:08x}, computed {:08x}): the file is damaged or was edited",
                stored, computed);

  ManifestParser lines(path, body);
  lines.next_line("the title");
  Manifest m;
  const uint64_t num_classes = lines.number_line("classes");
  if (num_classes > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
    lines.fail("it lists {} classes, more than a label can name", num_classes);
  for (uint64_t c = 0; c < num_classes; ++c) {
    std::string_view line = lines.next_line("`class NAME`");
    if (!line.starts_with("class ") || line.size() == 6) lines.bad_line(line, "`class NAME`");
    m.classes.emplace_back(line.substr(6));
  }
  const uint64_t num_shards = lines.number_line("shards");
  uint64_t total = 0;
  for (uint64_t k = 0; k < num_shards; ++k) {
    const std::string expected =
        fmt::format("`shard {} RECORDS BYTES`", shard_file_name(static_cast<int64_t>(k)));
    std::string_view line = lines.next_line(expected.c_str());
    const std::string prefix = fmt::format("shard {} ", shard_file_name(static_cast<int64_t>(k)));
    if (!line.starts_with(prefix)) lines.bad_line(line, expected);
    const std::string_view rest = line.substr(prefix.size());
    const size_t space = rest.find(' ');
    uint64_t records = 0, bytes = 0;
    if (space == std::string_view::npos || !parse_u64(rest.substr(0, space), records) ||
        !parse_u64(rest.substr(space + 1), bytes))
      lines.bad_line(line, expected);
    if (records > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - total)
      lines.fail("its record counts add up to more than 2^63");
    total += records;
    m.shards.emplace_back(records, bytes);
  }
  const uint64_t listed_total = lines.number_line("records");
  if (listed_total != total)
    lines.fail("it gives {} records in all, but its shards hold {} between them", listed_total, total);
  if (!lines.at_end()) {
    std::string_view extra = lines.next_line("the end");
    lines.bad_line(extra, "the checksum line");
  }
  return m;
}

}  // namespace

std::string shard_file_name(int64_t shard) { return fmt::format("shard-{:05}.dlbs", shard); }

PackResult write_shard_set(const std::vector<ShardInput>& files, const std::vector<std::string>& class_names,
                           const std::string& folder, const std::string& dst, size_t shard_bytes, bool strict,
                           const std::function<void(int64_t done, int64_t total)>& progress) {
  DLB_REQUIRE(!dst.empty(), "pack: no destination directory given");
  DLB_REQUIRE(shard_bytes > 0, "pack {}: the shard size must be positive", dst);
  DLB_REQUIRE(!class_names.empty(), "pack {}: no classes given", dst);
  for (size_t c = 0; c < class_names.size(); ++c)
    DLB_REQUIRE(!class_names[c].empty() && class_names[c].find_first_of("\r\n") == std::string::npos,
                "pack {}: class {} ('{}') is empty or holds a line break; rename it", dst, c,
                printable(class_names[c]));
  const auto num_classes = static_cast<int64_t>(class_names.size());
  DLB_REQUIRE(num_classes <= std::numeric_limits<int32_t>::max(), "pack {}: {} classes, too many", dst,
              num_classes);
  for (const ShardInput& input : files) {
    DLB_REQUIRE(input.label >= 0 && input.label < num_classes,
                "pack {}: {} has label {}, outside the {} classes (0..{})", dst, input.path, input.label,
                num_classes, num_classes - 1);
    DLB_REQUIRE(input.name.size() <= kMaxShardNameBytes, "pack {}: the name of {} is {} bytes, more than {}",
                dst, input.path, input.name.size(), kMaxShardNameBytes);
  }

  Packer packer(folder, dst, shard_bytes);
  PackResult result;
  std::vector<int64_t> class_records(class_names.size(), 0);
  std::string bytes, reason;
  const auto total = static_cast<int64_t>(files.size());
  for (int64_t i = 0; i < total; ++i) {
    const ShardInput& input = files[static_cast<size_t>(i)];
    if (read_input(input.path, bytes, reason)) {
      packer.add(input, bytes);
      ++class_records[static_cast<size_t>(input.label)];
    } else {
      DLB_REQUIRE(!strict, "pack: cannot read {} ({}); fix or remove it, or pack without strict checks",
                  input.path, reason);
      ++result.skipped;
      result.skipped_paths.push_back(input.path);
      result.skipped_reasons.push_back(reason);
    }
    if (progress) progress(i + 1, total);
  }
  if (packer.records() == 0) {
    if (files.empty()) throw_user_error("pack {}: no files to pack", dst);
    throw_user_error("pack {}: none of the {} files could be read (first: {}: {}); nothing was written", dst,
                     files.size(), result.skipped_paths.front(), result.skipped_reasons.front());
  }
  const PackResult written = packer.finish(class_names);
  result.records = written.records;
  result.shards = written.shards;
  result.bytes = written.bytes;
  result.class_records = std::move(class_records);
  return result;
}

PackResult pack_shards(const std::vector<ShardInput>& files, const std::vector<std::string>& class_names,
                       const std::string& dst, size_t shard_bytes, bool strict,
                       const std::function<void(int64_t done, int64_t total)>& progress) {
  DLB_REQUIRE(!dst.empty(), "pack: no destination directory given");
  StagedFolder staged(dst, "pack");
  PackResult result = write_shard_set(files, class_names, staged.path(), dst, shard_bytes, strict, progress);
  staged.commit();
  return result;
}

bool is_shard_set(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(join_path(path, kShardManifestName), ec);
}

// ---------------------------------------------------------------------------------------------------------
// Reading

struct ShardSet::Files {
  bool in_memory = false;
  std::vector<int> fds;             // one per shard (on disk)
  std::vector<std::string> memory;  // one per shard (from_memory)
  std::vector<uint64_t> sizes;      // each shard's size at open

  Files() = default;
  Files(const Files&) = delete;
  Files& operator=(const Files&) = delete;
  ~Files() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }

  // Reads `size` bytes at `offset` of shard `shard`; false and `error` set on failure or a short read.
  bool read_at(int64_t shard, uint64_t offset, void* out, uint64_t size, std::string& error) const {
    const auto s = static_cast<size_t>(shard);
    if (in_memory) {
      const std::string& data = memory[s];
      if (offset > data.size() || size > data.size() - offset) {
        error = fmt::format("short read: {} bytes at offset {} of a {}-byte file", size, offset, data.size());
        return false;
      }
      if (size > 0) std::memcpy(out, data.data() + offset, size);
      return true;
    }
    uint64_t done = 0;
    while (done < size) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(size - done, uint64_t{1} << 30));
      const ssize_t n =
          ::pread(fds[s], static_cast<char*>(out) + done, want, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        error = fmt::format("read error at offset {} ({})", offset + done, std::strerror(errno));
        return false;
      }
      if (n == 0) {
        error = fmt::format(
            "short read: the file ends at offset {}, the record needs {} bytes from offset {} "
            "(was the file truncated after it was opened?)",
            offset + done, size, offset);
        return false;
      }
      done += static_cast<uint64_t>(n);
    }
    return true;
  }
};

ShardSet::ShardSet() = default;
ShardSet::ShardSet(const std::string& dir) { open(dir, nullptr); }
ShardSet::~ShardSet() = default;
ShardSet::ShardSet(ShardSet&&) noexcept = default;
ShardSet& ShardSet::operator=(ShardSet&&) noexcept = default;

ShardSet ShardSet::from_memory(const std::string& dir, std::map<std::string, std::string> files) {
  ShardSet set;
  set.open(dir, &files);
  return set;
}

void ShardSet::open(const std::string& dir, std::map<std::string, std::string>* memory) {
  dir_ = dir;
  files_ = std::make_unique<Files>();
  files_->in_memory = memory != nullptr;
  const std::string manifest_path = join_path(dir, kShardManifestName);

  std::string text;
  if (memory != nullptr) {
    auto it = memory->find(kShardManifestName);
    DLB_REQUIRE(it != memory->end(), "{} is not a shard set: it has no manifest; {}", dir, kRepack);
    text = std::move(it->second);
  } else {
    std::error_code ec;
    const fs::file_status status = fs::status(dir, ec);
    DLB_REQUIRE(status.type() != fs::file_type::not_found,
                "{} not found; give a directory made by `dlbench pack`", dir);
    DLB_REQUIRE(status.type() == fs::file_type::directory,
                "{} is not a directory; a shard set is a directory made by `dlbench pack`", dir);
    const int fd = ::open(manifest_path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      if (errno == ENOENT)
        throw_user_error("{} is not a shard set: it has no manifest (an interrupted pack?); {}", dir,
                         kRepack);
      throw_user_error("cannot open {} ({})", manifest_path, std::strerror(errno));
    }
    struct stat st {};
    const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    const uint64_t size = regular ? static_cast<uint64_t>(st.st_size) : 0;
    std::string error;
    bool ok = regular && size <= kMaxManifestBytes;
    if (ok) {
      text.resize(size);
      Files reader;
      reader.fds.push_back(fd);  // closes it
      ok = reader.read_at(0, 0, text.data(), size, error);
    } else {
      ::close(fd);
      error = !regular ? "not a regular file" : fmt::format("{} bytes, far more than any manifest", size);
    }
    DLB_REQUIRE(ok, "cannot read {} ({}); {}", manifest_path, error, kRepack);
  }
  const Manifest manifest = parse_manifest(manifest_path, text);
  class_names_ = manifest.classes;
  const auto num_classes = static_cast<int64_t>(class_names_.size());

  shard_start_.push_back(0);
  for (size_t k = 0; k < manifest.shards.size(); ++k) {
    const auto shard = static_cast<int64_t>(k);
    const std::string name = shard_file_name(shard);
    const std::string path = join_path(dir, name);
    shard_paths_.push_back(path);
    const uint64_t want_records = manifest.shards[k].first, want_bytes = manifest.shards[k].second;

    uint64_t size = 0;
    if (memory != nullptr) {
      auto it = memory->find(name);
      DLB_REQUIRE(it != memory->end(), "{} is missing (listed in {}); {}", path, manifest_path, kRepack);
      files_->memory.push_back(std::move(it->second));
      size = files_->memory.back().size();
    } else {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
      if (fd < 0) {
        if (errno == ENOENT)
          throw_user_error("{} is missing (listed in {}); {}", path, manifest_path, kRepack);
        throw_user_error("cannot open {} ({}); check its permissions", path, std::strerror(errno));
      }
      files_->fds.push_back(fd);
      struct stat st {};
      DLB_REQUIRE(::fstat(fd, &st) == 0 && S_ISREG(st.st_mode), "{} is not a regular file; {}", path,
                  kRepack);
      size = static_cast<uint64_t>(st.st_size);
    }
    files_->sizes.push_back(size);
    std::string error;
    auto read = [&](uint64_t offset, uint64_t bytes, std::string& out, const char* what) {
      out.resize(bytes);
      DLB_REQUIRE(files_->read_at(shard, offset, out.data(), bytes, error),
                  "cannot read the {} of {} ({}); {}", what, path, error, kRepack);
    };

    std::string header;
    if (size >= kFileMagic.size()) {
      read(0, kFileMagic.size(), header, "header");
      DLB_REQUIRE(header == kFileMagic, "{} is not a dlbench shard file (bad magic '{}'); {}", path,
                  printable(header), kRepack);
    }
    DLB_REQUIRE(size >= want_bytes, "{} is truncated: {} bytes, {} says {}; {}", path, size, manifest_path,
                want_bytes, kRepack);
    DLB_REQUIRE(size == want_bytes, "{} is {} bytes, {} says {}: it was changed or replaced; {}", path, size,
                manifest_path, want_bytes, kRepack);
    DLB_REQUIRE(size >= kHeaderBytes + kFooterBytes, "{} is {} bytes, too short for a shard file; {}", path,
                size, kRepack);
    read(0, kHeaderBytes, header, "header");
    const uint32_t version = get_u32(header.data() + 8), number = get_u32(header.data() + 12);
    DLB_REQUIRE(version == kVersion, "{}: shard format version {}, this dlbench reads version {}; {}", path,
                version, kVersion, kRepack);
    DLB_REQUIRE(number == k, "{} says it is shard {} (a shard file of another set, or renamed?); {}", path,
                number, kRepack);

    std::string footer;
    read(size - kFooterBytes, kFooterBytes, footer, "footer");
    DLB_REQUIRE(std::string_view(footer).substr(24) == kFooterMagic,
                "{}: no index footer at its end (bad footer magic '{}'): truncated or damaged; {}", path,
                printable(std::string_view(footer).substr(24)), kRepack);
    const uint32_t footer_crc = get_u32(footer.data() + 20);
    DLB_REQUIRE(footer_crc == crc32_of(0, footer.data(), 20),
                "{}: footer CRC mismatch: the file is damaged; {}", path, kRepack);
    const uint64_t index_offset = get_u64(footer.data()), count = get_u64(footer.data() + 8);
    const uint32_t index_crc = get_u32(footer.data() + 16);
    DLB_REQUIRE(count == want_records, "{} holds {} records, {} says {}; {}", path, count, manifest_path,
                want_records, kRepack);
    DLB_REQUIRE(index_offset >= kHeaderBytes && index_offset <= size - kFooterBytes,
                "{}: its footer puts the index at offset {}, outside the file ({} bytes); {}", path,
                index_offset, size, kRepack);
    const uint64_t index_bytes = size - kFooterBytes - index_offset;
    DLB_REQUIRE(count <= index_bytes / kIndexEntryBytes,
                "{}: an index of {} bytes cannot hold {} records: the file is damaged; {}", path, index_bytes,
                count, kRepack);
    std::string index;
    read(index_offset, index_bytes, index, "index");
    const uint32_t computed = crc32_of(0, index.data(), index.size());
    DLB_REQUIRE(computed == index_crc, "{}: index CRC mismatch (stored {:08x}, computed {:08x}): damaged; {}",
                path, index_crc, computed, kRepack);

    const size_t first = labels_.size();
    offsets_.reserve(first + count);
    payload_bytes_.reserve(first + count);
    labels_.reserve(first + count);
    names_.reserve(first + count);
    uint64_t pos = 0, expected_offset = kHeaderBytes;
    for (uint64_t j = 0; j < count; ++j) {
      DLB_REQUIRE(index_bytes - pos >= kIndexEntryBytes, "{}: the index ends inside entry {}; {}", path, j,
                  kRepack);
      const char* e = index.data() + pos;
      const uint64_t offset = get_u64(e), payload = get_u64(e + 8);
      const auto label = static_cast<int32_t>(get_u32(e + 16));
      const uint64_t name_bytes = get_u32(e + 20);
      pos += kIndexEntryBytes;
      DLB_REQUIRE(name_bytes <= kMaxShardNameBytes && name_bytes <= index_bytes - pos,
                  "{}: index entry {} gives a name of {} bytes, past the index; {}", path, j, name_bytes,
                  kRepack);
      std::string record_name(index.data() + pos, name_bytes);
      pos += name_bytes;
      DLB_REQUIRE(offset == expected_offset,
                  "{}: the index puts record {} at offset {}, where the records before it end at {}; {}",
                  path, j, offset, expected_offset, kRepack);
      DLB_REQUIRE(
          payload <= index_offset &&
              expected_offset + kRecordHeaderBytes + name_bytes + payload + kRecordCrcBytes <= index_offset,
          "{}: record {} ({}) of {} payload bytes runs past the records into the index; {}", path, j,
          printable(record_name), payload, kRepack);
      DLB_REQUIRE(label >= 0 && label < num_classes,
                  "{}: record {} ({}) has label {}, outside the {} classes of {}; {}", path, j,
                  printable(record_name), label, num_classes, manifest_path, kRepack);
      expected_offset += kRecordHeaderBytes + name_bytes + payload + kRecordCrcBytes;
      offsets_.push_back(offset);
      payload_bytes_.push_back(payload);
      labels_.push_back(label);
      names_.push_back(std::move(record_name));
    }
    DLB_REQUIRE(pos == index_bytes, "{}: the index has {} bytes after its {} entries; {}", path,
                index_bytes - pos, count, kRepack);
    DLB_REQUIRE(expected_offset == index_offset,
                "{}: the records end at offset {} but the index starts at {}; {}", path, expected_offset,
                index_offset, kRepack);
    shard_start_.push_back(static_cast<int64_t>(labels_.size()));
  }
}

void ShardSet::check_index(int64_t i) const {
  DLB_CHECK(i >= 0 && i < size(), "record {} of a shard set of {}", i, size());
}

int64_t ShardSet::shard_of(int64_t i) const {
  // The last shard whose first record is <= i (empty shards share their start with the next one).
  const auto it = std::upper_bound(shard_start_.begin(), shard_start_.end(), i);
  return static_cast<int64_t>(it - shard_start_.begin()) - 1;
}

int32_t ShardSet::label(int64_t i) const {
  check_index(i);
  return labels_[static_cast<size_t>(i)];
}

const std::string& ShardSet::name(int64_t i) const {
  check_index(i);
  return names_[static_cast<size_t>(i)];
}

uint64_t ShardSet::payload_bytes(int64_t i) const {
  check_index(i);
  return payload_bytes_[static_cast<size_t>(i)];
}

std::string ShardSet::where(int64_t i) const {
  check_index(i);
  const int64_t s = shard_of(i);
  return fmt::format("{} record {} ({})", shard_paths_[static_cast<size_t>(s)],
                     i - shard_start_[static_cast<size_t>(s)], printable(names_[static_cast<size_t>(i)]));
}

bool ShardSet::read(int64_t i, std::vector<uint8_t>& bytes, std::string& error) const {
  check_index(i);
  const auto r = static_cast<size_t>(i);
  const std::string& name = names_[r];
  const uint64_t payload = payload_bytes_[r];
  const uint64_t prefix = kRecordHeaderBytes + name.size();
  const uint64_t total = prefix + payload + kRecordCrcBytes;
  bytes.resize(total);
  std::string io_error;
  if (!files_->read_at(shard_of(i), offsets_[r], bytes.data(), total, io_error)) {
    error = fmt::format("{}: {}", where(i), io_error);
    return false;
  }
  const char* p = reinterpret_cast<const char*>(bytes.data());
  const uint32_t magic = get_u32(p), name_bytes = get_u32(p + 8);
  const auto label = static_cast<int32_t>(get_u32(p + 4));
  const uint64_t stored_payload = get_u64(p + 12);
  std::string mismatch;
  if (magic != kRecordMagic)
    mismatch = fmt::format("bad record magic 0x{:08x}", magic);
  else if (label != labels_[r])
    mismatch = fmt::format("its header gives label {}, the index {}", label, labels_[r]);
  else if (name_bytes != name.size() || std::string_view(p + kRecordHeaderBytes, name_bytes) != name)
    mismatch = "its header gives another name than the index";
  else if (stored_payload != payload)
    mismatch = fmt::format("its header gives {} payload bytes, the index {}", stored_payload, payload);
  if (!mismatch.empty()) {
    error = fmt::format("{}: the record disagrees with the index ({}): the file is damaged; {}", where(i),
                        mismatch, kRepack);
    return false;
  }
  const uint32_t stored = get_u32(p + total - kRecordCrcBytes);
  const uint32_t computed = crc32_of(0, p, total - kRecordCrcBytes);
  if (stored != computed) {
    error = fmt::format("{}: CRC mismatch (stored {:08x}, computed {:08x}): the file is damaged; {}",
                        where(i), stored, computed, kRepack);
    return false;
  }
  std::memmove(bytes.data(), bytes.data() + prefix, payload);
  bytes.resize(payload);
  return true;
}

}  // namespace dlbench
