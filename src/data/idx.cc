#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string_view>

#include "core/status.h"

namespace dlbench {
namespace {

constexpr uint32_t kImagesMagic = 2051;  // 0x00000803: unsigned bytes, 3 dimensions
constexpr uint32_t kLabelsMagic = 2049;  // 0x00000801: unsigned bytes, 1 dimension

// One IDX file open for reading through zlib (which passes uncompressed files through unchanged).
class IdxReader {
 public:
  IdxReader(const std::string& path, const IdxAdvice& advice) : path_(path), advice_(advice) {
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (status.type() == std::filesystem::file_type::not_found)
      throw_user_error("{} not found; {}", path, advice.if_missing);
    // gzopen succeeds on a directory and only the first read fails, with a less clear message.
    if (status.type() == std::filesystem::file_type::directory)
      throw_user_error("{} is a directory, not an IDX file; {}", path, advice.if_missing);
    errno = 0;
    file_ = gzopen(path.c_str(), "rb");
    if (file_ == nullptr)
      throw_user_error("cannot open {}: {}; check that the file is readable", path,
                       errno != 0 ? std::strerror(errno) : "out of memory");
    gzbuffer(file_, 1 << 17);
  }
  ~IdxReader() { gzclose_r(file_); }
  IdxReader(const IdxReader&) = delete;
  IdxReader& operator=(const IdxReader&) = delete;

  // Reads up to n bytes into out; returns how many arrived (fewer only at end of data). A zlib or I/O
  // error is a UserError; a gzip stream cut short just ends the data, and callers report it as
  // truncation (with cut_note()).
  size_t read_some(void* out, size_t n) {
    size_t done = 0;
    while (done < n) {
      const auto chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 20));
      errno = 0;
      const int got = gzread(file_, static_cast<char*>(out) + done, chunk);
      if (got < 0) {
        fail_on_stream_error();
        break;  // zlib reported -1 without an error code: treat as end of data
      }
      done += static_cast<size_t>(got);
      if (static_cast<unsigned>(got) < chunk) {
        fail_on_stream_error();  // a short read may carry a data error too
        break;
      }
    }
    return done;
  }

  // Big-endian u32 header field; `what` names it for the truncation message.
  uint32_t read_u32(const char* what) {
    std::array<unsigned char, 4> b{};
    const size_t got = read_some(b.data(), b.size());
    if (got < b.size())
      throw_user_error("{} is truncated: it ends inside the IDX header ({}){}; {}", path_, what, cut_note(),
                       advice_.if_damaged);
    return uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | uint32_t{b[3]};
  }

  // Exactly `bytes` bytes of data described as `what`, and nothing after them. The buffer grows with the
  // data that arrives, so a header promising terabytes fails as truncated instead of allocating them.
  std::vector<uint8_t> read_payload(uint64_t bytes, const std::string& what) {
    std::vector<uint8_t> data;
    constexpr size_t kChunk = size_t{1} << 22;
    while (data.size() < bytes) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, bytes - data.size()));
      const size_t old = data.size();
      data.resize(old + want);
      const size_t got = read_some(data.data() + old, want);
      if (got < want)
        throw_user_error(
            "{} is truncated: its header promises {} ({} bytes) but the data ends after {} bytes{}; {}",
            path_, what, bytes, old + got, cut_note(), advice_.if_damaged);
    }
    unsigned char extra = 0;
    if (read_some(&extra, 1) != 0)
      throw_user_error(
          "{} has data beyond the {} its header describes; the file is damaged or not an IDX file: {}", path_,
          what, advice_.if_damaged);
    return data;
  }

  const std::string& path() const { return path_; }
  const IdxAdvice& advice() const { return advice_; }

 private:
  void fail_on_stream_error() {
    int code = Z_OK;
    const char* message = gzerror(file_, &code);
    if (code == Z_OK || code == Z_BUF_ERROR) return;  // end of data; Z_BUF_ERROR: stream cut short
    if (code == Z_ERRNO)
      throw_user_error("cannot read {}: {}; check the file and the disk", path_, std::strerror(errno));
    // zlib prefixes its message with the path, which ours already names.
    std::string_view detail = message;
    if (detail.starts_with(path_ + ": ")) detail.remove_prefix(path_.size() + 2);
    throw_user_error("{} is a corrupt gzip file ({}); {}", path_, detail, advice_.if_damaged);
  }

  // Whether zlib saw the compressed stream end early (the .gz file itself is truncated).
  std::string cut_note() {
    int code = Z_OK;
    gzerror(file_, &code);
    return code == Z_BUF_ERROR ? " (the gzip stream is cut short)" : "";
  }

  std::string path_;
  IdxAdvice advice_;
  gzFile file_ = nullptr;
};

