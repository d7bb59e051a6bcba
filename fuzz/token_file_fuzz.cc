// libFuzzer target for the token file reader (src/data/token_file.h): any bytes must give a UserError of
// one line, or a file whose every token lies in the vocabulary and whose size agrees with the bytes; never
// a crash, a leak, a hang, a sanitizer report or another exception.
//
// fuzz-build: src/data/token_file.cc src/core/status.cc -lfmt
// Build and run: tools/fuzz.sh token_file_fuzz SECONDS, or by hand from the repository root:
//   clang++-14 -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I src \
//     fuzz/token_file_fuzz.cc src/data/token_file.cc src/core/status.cc -lfmt -o token_file_fuzz
// The file is read from memory (TokenFile::from_bytes), so nothing touches the disk. The first input
// byte picks the reading: bits 0-1 the format asked for (automatic, llmc, raw_uint16; 3 = automatic),
// bits 2-3 the vocabulary (256, 50257, 65536, 128256); bit 4 = 1: the rest is given an llm.c header of its
// own (bit 5: LLaMA-3's magic and version 7 instead of GPT-2's version 1) whose count is the rest's
// length in tokens, so that mutations reach the checks behind the header; the rest is the file's bytes.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/token_file.h"

namespace {

void put_i32(std::vector<uint8_t>& out, int32_t v) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<uint8_t>((static_cast<uint32_t>(v) >> (8 * i)) & 0xff));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dlbench;
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  constexpr TokenFileFormat kFormats[] = {TokenFileFormat::automatic, TokenFileFormat::llmc,
                                          TokenFileFormat::raw_uint16, TokenFileFormat::automatic};
  constexpr int64_t kVocabularies[] = {256, 50257, 65536, 128256};
  const TokenFileFormat format = kFormats[mode & 3];
  const int64_t vocab = kVocabularies[(mode >> 2) & 3];
  std::vector<uint8_t> bytes;
  const size_t rest = size - 1;
  if (mode & 16) {
    const bool llama = (mode & 32) != 0;
    put_i32(bytes, llama ? llmc::kMagicLlama3 : llmc::kMagicGpt2);
    put_i32(bytes, llama ? llmc::kVersionLlama3 : llmc::kVersionGpt2);
    put_i32(bytes, static_cast<int32_t>(rest / (llama ? 4 : 2)));
    bytes.resize(llmc::kHeaderBytes, 0);
  }
  bytes.insert(bytes.end(), data + 1, data + size);
  const size_t total = bytes.size();
  try {
    const TokenFile file = TokenFile::from_bytes("fuzz.bin", std::move(bytes), vocab, format);
    const int64_t header = file.format() == TokenFileFormat::llmc ? llmc::kHeaderBytes : 0;
    if (file.size() < 1 || header + file.size() * file.token_bytes() != static_cast<int64_t>(total))
      __builtin_trap();  // the tokens and the header are the whole file
    std::vector<int32_t> tokens(static_cast<size_t>(file.size()));
    file.read(0, tokens);
    for (int32_t t : tokens)
      if (t < 0 || t >= vocab) __builtin_trap();  // the vocabulary check let a token through
  } catch (const UserError& e) {
    if (std::strchr(e.what(), '\n') != nullptr || std::strstr(e.what(), "fuzz.bin") == nullptr)
      __builtin_trap();  // one line, naming the file
  }
  return 0;
}
