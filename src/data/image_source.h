// Where encoded images come from: an image folder in the ImageNet layout, or a packed shard set.
//
// An EncodedImageSource is random access to (encoded bytes, label) pairs; decoding and augmentation are
// the ImageDataset's (data/image_dataset.h). Both sources are immutable once opened, and read() may be
// called from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dlbench {

class EncodedImageSource {
 public:
  virtual ~EncodedImageSource() = default;
  virtual std::string description() const = 0;  // "image folder /data/train" | "shards /data/packed"
  virtual int64_t size() const = 0;
  virtual int32_t label(int64_t i) const = 0;
  virtual const std::vector<std::string>& class_names() const = 0;
  // Sample i's encoded bytes; false and `error` (naming where(i)) when they cannot be read. Never throws
  // for bad data.
  virtual bool read(int64_t i, std::vector<uint8_t>& bytes, std::string& error) const = 0;
  // The sample's path or place, for messages.
  virtual std::string where(int64_t i) const = 0;
};

// The files of an image folder: ROOT/<class>/<file> with a .jpg, .jpeg or .JPEG name (any case), classes
// sorted by name as torchvision's ImageFolder sorts them, files sorted by path within a class.
struct ImageFolderListing {
  std::vector<std::string> class_names;
  std::vector<std::string> paths;  // full paths
  std::vector<int32_t> labels;
};
// UserError when ROOT is not a readable directory, holds no image at all, or has a class folder with no
// image (named: its label could never be drawn and would shift the labels after it).
ImageFolderListing list_image_folder(const std::string& root);
// Whether `path` looks like an image folder: a directory with at least one subdirectory holding a file
// with an image name.
bool is_image_folder(const std::string& path);

std::unique_ptr<EncodedImageSource> open_image_folder(const std::string& root);
std::unique_ptr<EncodedImageSource> open_shard_set(const std::string& dir);

}  // namespace dlbench
