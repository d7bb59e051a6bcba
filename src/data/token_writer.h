// Writing a token file in llm.c's format (token_file.h): the 256-int32 header (magic 20240520, version 1,
// the count), then uint16 tokens. The count comes first in the file, so it is stated when the writer is
// made, and commit() refuses a file whose tokens fall short of it or exceed it.
//
// The file goes through an AtomicFile (core/file_io.h): until commit() the target is untouched, and an
// error, an exception or a signal leaves no half-written file behind.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/file_io.h"

namespace dlbench {

class TokenFileWriter {
 public:
  // UserError if count is not in [1, 2^31 - 1] (llm.c's header holds it in an int32) or `path` cannot be
  // created (core/file_io.h).
  TokenFileWriter(std::string path, int64_t count);

  void append(std::span<const uint16_t> tokens);
  // Each byte a token (a byte-level vocabulary of 256).
  void append_bytes(std::span<const uint8_t> bytes);
  void commit();

  const std::string& path() const { return file_.path(); }
  int64_t count() const { return count_; }

 private:
  AtomicFile file_;
  int64_t count_ = 0, written_ = 0;
};

}  // namespace dlbench
