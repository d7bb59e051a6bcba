// Real images as a Dataset: encoded JPEGs (an image folder or shards) decoded and augmented on worker
// threads, written in the training dtype and layout straight into the caller's host buffer.
//
// Per sample (one worker thread each, --data-threads of them):
//   read the bytes -> read the JPEG header -> choose the crop box in the full image
//     training:   RandomResizedCrop (scale 0.08-1, ratio 3/4-4/3) and a horizontal flip with p = 1/2
//     evaluation: the shorter side resized to size*256/224, then a centre crop of size x size
//     no augmentation (small images such as Fashion-MNIST): the whole image
//   -> decode scaled in the DCT domain by the smallest of 1/8, 2/8, 4/8, 8/8 (libjpeg-turbo's SIMD scales)
//      that keeps the box at least size x size
//   -> cut, resize (bilinear), flip, normalise, convert, store, in one pass (data/image_transform.h).
// The randomness of the k-th sample of the n-th gather() call comes from (seed, n, k) only, so a run is
// reproducible whatever the thread count. A file that cannot be decoded (corrupt, truncated, not a JPEG,
// too large...) is skipped: it is counted, named once in a warning, and the next sample of the data set
// that decodes takes its place in the batch; with `strict` the first one stops the run with its path.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "data/dataset.h"
#include "data/image_source.h"
#include "data/image_transform.h"

namespace dlbench {

class WorkPool;

struct ImageDatasetOptions {
  int image_size = 224;  // output height and width
  int channels = 3;      // 3 (RGB; grayscale converted) or 1 (luminance; colour converted)
  bool train = true;     // training transform (else evaluation)
  bool augment = true;   // random crop and flip in training; false: the whole image, resized
  Normalization normalization = kImageNetNormalization;
  int threads = 1;  // decoding threads
  uint64_t seed = 42;
  bool strict = false;  // stop at the first bad file instead of skipping it
};

// What the decoding threads did so far.
struct ImageDatasetStats {
  int64_t decoded = 0;        // samples written
  int64_t skipped = 0;        // bad files met (each time one was drawn)
  int64_t bad_files = 0;      // distinct bad files
  double decode_seconds = 0;  // summed over threads: read + decode + transform
};

class ImageDataset final : public Dataset {
 public:
  ImageDataset(std::shared_ptr<const EncodedImageSource> source, ImageDatasetOptions options);
  ~ImageDataset() override;

  std::string name() const override { return source_->description(); }
  int64_t size() const override { return source_->size(); }
  SampleShape sample_shape() const override {
    return {options_.channels, options_.image_size, options_.image_size};
  }
  int num_classes() const override { return static_cast<int>(source_->class_names().size()); }
  bool writes_dtype(DType dtype) const override {
    return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16;
  }
  void gather(std::span<const int64_t> indices, Tensor& images, Tensor& labels) const override;

  const ImageDatasetOptions& options() const { return options_; }
  const EncodedImageSource& source() const { return *source_; }
  ImageDatasetStats stats() const;
  // A bad file met by a pipeline reading this data set (this one's gather, or the GPU pipeline's): counted
  // in stats(), named in a warning the first time.
  void note_bad(int64_t index, const std::string& error) const;

 private:
  // Decodes sample `index` into `out`; false (with the error) when the file is bad.
  bool decode_one(int64_t index, uint64_t draw, DType dtype, Layout layout, void* out,
                  std::string& error) const;

  std::shared_ptr<const EncodedImageSource> source_;
  ImageDatasetOptions options_;
  std::unique_ptr<WorkPool> workers_;
  mutable std::atomic<uint64_t> calls_{0};
  mutable std::mutex bad_mutex_;
  mutable std::set<int64_t> bad_;
  mutable std::atomic<int64_t> decoded_{0}, skipped_{0};
  mutable std::atomic<int64_t> decode_nanoseconds_{0};
};

// Which sample-draw number the k-th sample of the call-th batch takes on its attempt-th try (a bad file is
// replaced by the next sample, with the next attempt): (call << 24) + k + (attempt << 48). gather()'s calls
// count from 0 in order, so batch n of a run is call n, whichever pipeline decodes it.
inline uint64_t sample_draw(uint64_t call, int64_t k, uint64_t attempt) {
  return (call << 24) + static_cast<uint64_t>(k) + (attempt << 48);
}

// What is cut out of one sample: its crop box (full-size pixels), its flip, and the DCT scale the CPU
// decodes it at (the smallest n/8 that keeps the box at least the output size).
struct SampleCrop {
  CropBox box;
  bool flip = false;
  int scale_eighths = 8;
};

// The crop of draw `draw` from an image of width x height: the training transform's random box and flip,
// the evaluation transform's centre crop, or the whole image without augmentation. Randomness from
// (options.seed, draw) only; the CPU and the GPU pipelines both take their boxes from here.
SampleCrop choose_sample_crop(const ImageDatasetOptions& options, int width, int height, uint64_t draw);

// The evaluation/training options a data path implies: 3 channels at 224 with augmentation for photos;
// for a data set of small grayscale images (the first image's shorter side under 64 pixels, one component),
// 1 channel at that size, no augmentation, and Fashion-MNIST's normalisation.
ImageDatasetOptions default_image_options(const EncodedImageSource& source);

}  // namespace dlbench