void check_magic(IdxReader& reader, uint32_t expected, const char* kind) {
  const uint32_t found = reader.read_u32("magic number");
  if (found == expected) return;
  const char* hint = found == kLabelsMagic   ? " (that of an IDX label file)"
                     : found == kImagesMagic ? " (that of an IDX image file)"
                                             : "";
  throw_user_error("{} is not an IDX {} file: magic number {} (0x{:08x}){}, expected {} (0x{:08x}); {}",
                   reader.path(), kind, found, found, hint, expected, expected, reader.advice().if_damaged);
}

}  // namespace

IdxImages read_idx_images(const std::string& path, const IdxAdvice& advice) {
  IdxReader reader(path, advice);
  check_magic(reader, kImagesMagic, "image");
  IdxImages images;
  images.count = reader.read_u32("image count");
  images.rows = reader.read_u32("row count");
  images.cols = reader.read_u32("column count");
  DLB_REQUIRE(images.rows > 0 && images.cols > 0, "{}: its header gives images of {}x{} pixels; {}", path,
              images.rows, images.cols, advice.if_damaged);
  // rows * cols fits 64 bits (each is below 2^32); times count it may not, and no real file is that big.
  const uint64_t per_image = static_cast<uint64_t>(images.rows) * static_cast<uint64_t>(images.cols);
  DLB_REQUIRE(static_cast<uint64_t>(images.count) <= std::numeric_limits<uint64_t>::max() / per_image,
              "{}: its header promises {} images of {}x{}, more than any file holds; {}", path, images.count,
              images.rows, images.cols, advice.if_damaged);
  images.pixels =
      reader.read_payload(static_cast<uint64_t>(images.count) * per_image,
                          fmt::format("{} images of {}x{}", images.count, images.rows, images.cols));
  return images;
}

std::vector<uint8_t> read_idx_labels(const std::string& path, const IdxAdvice& advice) {
  IdxReader reader(path, advice);
  check_magic(reader, kLabelsMagic, "label");
  const uint32_t count = reader.read_u32("label count");
  return reader.read_payload(count, fmt::format("{} labels", count));
}

IdxDataset IdxDataset::load(const Spec& spec, const std::string& images_path,
                            const std::string& labels_path) {
  // Both files are read and cross-checked before anything is normalised.
  const IdxImages images = read_idx_images(images_path, spec.advice);
  const std::vector<uint8_t> labels = read_idx_labels(labels_path, spec.advice);
  const std::string& fix = spec.advice.if_damaged;
  DLB_REQUIRE(images.rows == spec.rows && images.cols == spec.cols,
              "{} holds images of {}x{} pixels, {} needs {}x{}; {}", images_path, images.rows, images.cols,
              spec.name, spec.rows, spec.cols, fix);
  DLB_REQUIRE(images.count == static_cast<int64_t>(labels.size()),
              "{} holds {} images but {} holds {} labels; use the image and label files of one split, or {}",
              images_path, images.count, labels_path, labels.size(), fix);
  DLB_REQUIRE(images.count > 0, "{} holds no images; {}", images_path, fix);
  for (size_t i = 0; i < labels.size(); ++i)
    DLB_REQUIRE(labels[i] < spec.num_classes, "{}: label {} of sample {} is outside 0..{}; {}", labels_path,
                labels[i], i, spec.num_classes - 1, fix);

  std::array<float, 256> table{};  // one rounding per byte value, identical for every pixel
  for (size_t x = 0; x < table.size(); ++x)
    table[x] = (static_cast<float>(x) / 255.f - spec.mean) / spec.stddev;
  std::vector<float> pixels(images.pixels.size());
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = table[images.pixels[i]];
  return IdxDataset(spec.name, SampleShape{1, spec.rows, spec.cols}, spec.num_classes, std::move(pixels),
                    std::vector<int32_t>(labels.begin(), labels.end()));
}

IdxDataset load_fashion_mnist(const std::string& dir, Split split) {
  IdxDataset::Spec spec;
  spec.name = split == Split::train ? "fashion-mnist-train" : "fashion-mnist-test";
  spec.rows = spec.cols = 28;
  spec.num_classes = 10;
  spec.mean = 0.2860f;
  spec.stddev = 0.3530f;
  spec.advice.if_missing = "install the Debian package dataset-fashion-mnist or pass --data DIR";
  spec.advice.if_damaged =
      "reinstall the Debian package dataset-fashion-mnist or pass --data DIR with intact Fashion-MNIST files";
  // The .gz name as distributed; an uncompressed copy under the bare name also works. A missing file is
  // reported under the .gz name, the one the package installs.
  const auto locate = [&](const char* stem) {
    const std::filesystem::path base = std::filesystem::path(dir) / stem;
    std::filesystem::path gz = base;
    gz += ".gz";
    std::error_code ec;
    return !std::filesystem::exists(gz, ec) && std::filesystem::exists(base, ec) ? base.string()
                                                                                 : gz.string();
  };
  const char* prefix = split == Split::train ? "train" : "t10k";
  return IdxDataset::load(spec, locate(fmt::format("{}-images-idx3-ubyte", prefix).c_str()),
                          locate(fmt::format("{}-labels-idx1-ubyte", prefix).c_str()));
}

}  // namespace dlbench
