// Checkpoints: the training state needed to resume a run exactly, in one self-checking file.
//
// File format, version 3 (version 1, without `settings`, and 2, without `second_moment`, are still read;
// a checkpoint without a second moment, SGD's, is written as version 2). Every integer and float is
// little-endian; floats are IEEE-754 binary32.
//
//   offset  size   field
//   0       8      magic, the bytes "DLBCKPT\0"
//   8       4      u32 format version (1)
//   12      8      u64 size of the whole file in bytes
//   20             string model           (u64 byte count, then the UTF-8 bytes, no terminator)
//                  string config_digest
//                  string settings        (version 2: a JSON object, flag -> value, of the run's settings)
//                  i64 step
//                  i64 epoch
//                  f32 loss_scale
//                  array parameters       (u64 element count, then that many f32)
//                  array momentum
//                  array buffers
//                  array second_moment    (version 3: AdamW's v; `momentum` holds its m)
//   size - 4  4    u32 CRC-32 (zlib's crc32, the gzip/PNG polynomial) of every byte before it
//
// The file size in the header lets a reader tell a truncated file (a copy cut short) from a damaged one
// (checksum mismatch) before it parses anything; the checksum is verified before any field is trusted.
// A new field or encoding needs a new version number; readers reject versions they do not know.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dlbench {

struct Checkpoint {
  std::string model;          // e.g. "resnet20"
  std::string config_digest;  // free text the trainer uses to describe shape-relevant config
  // The settings the run was started with that a resumed run must repeat to continue exactly (a JSON
  // object, flag -> value: train/config.h resume_settings, with the ranks and the data set's digest).
  // Empty in a version-1 file.
  std::string settings;
  int64_t step = 0, epoch = 0;
  float loss_scale = 1.f;
  std::vector<float> parameters;     // the flat FP32 parameter buffer
  std::vector<float> momentum;       // optimizer state: as long as parameters, or empty if there is none
  std::vector<float> buffers;        // non-trained state (batch-norm running mean/var)
  std::vector<float> second_moment;  // AdamW's v (momentum holds m), as long as parameters; empty for SGD
};

inline constexpr uint32_t kCheckpointVersion = 3;

// Writes `checkpoint` through an AtomicFile (core/file_io.h): a crash, a signal or a full disk leaves the
// previous file at `path` untouched, never a half-written one, and no temporary behind. UserError (naming the
// path) if the directory does not exist or is not writable, or a write fails. A momentum length other than 0
// or parameters.size() is a caller bug (dlbench::Error).
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);

// Reads a checkpoint written by save_checkpoint. UserError (naming the path) if the file is missing or
// unreadable, is not a dlbench checkpoint (bad magic), has an unsupported format version, is truncated,
// fails its checksum, or is internally inconsistent.
Checkpoint load_checkpoint(const std::string& path);

// UserError unless `checkpoint` fits this run: the same model, and parameter and buffer counts equal to
// the run's (a different count means another configuration, e.g. width or class count). The message
// names both sides: "checkpoint is for resnet50, this run trains resnet20; ...".
void check_checkpoint_matches(const Checkpoint& checkpoint, const std::string& model, size_t n_parameters,
                              size_t n_buffers);

// What a resumed run does with settings that differ from the checkpoint's.
enum class SettingsMismatch { refuse, continue_anyway };

// Compares the settings the checkpoint recorded with `now` (the same keys: flag -> value, "ranks", "data").
// A different --layout is always refused (the weights are stored in the layout's order); any other
// difference is refused naming the flag and both values unless `policy` is continue_anyway, which returns
// the differences, one line each, for the run to print. A version-1 checkpoint recorded none: nothing is
// checked. `path` is the checkpoint's, for the messages.
std::vector<std::string> check_checkpoint_settings(const Checkpoint& checkpoint, const std::string& now,
                                                   SettingsMismatch policy, const std::string& path);

}  // namespace dlbench
