#include "app/tokenize_command.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "core/file_paths.h"
#include "core/status.h"
#include "data/token_writer.h"

namespace dlbench {

namespace fs = std::filesystem;

namespace {

// Bytes of every input, each checked to be a readable file before anything is written.
int64_t total_bytes(const std::vector<std::string>& inputs) {
  int64_t total = 0;
  for (const std::string& path : inputs) {
    std::error_code ec;
    const auto type = fs::status(path, ec).type();
    DLB_REQUIRE(type != fs::file_type::not_found, "tokenize: {} not found; check the path", path);
    DLB_REQUIRE(type == fs::file_type::regular, "tokenize: {} is not a regular file", path);
    const auto size = fs::file_size(path, ec);
    DLB_REQUIRE(!ec, "tokenize: cannot read {}: {}", path, ec.message());
    total += static_cast<int64_t>(size);
  }
  return total;
}

// The val split's tokens: the fraction of the text rounded to the nearest token, at least one and leaving
// train at least one.
int64_t val_tokens(int64_t total, double fraction) {
  const auto val = static_cast<int64_t>(std::llround(static_cast<double>(total) * fraction));
  return std::clamp<int64_t>(val, 1, total - 1);
}

// Streams the inputs, in order, into the train writer and then the val one; UserError if an input's
// size changed since it was measured (the header's counts would be wrong).
void write_tokens(const std::vector<std::string>& inputs, TokenFileWriter& train, TokenFileWriter& val) {
  std::vector<uint8_t> chunk(size_t{1} << 20);
  int64_t to_train = train.count(), to_val = val.count();
  for (const std::string& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    DLB_REQUIRE(in, "tokenize: cannot open {}: {}", path, std::strerror(errno));
    while (in) {
      in.read(reinterpret_cast<char*>(chunk.data()), static_cast<std::streamsize>(chunk.size()));
      const auto got = static_cast<int64_t>(in.gcount());
      DLB_REQUIRE(!in.bad(), "tokenize: cannot read {}: {}", path, std::strerror(errno));
      DLB_REQUIRE(got <= to_train + to_val,
                  "tokenize: {} grew while it was read; run again on a file at rest", path);
      const std::span<const uint8_t> bytes(chunk.data(), static_cast<size_t>(got));
      const int64_t into_train = std::min(got, to_train);
      train.append_bytes(bytes.first(static_cast<size_t>(into_train)));
      val.append_bytes(bytes.subspan(static_cast<size_t>(into_train)));
      to_train -= into_train;
      to_val -= got - into_train;
    }
  }
  DLB_REQUIRE(to_train == 0 && to_val == 0,
              "tokenize: the inputs shrank while they were read; run again on "
              "files at rest");
}

std::string percent(double fraction) { return fmt::format("{:g}%", 100 * fraction); }

}  // namespace

void run_tokenize(const TokenizeOptions& o) {
  DLB_REQUIRE(!o.inputs.empty(), "tokenize: no input files; name the text files to tokenise");
  DLB_REQUIRE(o.val_fraction > 0 && o.val_fraction <= 0.5,
              "--val-fraction {}: choose a fraction in (0, 0.5] of the text for the val split",
              o.val_fraction);
  const int64_t total = total_bytes(o.inputs);
  DLB_REQUIRE(total > 0, "tokenize: the input is empty ({} file{} of 0 bytes); nothing to tokenise",
              o.inputs.size(), o.inputs.size() == 1 ? "" : "s");
  DLB_REQUIRE(total >= 2, "tokenize: the input is 1 byte; train and val need at least one token each");
  const std::string train_path = (fs::path(o.output_dir) / "train.bin").string();
  const std::string val_path = (fs::path(o.output_dir) / "val.bin").string();
  std::vector<PathUse> uses;
  for (const std::string& input : o.inputs) uses.push_back({"FILES", input, PathRole::reads_file});
  uses.push_back({"-o (train.bin)", train_path, PathRole::writes_file});
  uses.push_back({"-o (val.bin)", val_path, PathRole::writes_file});
  check_path_uses(uses);
  std::error_code ec;
  DLB_REQUIRE(!fs::exists(o.output_dir, ec) || fs::is_directory(o.output_dir, ec),
              "tokenize: -o {} exists and is not a directory", o.output_dir);
  if (!o.force)
    for (const std::string& path : {train_path, val_path})
      DLB_REQUIRE(!fs::exists(path, ec), "tokenize: {} exists; pass --force to replace it", path);

  const int64_t val = val_tokens(total, o.val_fraction), train = total - val;
  fs::create_directories(o.output_dir, ec);
  DLB_REQUIRE(!ec, "tokenize: cannot create -o {}: {}", o.output_dir, ec.message());
  TokenFileWriter train_file(train_path, train), val_file(val_path, val);
  write_tokens(o.inputs, train_file, val_file);
  train_file.commit();
  val_file.commit();
  std::printf(
      "tokenize: %lld bytes of %zu file%s -> %s: %lld train tokens, %s: %lld val tokens (byte-level, "
      "vocabulary 256; val = the last %s of the text by position, the files in the order given)\n",
      static_cast<long long>(total), o.inputs.size(), o.inputs.size() == 1 ? "" : "s", train_path.c_str(),
      static_cast<long long>(train), val_path.c_str(), static_cast<long long>(val),
      percent(o.val_fraction).c_str());
}

}  // namespace dlbench
