#include "data/image_source.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/status.h"
#include "data/shard.h"

namespace dlbench {

namespace fs = std::filesystem;

namespace {

bool has_image_name(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg";
}

// Reads a whole file with one open and pread loop; false and `error` on any failure.
bool read_whole_file(const std::string& path, std::vector<uint8_t>& bytes, std::string& error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = fmt::format("{}: cannot open: {}", path, std::strerror(errno));
    return false;
  }
  const off_t size = ::lseek(fd, 0, SEEK_END);
  if (size < 0) {
    error = fmt::format("{}: cannot read: {}", path, std::strerror(errno));
    ::close(fd);
    return false;
  }
  bytes.resize(static_cast<size_t>(size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      error = fmt::format("{}: {}", path, got < 0 ? std::strerror(errno) : "shorter than its size");
      ::close(fd);
      return false;
    }
    done += static_cast<size_t>(got);
  }
  ::close(fd);
  return true;
}

class ImageFolderSource final : public EncodedImageSource {
 public:
  explicit ImageFolderSource(const std::string& root) : root_(root), listing_(list_image_folder(root)) {}
  std::string description() const override { return "image folder " + root_; }
  int64_t size() const override { return static_cast<int64_t>(listing_.paths.size()); }
  int32_t label(int64_t i) const override { return listing_.labels.at(static_cast<size_t>(i)); }
  const std::vector<std::string>& class_names() const override { return listing_.class_names; }
  bool read(int64_t i, std::vector<uint8_t>& bytes, std::string& error) const override {
    return read_whole_file(listing_.paths.at(static_cast<size_t>(i)), bytes, error);
  }
  std::string where(int64_t i) const override { return listing_.paths.at(static_cast<size_t>(i)); }

 private:
  std::string root_;
  ImageFolderListing listing_;
};

class ShardSource final : public EncodedImageSource {
 public:
  explicit ShardSource(const std::string& dir) : dir_(dir), shards_(dir) {}
  std::string description() const override { return "shards " + dir_; }
  int64_t size() const override { return shards_.size(); }
  int32_t label(int64_t i) const override { return shards_.label(i); }
  const std::vector<std::string>& class_names() const override { return shards_.class_names(); }
  bool read(int64_t i, std::vector<uint8_t>& bytes, std::string& error) const override {
    return shards_.read(i, bytes, error);
  }
  std::string where(int64_t i) const override { return shards_.where(i); }

 private:
  std::string dir_;
  ShardSet shards_;
};

}  // namespace

ImageFolderListing list_image_folder(const std::string& root) {
  std::error_code ec;
  DLB_REQUIRE(fs::is_directory(root, ec), "{}: not a directory", root);
  ImageFolderListing listing;
  std::vector<fs::path> class_dirs;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec)) class_dirs.push_back(it->path());
  }
  DLB_REQUIRE(!ec, "{}: cannot list: {}", root, ec.message());
  std::sort(class_dirs.begin(), class_dirs.end());
  std::string empty_class;  // the first class folder with no image
  for (const fs::path& dir : class_dirs) {
    std::vector<std::string> files;
    for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->is_regular_file(ec) && has_image_name(it->path())) files.push_back(it->path().string());
    }
    DLB_REQUIRE(!ec, "{}: cannot list: {}", dir.string(), ec.message());
    std::sort(files.begin(), files.end());
    const auto label = static_cast<int32_t>(listing.class_names.size());
    listing.class_names.push_back(dir.filename().string());
    if (files.empty() && empty_class.empty()) empty_class = dir.string();
    for (std::string& f : files) {
      listing.paths.push_back(std::move(f));
      listing.labels.push_back(label);
    }
  }
  DLB_REQUIRE(!listing.paths.empty(),
              "{}: no images (expected ROOT/<class>/<file>.jpg, .jpeg or .JPEG, as ImageNet is laid out)",
              root);
  // Its label could never be drawn, and every class after it would be numbered one more than in a
  // validation set without the folder.
  DLB_REQUIRE(empty_class.empty(),
              "{}: a class folder with no image (.jpg, .jpeg or .JPEG); add images to it or remove it, "
              "since an empty class shifts the labels of the classes after it",
              empty_class);
  return listing;
}

bool is_image_folder(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return false;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    for (fs::directory_iterator f(it->path(), ec), fend; !ec && f != fend; f.increment(ec)) {
      if (f->is_regular_file(ec) && has_image_name(f->path())) return true;
    }
  }
  return false;
}

std::unique_ptr<EncodedImageSource> open_image_folder(const std::string& root) {
  return std::make_unique<ImageFolderSource>(root);
}

std::unique_ptr<EncodedImageSource> open_shard_set(const std::string& dir) {
  return std::make_unique<ShardSource>(dir);
}

}  // namespace dlbench
