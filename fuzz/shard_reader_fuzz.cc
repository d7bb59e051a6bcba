// libFuzzer target for the shard set reader (src/data/shard.h): any bytes must give a UserError at open or
// a false from read(), never a crash, a leak, a hang or another exception.
//
// clang-format off
// fuzz-build: src/data/shard.cc src/data/staged_folder.cc src/core/status.cc src/core/file_io.cc src/core/signals.cc src/core/file_paths.cc -lfmt -lz
// clang-format on
// Build and run: tools/fuzz.sh shard_reader_fuzz SECONDS, or by hand from the repository root:
//   clang++-14 -std=c++20 -fsanitize=fuzzer,address,undefined -I src fuzz/shard_reader_fuzz.cc \
//     src/data/shard.cc src/core/status.cc src/core/file_io.cc src/core/log.cc -lfmt -lz
//   ./a.out -max_total_time=60 -rss_limit_mb=2048 [CORPUS_DIR]
// shard.cc needs only src/core/status.cc (throw_check_failure, behind DLB_CHECK) and src/core/file_io.cc
// (write_file_atomically, which pack_shards writes the manifest with); src/core/log.cc is not used by it
// and may be left out (the line above does).
//
// The shard set is opened from memory (ShardSet::from_memory), so nothing is written to disk. The first
// input byte says how the rest is used:
//   bits 0-1 = 0: the rest is shard-00000.dlbs; the harness writes a manifest that matches it (its size,
//                 and the record count its footer gives), so mutations reach the shard parser;
//            = 1: the rest is the manifest, then the shard files, separated by "|FILE|";
//            = 2, 3: the harness builds a valid one-shard set from the rest (records described by its bytes,
//                 see synthesize()), then damages its shard file as the bytes after the records say: from
//                 an empty corpus this reaches every check behind the magics and CRCs in seconds;
//   bit 2 = 1: the checksums are repaired after the damage (the footer's and the index's CRCs, and in
//              mode 2 the records' CRCs; in mode 1 the manifest's crc32 line), so that mutations get past
//              them to the checks behind;
//   bits 3-5:  modes 0 and 2: the manifest lists 1 + this many classes.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "data/shard.h"

namespace {

uint32_t crc_of(std::string_view s) {
  return static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(s.size())));
}
uint64_t get_u64(std::string_view s, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(s[at + static_cast<size_t>(i)]);
  return v;
}
void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void set_u32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// Footer: u64 index_offset | u64 count | u32 index crc | u32 footer crc | 8-byte magic.
void repair_footer(std::string& shard) {
  if (shard.size() < 48) return;
  const size_t footer = shard.size() - 32;
  const uint64_t index_offset = get_u64(shard, footer);
  if (index_offset <= footer)
    set_u32(shard, footer + 16, crc_of(std::string_view(shard).substr(index_offset, footer - index_offset)));
  set_u32(shard, footer + 20, crc_of(std::string_view(shard).substr(footer, 20)));
}

void repair_manifest(std::string& manifest) {
  const size_t last = manifest.rfind("crc32 ");
  if (last == std::string::npos) return;
  manifest.erase(last);
  manifest += fmt::format("crc32 {:08x}\n", crc_of(manifest));
}

std::string manifest_for(int classes, uint64_t records, uint64_t bytes) {
  std::string manifest = fmt::format("dlbench shard set 1\nclasses {}\n", classes);
  for (int c = 0; c < classes; ++c) manifest += fmt::format("class c{}\n", c);
  manifest += fmt::format("shards 1\nshard shard-00000.dlbs {} {}\nrecords {}\n", records, bytes, records);
  manifest += fmt::format("crc32 {:08x}\n", crc_of(manifest));
  return manifest;
}

