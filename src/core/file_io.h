// Output files are never half-written: content goes to PATH.tmp, which is then renamed over PATH.
#pragma once

#include <string>

namespace dlbench {

// Throws UserError (naming `flag`) if PATH cannot be created; call before a long run, not after it.
void check_writable(const std::string& path, const std::string& flag);
void write_file_atomically(const std::string& path, const std::string& content);
// Appends one line (JSON Lines results) with a single write.
void append_line(const std::string& path, const std::string& line);

}  // namespace dlbench
