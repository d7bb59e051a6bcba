#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/file_io.h"
#include "core/status.h"

namespace dlbench {
namespace {

constexpr std::array<char, 8> kMagic = {'D', 'L', 'B', 'C', 'K', 'P', 'T', '\0'};
constexpr uint64_t kHeaderBytes = 8 + 4 + 8;  // magic, version, file size
constexpr uint64_t kChecksumBytes = 4;
constexpr size_t kChunkFloats = size_t{1} << 18;  // staging for byte-order conversion and CRC, 1 MiB

uint64_t crc_update(uint64_t crc, const void* data, size_t n) {
  return crc32_z(static_cast<uLong>(crc), static_cast<const Bytef*>(data), n);
}

// std::byteswap is C++23; only big-endian hosts need it.
constexpr uint32_t swap_bytes(uint32_t v) {
  return (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// ---- writing ----

// The payload between the header and the checksum, in bytes: known before writing so the header can
// carry the file size.
uint64_t file_size_of(const Checkpoint& c) {
  const auto array = [](const std::vector<float>& v) { return 8 + 4 * static_cast<uint64_t>(v.size()); };
  return kHeaderBytes + (8 + c.model.size()) + (8 + c.config_digest.size()) + (8 + c.settings.size()) + 8 +
         8 + 4 + array(c.parameters) + array(c.momentum) + array(c.buffers) +
         (c.second_moment.empty() ? 0 : array(c.second_moment)) + kChecksumBytes;
}

// Writes little-endian fields to an AtomicFile, keeping the CRC-32 of everything written. A failed write
// throws UserError and removes the temporary; the checkpoint at the path stays as it was.
class Writer {
 public:
  explicit Writer(AtomicFile& file) : file_(file) {}

  void bytes(const void* data, size_t n) {
    if (n == 0) return;
    file_.write(data, n);
    crc_ = crc_update(crc_, data, n);
  }
  void u32(uint32_t v) {
    std::array<unsigned char, 4> b{};
    for (size_t i = 0; i < 4; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    bytes(b.data(), b.size());
  }
  void u64(uint64_t v) {
    std::array<unsigned char, 8> b{};
    for (size_t i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    bytes(b.data(), b.size());
  }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f32(float v) { u32(std::bit_cast<uint32_t>(v)); }
  void string(const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  void floats(const std::vector<float>& v) {
    u64(v.size());
    if constexpr (std::endian::native == std::endian::little) {
      bytes(v.data(), v.size() * sizeof(float));
    } else {
      std::vector<uint32_t> chunk;
      for (size_t first = 0; first < v.size(); first += kChunkFloats) {
        const size_t n = std::min(kChunkFloats, v.size() - first);
        chunk.resize(n);
        for (size_t i = 0; i < n; ++i) chunk[i] = swap_bytes(std::bit_cast<uint32_t>(v[first + i]));
        bytes(chunk.data(), n * sizeof(uint32_t));
      }
    }
  }
  uint32_t crc() const { return static_cast<uint32_t>(crc_); }

 private:
  AtomicFile& file_;
  uint64_t crc_ = crc32_z(0, nullptr, 0);
};

// ---- reading ----

// Reads little-endian fields from the part of the file between header and checksum; any read past
// `end` means the file contradicts itself (its checksum having passed: a writer bug or a forged file).
class Reader {
 public:
  Reader(std::FILE* file, const std::string& path, uint64_t offset, uint64_t end)
      : file_(file), path_(path), offset_(offset), end_(end) {}

  void bytes(void* out, uint64_t n, const char* field) {
    if (n > end_ - offset_) malformed(fmt::format("field {} runs past the end of the file", field));
    if (n != 0 && std::fread(out, 1, static_cast<size_t>(n), file_) != n)
      throw_user_error("cannot read checkpoint {}: {}", path_,
                       std::feof(file_) ? "the file shrank while reading" : std::strerror(errno));
    offset_ += n;
  }
  uint32_t u32(const char* field) {
    std::array<unsigned char, 4> b{};
    bytes(b.data(), b.size(), field);
    uint32_t v = 0;
    for (size_t i = 0; i < 4; ++i) v |= uint32_t{b[i]} << (8 * i);
    return v;
  }
  uint64_t u64(const char* field) {
    std::array<unsigned char, 8> b{};
    bytes(b.data(), b.size(), field);
    uint64_t v = 0;
    for (size_t i = 0; i < 8; ++i) v |= uint64_t{b[i]} << (8 * i);
    return v;
  }
  int64_t i64(const char* field) { return static_cast<int64_t>(u64(field)); }
  float f32(const char* field) { return std::bit_cast<float>(u32(field)); }
  std::string string(const char* field) {
    const uint64_t n = u64(field);
    // Checked before allocating: a bad length must not turn into a huge allocation.
    if (n > end_ - offset_)
      malformed(fmt::format("field {} claims {} bytes, more than the file holds", field, n));
    std::string s(static_cast<size_t>(n), '\0');
    bytes(s.data(), n, field);
    return s;
  }
  std::vector<float> floats(const char* field) {
    const uint64_t n = u64(field);
    if (n > (end_ - offset_) / sizeof(float))
      malformed(fmt::format("field {} claims {} values, more than the file holds", field, n));
    std::vector<float> v(static_cast<size_t>(n));
    bytes(v.data(), n * sizeof(float), field);
    if constexpr (std::endian::native != std::endian::little)
      for (float& x : v) x = std::bit_cast<float>(swap_bytes(std::bit_cast<uint32_t>(x)));
    return v;
  }
  uint64_t offset() const { return offset_; }

  [[noreturn]] void malformed(const std::string& what) const {
    throw_user_error(
        "checkpoint {} is malformed: {}; it was not written by this dlbench: use another checkpoint", path_,
        what);
  }

 private:
  std::FILE* file_;
  const std::string& path_;
  uint64_t offset_, end_;
};

uint32_t le32(const unsigned char* b) {
  return uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
}
uint64_t le64(const unsigned char* b) { return uint64_t{le32(b)} | uint64_t{le32(b + 4)} << 32; }

// Checks magic, version and size against the file's header; returns the format version.
uint32_t check_header(std::FILE* file, const std::string& path, uint64_t size) {
  std::array<unsigned char, kHeaderBytes> header{};
  const size_t got = std::fread(header.data(), 1, header.size(), file);
  if (got < std::min<uint64_t>(size, header.size()))
    throw_user_error("cannot read checkpoint {}: {}", path, std::strerror(errno));
  const auto truncated = [&](uint64_t promised) {
    throw_user_error(
        "checkpoint {} is truncated: it has {} bytes{}; the save or copy was cut short: use a complete copy "
        "or "
        "start from scratch",
        path, size, promised != 0 ? fmt::format(" of the {} its header promises", promised) : std::string());
  };
  const size_t magic_seen = std::min<size_t>(got, kMagic.size());
  if (std::memcmp(header.data(), kMagic.data(), magic_seen) != 0)
    throw_user_error("{} is not a dlbench checkpoint (it does not start with \"DLBCKPT\"); check the path",
                     path);
  if (got < kHeaderBytes) truncated(0);  // empty, or a prefix of a header and nothing more

  const uint32_t version = le32(header.data() + 8);
  DLB_REQUIRE(version >= 1 && version <= kCheckpointVersion,
              "checkpoint {} has format version {}, this dlbench reads version {}; resume with the dlbench "
              "release that wrote it",
              path, version, kCheckpointVersion);
  const uint64_t promised = le64(header.data() + 12);
  if (size < promised) truncated(promised);
  DLB_REQUIRE(
      size == promised,
      "checkpoint {} has {} bytes, {} more than its header's {}; the file is damaged: use an intact copy "
      "or start from scratch",
      path, size, size - promised, promised);
  DLB_REQUIRE(size >= kHeaderBytes + kChecksumBytes,
              "checkpoint {} is malformed: its header gives a size of {} bytes", path, size);
  return version;
}

// Verifies the trailing CRC-32 over the whole file before any field is parsed.
void check_crc(std::FILE* file, const std::string& path, uint64_t size) {
  DLB_CHECK(std::fseek(file, 0, SEEK_SET) == 0, "seek in {}", path);
  std::vector<unsigned char> chunk(kChunkFloats * sizeof(float));
  uint64_t crc = crc32_z(0, nullptr, 0), left = size - kChecksumBytes;
  while (left > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, chunk.size()));
    if (std::fread(chunk.data(), 1, n, file) != n)
      throw_user_error("cannot read checkpoint {}: {}", path,
                       std::feof(file) ? "the file shrank while reading" : std::strerror(errno));
    crc = crc_update(crc, chunk.data(), n);
    left -= n;
  }
  std::array<unsigned char, 4> stored_bytes{};
  if (std::fread(stored_bytes.data(), 1, 4, file) != 4)
    throw_user_error("cannot read checkpoint {}: {}", path, std::strerror(errno));
  const uint32_t stored = le32(stored_bytes.data());
  DLB_REQUIRE(
      stored == static_cast<uint32_t>(crc),
      "checkpoint {} is damaged: checksum mismatch (stored {:08x}, computed {:08x}); use an intact copy or "
      "start from scratch",
      path, stored, static_cast<uint32_t>(crc));
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& c) {
  DLB_CHECK(c.momentum.empty() || c.momentum.size() == c.parameters.size(),
            "{} momentum values for {} parameters", c.momentum.size(), c.parameters.size());
  DLB_CHECK(c.second_moment.empty() || c.second_moment.size() == c.parameters.size(),
            "{} second-moment values for {} parameters", c.second_moment.size(), c.parameters.size());
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec)) {
    DLB_REQUIRE(!std::filesystem::exists(parent, ec),
                "cannot save checkpoint {}: {} is not a directory; choose another path", path,
                parent.string());
    throw_user_error(
        "cannot save checkpoint {}: directory {} does not exist; create it or choose another path", path,
        parent.string());
  }

  AtomicFile file(path);
  const uint64_t size = file_size_of(c);
  Writer out(file);
  out.bytes(kMagic.data(), kMagic.size());
  // Version 2 where there is no second moment (SGD): such a file is the same as before version 3.
  out.u32(c.second_moment.empty() ? 2 : kCheckpointVersion);
  out.u64(size);
  out.string(c.model);
  out.string(c.config_digest);
  out.string(c.settings);
  out.i64(c.step);
  out.i64(c.epoch);
  out.f32(c.loss_scale);
  out.floats(c.parameters);
  out.floats(c.momentum);
  out.floats(c.buffers);
  if (!c.second_moment.empty()) out.floats(c.second_moment);
  const uint32_t crc = out.crc();
  out.u32(crc);
  // Synced before the rename makes it the checkpoint: a crash leaves the previous one, never a torn file.
  file.commit();
}

Checkpoint load_checkpoint(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found)
    throw_user_error("checkpoint {} not found; check the path", path);
  DLB_REQUIRE(status.type() != std::filesystem::file_type::directory,
              "checkpoint {} is a directory, not a checkpoint file; check the path", path);
  File file(std::fopen(path.c_str(), "rb"));
  if (!file)
    throw_user_error("cannot open checkpoint {}: {}; check its permissions", path, std::strerror(errno));
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) throw_user_error("cannot read checkpoint {}: {}", path, ec.message());

