#include "data/token_dataset.h"

#include <algorithm>
#include <filesystem>
#include <string_view>

#include "core/status.h"

namespace dlbench {

namespace fs = std::filesystem;

TokenDataset::TokenDataset(std::string name, std::vector<TokenFile> files, int64_t vocab_size)
    : name_(std::move(name)), files_(std::move(files)), vocab_size_(vocab_size) {
  DLB_CHECK(!files_.empty(), "token dataset {} without files", name_);
  int64_t end = 0;
  for (const TokenFile& file : files_) ends_.push_back(end += file.size());
}

TokenDataset TokenDataset::open(std::string name, const std::vector<std::string>& paths, int64_t vocab_size,
                                TokenFileFormat format) {
  std::vector<TokenFile> files;
  files.reserve(paths.size());
  for (const std::string& path : paths) files.push_back(TokenFile::open(path, vocab_size, format));
  return TokenDataset(std::move(name), std::move(files), vocab_size);
}

void TokenDataset::read(int64_t first, std::span<int32_t> out) const {
  const auto n = static_cast<int64_t>(out.size());
  DLB_CHECK(first >= 0 && first + n <= size(), "tokens [{}, {}) of {} in {}", first, first + n, size(),
            name_);
  // The file holding `first`, then each next one for as long as the range runs on.
  auto f = static_cast<size_t>(std::upper_bound(ends_.begin(), ends_.end(), first) - ends_.begin());
  for (int64_t done = 0; done < n; ++f) {
    const int64_t begin = f == 0 ? 0 : ends_[f - 1];
    const int64_t at = first + done;
    const int64_t take = std::min(n - done, ends_[f] - at);
    files_[f].read(at - begin, out.subspan(static_cast<size_t>(done), static_cast<size_t>(take)));
    done += take;
  }
}

namespace {

// An llm.c shard of `split`: NAME_split_NUMBER.bin or NAME_split.bin.
bool is_llmc_shard(std::string_view name, std::string_view split) {
  if (!name.ends_with(".bin")) return false;
  const std::string_view stem = name.substr(0, name.size() - 4);
  const std::string middle = fmt::format("_{}_", split), last = fmt::format("_{}", split);
  return stem.find(middle) != std::string_view::npos || stem.ends_with(last);
}

}  // namespace

TokenFiles find_token_files(const std::string& dir) {
  std::error_code ec;
  DLB_REQUIRE(fs::is_directory(dir, ec),
              "--data {}: no such directory (a token run reads train.bin and "
              "val.bin, or llm.c's *_train_*.bin and *_val_*.bin shards, from a directory)",
              dir);
  TokenFiles plain, shards;
  plain.format = TokenFileFormat::automatic;
  shards.format = TokenFileFormat::llmc;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(".") || !entry.is_regular_file(ec)) continue;  // hidden files, temporaries
    const std::string path = entry.path().string();
    if (name == "train.bin") plain.train.push_back(path);
    if (name == "val.bin") plain.val.push_back(path);
    if (is_llmc_shard(name, "train")) shards.train.push_back(path);
    if (is_llmc_shard(name, "val")) shards.val.push_back(path);
  }
  DLB_REQUIRE(!ec, "--data {}: cannot list the directory: {}", dir, ec.message());
  const bool has_plain = !plain.train.empty() || !plain.val.empty();
  const bool has_shards = !shards.train.empty() || !shards.val.empty();
  DLB_REQUIRE(!(has_plain && has_shards),
              "--data {}: holds both train.bin / val.bin and llm.c shards (*_train_*.bin); keep one kind in "
              "the directory",
              dir);
  TokenFiles found = has_shards ? std::move(shards) : std::move(plain);
  DLB_REQUIRE(!found.train.empty(),
              "--data {}: no training tokens: neither train.bin nor llm.c shards named *_train_*.bin or "
              "*_train.bin (make them with `dlbench tokenize FILES... -o {}`)",
              dir, dir);
  std::sort(found.train.begin(), found.train.end());
  std::sort(found.val.begin(), found.val.end());
  return found;
}

TokenData open_token_data(const std::string& dir, int64_t vocab_size) {
  const TokenFiles files = find_token_files(dir);
  const auto name_of = [&](const std::vector<std::string>& paths, const char* split) {
    return paths.size() == 1 ? paths[0] : fmt::format("{} ({} {} shards)", dir, paths.size(), split);
  };
  TokenData data{TokenDataset::open(name_of(files.train, "train"), files.train, vocab_size, files.format),
                 std::nullopt};
  if (!files.val.empty())
    data.val = TokenDataset::open(name_of(files.val, "val"), files.val, vocab_size, files.format);
  return data;
}

}  // namespace dlbench
