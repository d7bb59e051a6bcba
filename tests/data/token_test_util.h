// Token files as bytes, built here byte by byte (little endian by shifts, not by the reader's code), so
// that the tests check the reader and the writer against the formats themselves.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dlbench::testing {

inline void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// nanoGPT's train.bin: the uint16 tokens alone.
inline std::string nanogpt_bytes(const std::vector<uint32_t>& tokens) {
  std::string out;
  for (uint32_t t : tokens) put_le(out, t, 2);
  return out;
}

// llm.c's write_datafile: 256 int32 (magic, version, count, zeros), then tokens of `token_bytes` each.
// `count` is the header's count (-1: the number of tokens).
inline std::string llmc_bytes(const std::vector<uint32_t>& tokens, int32_t magic = 20240520,
                              int32_t version = 1, int token_bytes = 2, int64_t count = -1) {
  std::string out;
  put_le(out, static_cast<uint32_t>(magic), 4);
  put_le(out, static_cast<uint32_t>(version), 4);
  put_le(out, static_cast<uint32_t>(count < 0 ? static_cast<int64_t>(tokens.size()) : count), 4);
  out.append(253 * 4, '\0');
  for (uint32_t t : tokens) put_le(out, t, token_bytes);
  return out;
}

inline std::vector<uint8_t> to_vector(const std::string& bytes) { return {bytes.begin(), bytes.end()}; }

inline std::vector<uint32_t> counting_tokens(int64_t n, uint32_t modulo) {
  std::vector<uint32_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    tokens[static_cast<size_t>(i)] = static_cast<uint32_t>((i * 7 + 3) % modulo);
  return tokens;
}

}  // namespace dlbench::testing