// A valid shard file (the format of src/data/shard.h) from `in`: byte 0 % 8 records, each from the next
// bytes: label (% classes), name length (% 12), the name, payload length, the payload (zeros once `in` is
// used up). Then up to 8 damages of 3 bytes each: u16 position (% file size) and a byte to XOR there, or
// (XOR byte 0) a cut of the file at that position. `records` gets each record's offset and size.
std::string synthesize(std::string_view in, int classes, bool repair, uint64_t& count,
                       std::vector<std::pair<size_t, size_t>>& records) {
  size_t pos = 0;
  auto next = [&]() -> uint8_t { return pos < in.size() ? static_cast<uint8_t>(in[pos++]) : 0; };
  std::string shard = "DLBSHARD";
  put_u32(shard, 1);
  put_u32(shard, 0);
  std::string index;
  count = next() % 8;
  for (uint64_t r = 0; r < count; ++r) {
    const uint32_t label = next() % static_cast<uint32_t>(classes);
    std::string name(next() % 12, 'n');
    for (char& c : name) c = static_cast<char>(next());
    std::string payload(next(), '\0');
    for (char& c : payload) c = static_cast<char>(next());
    const size_t offset = shard.size();
    put_u64(index, offset);
    put_u64(index, payload.size());
    put_u32(index, label);
    put_u32(index, static_cast<uint32_t>(name.size()));
    index += name;
    put_u32(shard, 0x52424c44);
    put_u32(shard, label);
    put_u32(shard, static_cast<uint32_t>(name.size()));
    put_u64(shard, payload.size());
    shard += name;
    shard += payload;
    put_u32(shard, crc_of(std::string_view(shard).substr(offset)));
    records.emplace_back(offset, shard.size() - offset);
  }
  const size_t index_offset = shard.size();
  shard += index;
  std::string footer;
  put_u64(footer, index_offset);
  put_u64(footer, count);
  put_u32(footer, crc_of(index));
  put_u32(footer, crc_of(footer));
  footer += "DLBINDEX";
  shard += footer;

  for (int d = 0; d < 8 && pos + 3 <= in.size() && !shard.empty(); ++d) {
    const size_t at = (static_cast<size_t>(next()) | static_cast<size_t>(next()) << 8) % shard.size();
    const uint8_t x = next();
    if (x == 0)
      shard.resize(at);
    else
      shard[at] = static_cast<char>(shard[at] ^ x);
  }
  if (repair) {
    for (const auto& [offset, size] : records)
      if (offset + size <= shard.size())
        set_u32(shard, offset + size - 4, crc_of(std::string_view(shard).substr(offset, size - 4)));
    repair_footer(shard);
  }
  return shard;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const bool repair = (mode & 4) != 0;
  const int classes = 1 + ((mode >> 3) & 7);
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::map<std::string, std::string> files;
  if ((mode & 3) == 1) {
    constexpr std::string_view kSeparator = "|FILE|";
    std::vector<std::string> parts;
    size_t pos = 0;
    while (true) {
      const size_t next = rest.find(kSeparator, pos);
      parts.emplace_back(
          rest.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos));
      if (next == std::string_view::npos) break;
      pos = next + kSeparator.size();
    }
    if (repair) repair_manifest(parts[0]);
    files["manifest"] = std::move(parts[0]);
    for (size_t k = 1; k < parts.size(); ++k)
      files[dlbench::shard_file_name(static_cast<int64_t>(k - 1))] = std::move(parts[k]);
  } else {
    std::string shard;
    uint64_t count = 0;
    if ((mode & 3) == 0) {
      shard = std::string(rest);
      if (repair) repair_footer(shard);
      count = shard.size() >= 32 ? get_u64(shard, shard.size() - 24) : 0;
    } else {
      std::vector<std::pair<size_t, size_t>> records;
      shard = synthesize(rest, classes, repair, count, records);
    }
    files["manifest"] = manifest_for(classes, count, shard.size());
    files["shard-00000.dlbs"] = std::move(shard);
  }

  try {
    const dlbench::ShardSet set = dlbench::ShardSet::from_memory("fuzz", std::move(files));
    std::vector<uint8_t> bytes;
    std::string error;
    for (int64_t i = 0; i < set.size(); ++i) {
      if (set.label(i) < 0 || static_cast<size_t>(set.label(i)) >= set.class_names().size()) __builtin_trap();
      if (set.where(i).find('\n') != std::string::npos || set.name(i).size() > dlbench::kMaxShardNameBytes)
        __builtin_trap();
      if (set.read(i, bytes, error)) {
        if (bytes.size() != set.payload_bytes(i)) __builtin_trap();
      } else if (error.empty() || error.find('\n') != std::string::npos) {
        __builtin_trap();  // a failed read explains itself, on one line
      }
    }
  } catch (const dlbench::UserError& e) {
    if (std::strchr(e.what(), '\n') != nullptr) __builtin_trap();  // one line
  }
  return 0;
}