  const uint32_t version = check_header(file.get(), path, size);
  check_crc(file.get(), path, size);

  DLB_CHECK(std::fseek(file.get(), static_cast<long>(kHeaderBytes), SEEK_SET) == 0, "seek in {}", path);
  Reader in(file.get(), path, kHeaderBytes, size - kChecksumBytes);
  Checkpoint c;
  c.model = in.string("model");
  c.config_digest = in.string("config_digest");
  if (version >= 2) c.settings = in.string("settings");
  c.step = in.i64("step");
  c.epoch = in.i64("epoch");
  c.loss_scale = in.f32("loss_scale");
  c.parameters = in.floats("parameters");
  c.momentum = in.floats("momentum");
  c.buffers = in.floats("buffers");
  if (version >= 3) c.second_moment = in.floats("second_moment");
  if (in.offset() != size - kChecksumBytes)
    in.malformed(fmt::format("{} unread bytes before the checksum", size - kChecksumBytes - in.offset()));
  if (!c.momentum.empty() && c.momentum.size() != c.parameters.size())
    in.malformed(fmt::format("{} momentum values for {} parameters", c.momentum.size(), c.parameters.size()));
  if (version >= 3 && c.second_moment.size() != c.parameters.size())
    in.malformed(fmt::format("{} second-moment values for {} parameters", c.second_moment.size(),
                             c.parameters.size()));
  return c;
}

void check_checkpoint_matches(const Checkpoint& c, const std::string& model, size_t n_parameters,
                              size_t n_buffers) {
  DLB_REQUIRE(
      c.model == model,
      "checkpoint is for {}, this run trains {}; resume with model {} or start without the checkpoint",
      c.model, model, c.model);
  const std::string written_with =
      c.config_digest.empty() ? "" : fmt::format(" (written with: {})", c.config_digest);
  DLB_REQUIRE(c.parameters.size() == n_parameters,
              "checkpoint of {} holds {} parameters, this run's {} has {}: it was written with another "
              "configuration{}; resume with that configuration or start without the checkpoint",
              c.model, c.parameters.size(), model, n_parameters, written_with);
  DLB_REQUIRE(
      c.buffers.size() == n_buffers,
      "checkpoint of {} holds {} buffer values (batch-norm statistics), this run's {} has {}: it was "
      "written with another configuration{}; resume with that configuration or start without the checkpoint",
      c.model, c.buffers.size(), model, n_buffers, written_with);
}

std::vector<std::string> check_checkpoint_settings(const Checkpoint& c, const std::string& now_text,
                                                   SettingsMismatch policy, const std::string& path) {
  if (c.settings.empty()) return {};
  const nlohmann::json saved = nlohmann::json::parse(c.settings, nullptr, /*allow_exceptions=*/false);
  DLB_REQUIRE(saved.is_object(), "checkpoint {} is malformed: its settings are not a JSON object", path);
  const nlohmann::json now = nlohmann::json::parse(now_text);
  // How the user would give a value back: "--batch-size 16", "--nesterov" / "no --nesterov".
  const auto shown = [](const std::string& key, const nlohmann::json& value) {
    if (key == "ranks") return fmt::format("{} rank{}", value.dump(), value == 1 ? "" : "s");
    if (key == "data") return fmt::format("data of {}", value.get<std::string>());
    if (value.is_boolean()) return value.get<bool>() ? key : "no " + key;
    if (value.is_array()) {
      std::string list;
      for (const auto& v : value) list += (list.empty() ? "" : ",") + v.dump();
      return key + " " + (list.empty() ? "(none)" : list);
    }
    return key + " " + (value.is_string() ? value.get<std::string>() : value.dump());
  };
  std::vector<std::string> differences;
  for (const auto& [key, value] : saved.items()) {
    const nlohmann::json mine = now.contains(key) ? now[key] : nlohmann::json(nullptr);
    if (mine == value) continue;
    const std::string was = shown(key, value), is = mine.is_null() ? "not " + key : shown(key, mine);
    DLB_REQUIRE(key != "--layout",
                "--resume {}: the checkpoint was written with {}, this run has {}; its weights are stored in "
                "that layout's order: resume with {}",
                path, was, is, was);
    DLB_REQUIRE(
        policy == SettingsMismatch::continue_anyway,
        "--resume {}: the checkpoint was written with {}, this run has {}; resume with {} to continue "
        "exactly where it stopped, or add --resume-anyway to go on with {}",
        path, was, is, was, is);
    differences.push_back(fmt::format("{} (the checkpoint's run had {})", is, was));
  }
  return differences;
}

}  // namespace dlbench
