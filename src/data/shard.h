// Packed shards of encoded images (what RecordIO / TFRecord are for): `dlbench pack` reads an image
// folder once and writes a few large files, which the loader then reads with one pread per sample instead
// of one open/read/close per small file.
//
// A shard set is a directory DST holding shard-00000.dlbs, shard-00001.dlbs, ... and a text `manifest`.
// All integers are little-endian and fixed width; every CRC is zlib's crc32 (initial value 0).
//
// manifest (UTF-8 text, '\n' line ends; one line per item, the last line checksums all bytes before it):
//   dlbench shard set 1                    format name and version
//   classes N                              then N lines `class NAME` (label i = the i-th NAME)
//   shards M                               then M lines `shard shard-0000k.dlbs RECORDS BYTES`, k = 0..M-1
//   records TOTAL                          the sum of RECORDS
//   crc32 XXXXXXXX                         8 lowercase hex digits: crc32 of every byte before this line
//
// shard file:
//   header  16 bytes: "DLBSHARD" (8) | u32 version = 1 | u32 shard number k (as in its name)
//   records, back to back from offset 16, each:
//           u32 magic 0x52424c44 ("DLBR") | i32 label | u32 name length | u64 payload length   (20 bytes)
//           name bytes (the source file's relative path, for messages) | payload bytes (opaque, e.g. JPEG)
//           u32 crc32 over the 20 header bytes + name + payload
//   index   at index_offset (= the end of the last record), one entry per record in order:
//           u64 record offset | u64 payload length | i32 label | u32 name length | name bytes
//   footer  32 bytes at the end: u64 index_offset | u64 record count | u32 crc32 of the index bytes |
//           u32 crc32 of the 20 footer bytes before it | "DLBINDEX" (8)
//
// The index repeats each record's label, name and length so that a reader learns everything but the payloads
// from the manifest and the index alone; the record header and CRC are checked again when a record is read.
// A record goes to the current shard unless that would make the shard file (header, records, index and
// footer) larger than shard_bytes; a record that alone is larger goes into a shard of its own.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dlbench {

// A file to pack: its path on disk, the name recorded for messages (its path relative to the data set's
// root, usually CLASS/FILE.jpg) and its label, an index into the class names.
struct ShardInput {
  std::string path;
  std::string name;
  int32_t label = 0;
};

struct PackResult {
  int64_t records = 0, shards = 0;
  int64_t bytes = 0;  // on disk: every shard file and the manifest
  int64_t skipped = 0;
  std::vector<int64_t> class_records;        // records packed per label
  std::vector<std::string> skipped_paths;    // the inputs that could not be read, in input order
  std::vector<std::string> skipped_reasons;  // why, one per skipped path ("empty file", "No such file...")
};

// Packs `files` (read from disk, bytes kept as they are) into the shard set DST, in the order given. Files
// that cannot be read (missing, unreadable, a directory, zero bytes) are skipped, counted and named in the
// result unless `strict`, where the first one throws UserError naming its path. The set is built in a
// temporary folder beside DST and renamed into place when complete (data/staged_folder.h), so a failure
// (UserError for an unwritable DST, a full disk, nothing readable to pack, an exception thrown by
// `progress`...) leaves nothing behind: DST either holds the complete new set or nothing new. DST may exist
// but must be an empty directory (else UserError). Labels must lie in [0, class_names.size()); class names
// must be non-empty and hold no line break; names at most kMaxShardNameBytes bytes (all UserError).
// `progress(done, total)` is called after each input file; it may throw to stop the pack (a signal:
// core/signals.h).
PackResult pack_shards(const std::vector<ShardInput>& files, const std::vector<std::string>& class_names,
                       const std::string& dst, size_t shard_bytes, bool strict,
                       const std::function<void(int64_t done, int64_t total)>& progress = {});

// The same into `folder`, a new empty folder the caller builds and renames into place itself (pack of
// ROOT/train and ROOT/val builds both in one); messages name the files as under `dst`.
PackResult write_shard_set(const std::vector<ShardInput>& files, const std::vector<std::string>& class_names,
                           const std::string& folder, const std::string& dst, size_t shard_bytes, bool strict,
                           const std::function<void(int64_t done, int64_t total)>& progress = {});

inline constexpr size_t kMaxShardNameBytes = 4096;

// Whether `path` is a directory holding a shard set manifest (never throws).
bool is_shard_set(const std::string& path);

// The file names inside a shard set.
std::string shard_file_name(int64_t shard);  // "shard-00003.dlbs"
inline constexpr const char* kShardManifestName = "manifest";

// A shard set opened for reading. The manifest and every shard's header, footer and index are read and
// checked at open (UserError, one line naming the file and what is wrong: missing shard, bad magic,
// truncated, index CRC mismatch, counts that disagree with the manifest, a label outside the classes).
// Records are read on demand with pread on file descriptors kept open (one per shard), so read() may be
// called from many threads at once. Record i is the i-th record of the set: shards in order, records in
// shard order, which is the order pack_shards was given its (readable) files in.
class ShardSet {
 public:
  explicit ShardSet(const std::string& dir);
  // The same checks and reads on a shard set held in memory: `files` maps file names inside the set
  // ("manifest", "shard-00000.dlbs", ...) to their bytes; `dir` is used only in messages. For tests and
  // the fuzzer.
  static ShardSet from_memory(const std::string& dir, std::map<std::string, std::string> files);

  ~ShardSet();
  ShardSet(ShardSet&&) noexcept;
  ShardSet& operator=(ShardSet&&) noexcept;
  ShardSet(const ShardSet&) = delete;
  ShardSet& operator=(const ShardSet&) = delete;

  int64_t size() const { return static_cast<int64_t>(labels_.size()); }
  int64_t num_shards() const { return static_cast<int64_t>(shard_paths_.size()); }
  const std::string& dir() const { return dir_; }
  // Record i's label, source name and payload size; i outside [0, size()) is a caller bug (dlbench::Error).
  int32_t label(int64_t i) const;
  const std::string& name(int64_t i) const;
  uint64_t payload_bytes(int64_t i) const;
  const std::vector<std::string>& class_names() const { return class_names_; }
  // "DST/shard-00003.dlbs record 17 (class/file.jpg)" for messages: 17 counts from 0 within that shard.
  std::string where(int64_t i) const;
  // Record i's payload into `bytes` (resized to fit); false and `error` set (naming where()) on a CRC
  // mismatch, a record header that disagrees with the index, or a failed or short read. Never throws for
  // bad data (an i outside [0, size()) is a caller bug and throws dlbench::Error).
  bool read(int64_t i, std::vector<uint8_t>& bytes, std::string& error) const;

 private:
  struct Files;  // the open shard files (descriptors, or bytes for from_memory)
  ShardSet();
  void open(const std::string& dir, std::map<std::string, std::string>* memory);
  int64_t shard_of(int64_t i) const;
  void check_index(int64_t i) const;

  std::string dir_;
  std::vector<std::string> class_names_;
  std::vector<std::string> shard_paths_;  // DST/shard-0000k.dlbs, for messages
  std::vector<int64_t> shard_start_;      // record number of each shard's first record; one more at the end
  std::vector<uint64_t> offsets_;         // per record: offset of its header in its shard file
  std::vector<uint64_t> payload_bytes_;
  std::vector<int32_t> labels_;
  std::vector<std::string> names_;
  std::unique_ptr<Files> files_;
};

}  // namespace dlbench
