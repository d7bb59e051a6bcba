#include "data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/status.h"

namespace dlbench {
namespace {

// Both formats store tokens and header little endian; this reader copies them as they lie in memory.
static_assert(std::endian::native == std::endian::little, "token files are little endian: add byte swaps");

constexpr const char* kRemedy = "re-create it with `dlbench tokenize` or the script that made it";

// Where the tokens lie in a file's bytes.
struct Layout {
  TokenFileFormat format = TokenFileFormat::raw_uint16;
  int64_t header_bytes = 0;
  int token_bytes = 2;
  int64_t count = 0;
};

int32_t header_int(std::span<const uint8_t> bytes, int i) {
  int32_t v = 0;
  std::memcpy(&v, bytes.data() + 4 * i, 4);
  return v;
}

// Whether the bytes start as an llm.c header does: a known magic, or (a header with a magic this reader
// does not know) header[3..255] all zero, as write_datafile leaves them. 506 zero tokens in a row never
// occur in a raw file of real text, so a raw file is not mistaken for a header.
bool starts_with_llmc_header(std::span<const uint8_t> bytes) {
  if (bytes.size() < static_cast<size_t>(llmc::kHeaderBytes)) return false;
  const int32_t magic = header_int(bytes, 0);
  if (magic == llmc::kMagicGpt2 || magic == llmc::kMagicLlama3) return true;
  for (int i = 3; i < llmc::kHeaderInts; ++i)
    if (header_int(bytes, i) != 0) return false;
  return true;
}

Layout llmc_layout(const std::string& path, std::span<const uint8_t> bytes) {
  const auto size = static_cast<int64_t>(bytes.size());
  DLB_REQUIRE(size > 0, "{} is empty: it holds no llm.c header and no tokens; {}", path, kRemedy);
  DLB_REQUIRE(size >= llmc::kHeaderBytes,
              "{} is truncated: {} bytes, shorter than llm.c's {}-byte header; {}", path, size,
              llmc::kHeaderBytes, kRemedy);
  const int32_t magic = header_int(bytes, 0), version = header_int(bytes, 1), count = header_int(bytes, 2);
  Layout layout{TokenFileFormat::llmc, llmc::kHeaderBytes, 2, count};
  if (magic == llmc::kMagicGpt2) {
    DLB_REQUIRE(version == llmc::kVersionGpt2,
                "{}: llm.c magic {} with version {}; this reader knows version {} (uint16 tokens); {}", path,
                magic, version, llmc::kVersionGpt2, kRemedy);
  } else if (magic == llmc::kMagicLlama3) {
    DLB_REQUIRE(version == llmc::kVersionLlama3,
                "{}: llm.c magic {} with version {}; this reader knows version {} (uint32 tokens); {}", path,
                magic, version, llmc::kVersionLlama3, kRemedy);
    layout.token_bytes = 4;
  } else {
    throw_user_error(
        "{}: wrong magic number {} in its llm.c header; expected {} (GPT-2, uint16 tokens) or {} (LLaMA-3, "
        "uint32 tokens); {}",
        path, magic, llmc::kMagicGpt2, llmc::kMagicLlama3, kRemedy);
  }
  DLB_REQUIRE(count != 0, "{} holds no tokens: its llm.c header's token count is 0; {}", path, kRemedy);
  DLB_REQUIRE(count > 0, "{}: its llm.c header's token count is {}, negative: the header is damaged; {}",
              path, count, kRemedy);
  const int64_t expected = llmc::kHeaderBytes + int64_t{count} * layout.token_bytes;
  DLB_REQUIRE(
      size == expected,
      "{}: its llm.c header says {} tokens ({} bytes with the header) but the file has {} bytes: {}; {}",
      path, count, expected, size, size < expected ? "it is truncated" : "there is data beyond them",
      kRemedy);
  return layout;
}

Layout raw_layout(const std::string& path, std::span<const uint8_t> bytes) {
  const auto size = static_cast<int64_t>(bytes.size());
  DLB_REQUIRE(size > 0, "{} is empty: it holds no tokens; {}", path, kRemedy);
  DLB_REQUIRE(
      size % 2 == 0,
      "{} has an odd length ({} bytes) and no llm.c header: nanoGPT token files hold uint16 tokens, 2 "
      "bytes each; the file is truncated or not a token file; {}",
      path, size, kRemedy);
  return Layout{TokenFileFormat::raw_uint16, 0, 2, size / 2};
}

Layout find_layout(const std::string& path, std::span<const uint8_t> bytes, TokenFileFormat requested) {
  const bool llmc = requested == TokenFileFormat::llmc ||
                    (requested == TokenFileFormat::automatic && starts_with_llmc_header(bytes));
  return llmc ? llmc_layout(path, bytes) : raw_layout(path, bytes);
}

}  // namespace

TokenFile TokenFile::open(const std::string& path, int64_t vocab_size, TokenFileFormat format) {
  std::error_code ec;
  const auto type = std::filesystem::status(path, ec).type();
  DLB_REQUIRE(type != std::filesystem::file_type::not_found, "{} not found; check the path", path);
  DLB_REQUIRE(type != std::filesystem::file_type::directory, "{} is a directory, not a token file", path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DLB_REQUIRE(fd >= 0, "cannot open {}: {}; check that the file is readable", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    throw_user_error("cannot read {}: {}", path, std::strerror(error));
  }
  const auto size = static_cast<size_t>(st.st_size);
  std::shared_ptr<const void> owner;
  std::span<const uint8_t> bytes;
  if (size > 0) {  // mmap refuses a length of 0; an empty file is reported by the layout check
    void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int error = errno;
    ::close(fd);
    DLB_REQUIRE(mapped != MAP_FAILED, "cannot map {}: {}", path, std::strerror(error));
    owner =
        std::shared_ptr<const void>(mapped, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
    bytes = std::span<const uint8_t>(static_cast<const uint8_t*>(mapped), size);
  } else {
    ::close(fd);
  }
  return TokenFile(path, std::move(owner), bytes, vocab_size, format);
}

TokenFile TokenFile::from_bytes(std::string name, std::vector<uint8_t> bytes, int64_t vocab_size,
                                TokenFileFormat format) {
  auto buffer = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  const std::span<const uint8_t> view(*buffer);
  return TokenFile(std::move(name), std::move(buffer), view, vocab_size, format);
}

TokenFile::TokenFile(std::string path, std::shared_ptr<const void> owner, std::span<const uint8_t> bytes,
                     int64_t vocab_size, TokenFileFormat format)
    : path_(std::move(path)), owner_(std::move(owner)) {
  // Tokens are handed out as int32: a vocabulary beyond that range could not be.
  DLB_CHECK(vocab_size >= 1 && vocab_size <= int64_t{std::numeric_limits<int32_t>::max()} + 1,
            "vocabulary size {}", vocab_size);
  const Layout layout = find_layout(path_, bytes, format);
  format_ = layout.format;
  token_bytes_ = layout.token_bytes;
  count_ = layout.count;
  tokens_ = bytes.data() + layout.header_bytes;
  check_vocabulary(vocab_size);
}

// One pass for the largest token (a loop the compiler vectorises); the first token past the vocabulary is
// looked for only when there is one, to name it and its position.
void TokenFile::check_vocabulary(int64_t vocab_size) const {
  if (vocab_size > (int64_t{1} << (8 * token_bytes_)) - 1) return;  // every value the width holds is valid
  const auto max_of = [&](auto zero) {
    using T = decltype(zero);
    T max = 0;
    for (int64_t i = 0; i < count_; ++i) {
      T v;
      std::memcpy(&v, tokens_ + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
      max = std::max(max, v);
    }
    return static_cast<int64_t>(max);
  };
  const int64_t max = token_bytes_ == 2 ? max_of(uint16_t{0}) : max_of(uint32_t{0});
  if (max < vocab_size) return;
  int64_t at = 0;
  while (static_cast<int64_t>(static_cast<uint32_t>(token(at))) < vocab_size) ++at;
  throw_user_error(
      "{}: token {} at position {} is outside the vocabulary of {} tokens (0..{}); the file was tokenised "
      "for another vocabulary than this model's",
      path_, static_cast<uint32_t>(token(at)), at, vocab_size, vocab_size - 1);
}

std::string TokenFile::describe() const {
  if (format_ == TokenFileFormat::raw_uint16) return "nanoGPT raw uint16";
  return token_bytes_ == 2 ? fmt::format("llm.c v{}, uint16", llmc::kVersionGpt2)
                           : fmt::format("llm.c v{}, uint32", llmc::kVersionLlama3);
}

int32_t TokenFile::token(int64_t i) const {
  DLB_CHECK(i >= 0 && i < count_, "token {} of {}", i, count_);
  int32_t out = 0;
  read(i, std::span<int32_t>(&out, 1));
  return out;
}

void TokenFile::read(int64_t first, std::span<int32_t> out) const {
  const auto n = static_cast<int64_t>(out.size());
  DLB_CHECK(first >= 0 && n >= 0 && first + n <= count_, "tokens [{}, {}) of {} in {}", first, first + n,
            count_, path_);
  const uint8_t* p = tokens_ + first * token_bytes_;
  if (token_bytes_ == 2) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[static_cast<size_t>(i)] = v;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      uint32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      out[static_cast<size_t>(i)] = static_cast<int32_t>(v);
    }
  }
}

}  // namespace dlbench
