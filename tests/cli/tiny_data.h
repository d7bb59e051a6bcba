// Small inputs for tests that run the dlbench binary: a Fashion-MNIST-shaped IDX data set, and the check
// that a command failed with one clear line.
#pragma once

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_util.h"

namespace dlbench::testing {

namespace fs = std::filesystem;

inline void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

inline std::vector<uint8_t> idx_images(uint32_t magic, uint32_t count, uint32_t rows, uint32_t cols) {
  std::vector<uint8_t> bytes;
  put_u32(bytes, magic);
  put_u32(bytes, count);
  put_u32(bytes, rows);
  put_u32(bytes, cols);
  for (uint32_t i = 0; i < count * rows * cols; ++i) bytes.push_back(static_cast<uint8_t>(i * 7));
  return bytes;
}

inline std::vector<uint8_t> idx_labels(uint32_t magic, uint32_t count, uint8_t max_label) {
  std::vector<uint8_t> bytes;
  put_u32(bytes, magic);
  put_u32(bytes, count);
  for (uint32_t i = 0; i < count; ++i) bytes.push_back(static_cast<uint8_t>(i % (max_label + 1)));
  return bytes;
}

inline void write_gz(const fs::path& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(f);
}

inline void write_raw(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// A Fashion-MNIST-shaped data set of 64 training and 16 test images, optionally broken by `edit`.
inline fs::path make_idx_dir(const std::string& name, uint32_t image_magic = 2051, uint8_t max_label = 9,
                             uint32_t rows = 28) {
  fs::path dir = temp_dir(name);
  write_gz(dir / "train-images-idx3-ubyte.gz", idx_images(image_magic, 64, rows, rows));
  write_gz(dir / "train-labels-idx1-ubyte.gz", idx_labels(2049, 64, max_label));
  write_gz(dir / "t10k-images-idx3-ubyte.gz", idx_images(2051, 16, 28, 28));
  write_gz(dir / "t10k-labels-idx1-ubyte.gz", idx_labels(2049, 16, 9));
  return dir;
}

// Expects exit code 1 and exactly one line on stderr, containing `needle`.
inline void expect_one_line_error(const CommandResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("dlbench: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "missing '" << needle << "' in: " << r.err;
}

}  // namespace dlbench::testing
