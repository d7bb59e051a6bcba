#include "data/token_writer.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <vector>

#include "core/status.h"
#include "data/token_file.h"

namespace dlbench {

static_assert(std::endian::native == std::endian::little, "token files are little endian: add byte swaps");

TokenFileWriter::TokenFileWriter(std::string path, int64_t count) : file_(path), count_(count) {
  DLB_REQUIRE(count >= 1 && count <= std::numeric_limits<int32_t>::max(),
              "{}: {} tokens; an llm.c token file holds 1 to {} (its header's count is an int32)", path,
              count, std::numeric_limits<int32_t>::max());
  std::array<int32_t, llmc::kHeaderInts> header{};
  header[0] = llmc::kMagicGpt2;
  header[1] = llmc::kVersionGpt2;
  header[2] = static_cast<int32_t>(count);
  file_.write(header.data(), sizeof(header));
}

void TokenFileWriter::append(std::span<const uint16_t> tokens) {
  DLB_CHECK(written_ + static_cast<int64_t>(tokens.size()) <= count_, "{} tokens into a file of {} in {}",
            written_ + static_cast<int64_t>(tokens.size()), count_, path());
  file_.write(tokens.data(), tokens.size_bytes());
  written_ += static_cast<int64_t>(tokens.size());
}

void TokenFileWriter::append_bytes(std::span<const uint8_t> bytes) {
  constexpr size_t kChunk = size_t{1} << 16;
  std::vector<uint16_t> tokens;
  for (size_t at = 0; at < bytes.size(); at += kChunk) {
    const std::span<const uint8_t> part = bytes.subspan(at, std::min(kChunk, bytes.size() - at));
    tokens.assign(part.begin(), part.end());
    append(tokens);
  }
}

void TokenFileWriter::commit() {
  DLB_CHECK(written_ == count_, "{} of {} tokens written to {}", written_, count_, path());
  file_.commit();
}

}  // namespace dlbench
