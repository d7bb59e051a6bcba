// IDX files (the MNIST family's format) and the Fashion-MNIST dataset built from them.
//
// IDX: a big-endian u32 magic number (0x00000803 = 2051 for u8 images [n, rows, cols], 0x00000801 = 2049
// for u8 labels [n]), one big-endian u32 per dimension, then the u8 values row-major. Files are read
// through zlib, so both the usual .gz files and uncompressed ones work.
//
// Reading input is where users meet dlbench first: every problem with a file (missing, unreadable, not
// IDX, truncated, corrupt gzip, trailing data, inconsistent with its partner file) is a UserError whose one
// line names the file, says what is wrong and what to do. Memory grows with the data actually read, never
// with what a header claims, so a garbage header cannot exhaust memory, and reads always end at end of file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace dlbench {

// The remedies a read error suggests; a dataset loader names its own (the Debian package, a flag).
struct IdxAdvice {
  std::string if_missing = "check the path";
  std::string if_damaged = "replace the file with an intact copy";
};

struct IdxImages {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols values, row-major
};

IdxImages read_idx_images(const std::string& path, const IdxAdvice& advice = {});
std::vector<uint8_t> read_idx_labels(const std::string& path, const IdxAdvice& advice = {});

// A greyscale classification dataset read from an IDX image file and its label file.
class IdxDataset : public InMemoryDataset {
 public:
  struct Spec {
    std::string name;  // e.g. "fashion-mnist-train"
    int64_t rows = 0, cols = 0;
    int num_classes = 0;
    float mean = 0.f, stddev = 1.f;  // of x / 255 over the training split
    IdxAdvice advice;
  };
  // Pixels normalised to (x / 255 - mean) / stddev. Besides the read errors, UserError (naming the
  // files) if the files disagree on the sample count, hold no samples, hold images other than rows x cols,
  // or a label outside [0, num_classes).
  static IdxDataset load(const Spec& spec, const std::string& images_path, const std::string& labels_path);

 private:
  IdxDataset(std::string name, SampleShape shape, int num_classes, std::vector<float> images,
             std::vector<int32_t> labels)
      : InMemoryDataset(std::move(name), shape, num_classes, std::move(images), std::move(labels)) {}
};

enum class Split { train, test };

// Where the Debian package dataset-fashion-mnist installs the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Fashion-MNIST's train (60000) or test (10000) split from `dir`: 1x28x28 images, 10 classes, normalised
// with the training set's mean 0.2860 and standard deviation 0.3530. Reads {train,t10k}-{images-idx3,
// labels-idx1}-ubyte.gz, or the same names without .gz when only uncompressed copies are there.
IdxDataset load_fashion_mnist(const std::string& dir, Split split);

}  // namespace dlbench
