// The data commands of the dlbench CLI: `pack` (an image folder into shards), `data-bench` (the input
// pipeline alone, as MXNet's --test-io) and `export-images` (an IDX data set as a JPEG image folder).
#pragma once

#include <cstdint>
#include <string>

#include "data/decode_mode.h"
#include "train/config.h"

namespace dlbench {

struct PackOptions {
  std::string source, destination;
  double shard_mb = 256;
  bool strict = false;
};
// SRC an image folder -> DST a shard set; SRC with train/ and val/ image folders -> DST/train and DST/val.
void run_pack(const PackOptions& options);

struct DataBenchOptions {
  std::string data;  // an image folder or shard set (or ROOT/train)
  int threads = 0;   // decoding threads (0 = all cores but one)
  int64_t batch_size = 256;
  int64_t batches = 50;  // timed batches
  int64_t warmup_batches = 5;
  int image_size = 0;                     // 0: 224 (small grayscale images: their own size)
  Precision precision = Precision::fp16;  // the dtype written (tf32 writes FP32)
  Layout layout = Layout::nhwc;
  bool train = true;  // the training transform (else the evaluation one)
  bool strict = false;
  uint64_t seed = 42;
  // Where JPEGs are decoded; the device is the GPU where this dlbench has one.
  DecodeMode decode = DecodeMode::automatic;
  int gpu_decode_threads = 2;  // --decode gpu: the GPU pipeline's decode threads
  // CRC-32 of every batch's bytes, images and labels, warm-up included, in order: two runs of one seed
  // and decode mode must print the same (a check of the pipelines' ordering). Each batch then waits to
  // be copied to the host: the rate is no measurement.
  bool digest = false;
  std::string json_path;
};
void run_data_bench(const DataBenchOptions& options);

struct ExportOptions {
  std::string data = "fashion-mnist";  // fashion-mnist or a directory of IDX files
  std::string destination;
  int quality = 95;
};
// Writes DST/train/<class>/<n>.jpg and DST/val/<class>/<n>.jpg (grayscale JPEGs of the raw pixels).
void run_export_images(const ExportOptions& options);

}  // namespace dlbench
