#include "data/data_commands.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/file_io.h"
#include "core/status.h"
#include "data/batch_prefetcher.h"
#include "data/idx.h"
#include "data/image_dataset.h"
#include "data/image_source.h"
#include "data/jpeg_image.h"
#include "data/shard.h"

namespace dlbench {

namespace fs = std::filesystem;

namespace {

bool is_image_set(const std::string& path) { return is_shard_set(path) || is_image_folder(path); }

std::shared_ptr<const EncodedImageSource> open_images(const std::string& path) {
  if (is_shard_set(path)) return open_shard_set(path);
  return open_image_folder(path);
}

void pack_one(const std::string& source, const std::string& destination, const PackOptions& options) {
  const ImageFolderListing listing = list_image_folder(source);
  for (const std::string& empty : listing.empty_classes)
    std::printf("pack: class folder %s/%s holds no image (its label is kept)\n", source.c_str(),
                empty.c_str());
  std::vector<ShardInput> files;
  files.reserve(listing.paths.size());
  for (size_t i = 0; i < listing.paths.size(); ++i) {
    files.push_back({listing.paths[i], fs::relative(listing.paths[i], source).string(), listing.labels[i]});
  }
  const auto shard_bytes = static_cast<size_t>(options.shard_mb * (1 << 20));
  int64_t last_percent = -1;
  PackResult result = pack_shards(
      files, listing.class_names, destination, shard_bytes, options.strict, [&](int64_t done, int64_t total) {
        const int64_t percent = total ? done * 100 / total : 100;
        if (percent / 10 != last_percent / 10) {
          std::printf("pack: %s %lld/%lld\n", source.c_str(), static_cast<long long>(done),
                      static_cast<long long>(total));
          std::fflush(stdout);
          last_percent = percent;
        }
      });
  std::printf("pack: %s -> %s: %lld images of %zu classes in %lld shards, %.1f MiB%s\n", source.c_str(),
              destination.c_str(), static_cast<long long>(result.records), listing.class_names.size(),
              static_cast<long long>(result.shards), static_cast<double>(result.bytes) / (1 << 20),
              result.skipped ? fmt::format(", {} unreadable files skipped", result.skipped).c_str() : "");
  for (const std::string& path : result.skipped_paths) std::printf("pack: skipped %s\n", path.c_str());
}

DType dtype_of_precision(const std::string& precision) {
  if (precision == "fp32" || precision == "tf32") return DType::f32;
  if (precision == "fp16") return DType::f16;
  if (precision == "bf16") return DType::bf16;
  throw_user_error("--precision {}: choose fp32, tf32, fp16 or bf16", precision);
}

}  // namespace

void run_pack(const PackOptions& options) {
  DLB_REQUIRE(options.shard_mb > 0, "--shard-mb {}: must be positive", options.shard_mb);
  DLB_REQUIRE(fs::is_directory(options.source), "pack: {}: not a directory", options.source);
  const std::string train = options.source + "/train", val = options.source + "/val";
  if (!is_image_folder(options.source) && is_image_folder(train)) {
    pack_one(train, options.destination + "/train", options);
    if (is_image_folder(val)) pack_one(val, options.destination + "/val", options);
  } else {
    pack_one(options.source, options.destination, options);
  }
}

void run_data_bench(const DataBenchOptions& o) {
  std::string path = o.data;
  if (!is_image_set(path) && is_image_set(path + "/train")) path += "/train";
  DLB_REQUIRE(is_image_set(path), "--data {}: neither an image folder (CLASS/FILE.jpg) nor a shard set",
              o.data);
  DLB_REQUIRE(o.batch_size >= 1 && o.batches >= 1 && o.warmup_batches >= 0,
              "data-bench: --batch-size and --batches must be positive");
  auto source = open_images(path);
  ImageDatasetOptions options = default_image_options(*source);
  options.threads =
      o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency() - 1));
  if (o.image_size > 0) options.image_size = o.image_size;
  options.train = o.train;
  options.seed = o.seed;
  options.strict = o.strict;
  ImageDataset data(source, options);
  const DType dtype = dtype_of_precision(o.precision);
  DLB_REQUIRE(o.layout == "nhwc" || o.layout == "nchw", "--layout {}: choose nhwc or nchw", o.layout);
  const Layout layout = o.layout == "nhwc" ? Layout::nhwc : Layout::nchw;
  const SampleShape shape = data.sample_shape();
  const int64_t total = o.warmup_batches + o.batches;
  const int64_t n = data.size();
  std::printf(
      "data-bench | %s: %lld images, %d classes | %s transform -> %lldx%lldx%lld %s %s | batch %lld | "
      "%d decoding threads\n",
      data.name().c_str(), static_cast<long long>(n), data.num_classes(), o.train ? "training" : "evaluation",
      static_cast<long long>(shape.channels), static_cast<long long>(shape.height),
      static_cast<long long>(shape.width), dtype_name(dtype), o.layout.c_str(),
      static_cast<long long>(o.batch_size), options.threads);
  BatchPrefetcher prefetcher(
      data, {o.batch_size, shape.channels, shape.height, shape.width}, dtype, layout, total,
      [&](int64_t b) {
        std::vector<int64_t> indices(static_cast<size_t>(o.batch_size));
        for (int64_t i = 0; i < o.batch_size; ++i)
          indices[static_cast<size_t>(i)] = (b * o.batch_size + i) % n;
        return indices;
      },
      3, [](size_t bytes) { return ::operator new (bytes, std::align_val_t{64}); },
      [](void* p) { ::operator delete (p, std::align_val_t{64}); });
  for (int64_t b = 0; b < o.warmup_batches; ++b) prefetcher.next();
  const ImageDatasetStats before = data.stats();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t b = 0; b < o.batches; ++b) prefetcher.next();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const ImageDatasetStats after = data.stats();
  const double images = static_cast<double>(o.batches * o.batch_size);
  const double rate = images / seconds;
  const double busy = after.decode_seconds - before.decode_seconds;
  std::printf(
      "data-bench: %.1f img/s with %d threads = %.1f img/s per thread | %.2f ms of one thread per image | "
      "%lld bad files skipped\n",
      rate, options.threads, rate / options.threads, 1e3 * busy / images,
      static_cast<long long>(after.bad_files));
  if (!o.json_path.empty()) {
    nlohmann::json j = {{"command", "data-bench"},
                        {"data", o.data},
                        {"images", n},
                        {"transform", o.train ? "train" : "eval"},
                        {"image_size", shape.height},
                        {"channels", shape.channels},
                        {"dtype", dtype_name(dtype)},
                        {"layout", o.layout},
                        {"batch_size", o.batch_size},
                        {"batches", o.batches},
                        {"threads", options.threads},
                        {"images_per_second", rate},
                        {"images_per_second_per_thread", rate / options.threads},
                        {"thread_ms_per_image", 1e3 * busy / images},
                        {"bad_files", after.bad_files}};
    write_file_atomically(o.json_path, j.dump(2) + "\n");
    std::printf("result written to %s\n", o.json_path.c_str());
  }
}

void run_export_images(const ExportOptions& o) {
  DLB_REQUIRE(!o.destination.empty(), "export-images: give the destination folder");
  DLB_REQUIRE(o.quality >= 1 && o.quality <= 100, "--quality {}: must be in 1..100", o.quality);
  const std::string dir = o.data == "fashion-mnist" ? "/usr/share/datasets/fashion-mnist" : o.data;
  std::error_code ec;
  DLB_REQUIRE(!fs::exists(o.destination, ec) || fs::is_empty(o.destination, ec),
              "export-images: {} exists and is not empty", o.destination);
  for (auto [prefix, name] : {std::pair{"train", "train"}, std::pair{"t10k", "val"}}) {
    auto file = [&](const char* kind) {
      const std::string plain = fmt::format("{}/{}-{}-ubyte", dir, prefix, kind);
      return fs::exists(plain + ".gz") ? plain + ".gz" : plain;
    };
    const IdxImages images = read_idx_images(file("images-idx3"));
    const std::vector<uint8_t> labels = read_idx_labels(file("labels-idx1"));
    DLB_REQUIRE(static_cast<int64_t>(labels.size()) == images.count,
                "export-images: {} images but {} labels in {}", images.count, labels.size(), dir);
    const int classes = labels.empty() ? 0 : *std::max_element(labels.begin(), labels.end()) + 1;
    const std::string root = o.destination + "/" + name;
    for (int c = 0; c < classes; ++c) {
      fs::create_directories(fmt::format("{}/class-{:02d}", root, c), ec);
      DLB_REQUIRE(!ec, "export-images: cannot create {}: {}", root, ec.message());
    }
    const size_t per_image = static_cast<size_t>(images.rows * images.cols);
    for (int64_t i = 0; i < images.count; ++i) {
      const std::vector<uint8_t> jpeg =
          encode_jpeg(images.pixels.data() + static_cast<size_t>(i) * per_image,
                      static_cast<int>(images.cols), static_cast<int>(images.rows), 1, o.quality);
      write_file_atomically(
          fmt::format("{}/class-{:02d}/{:05d}.jpg", root, labels[static_cast<size_t>(i)], i),
          std::string(jpeg.begin(), jpeg.end()));
    }
    std::printf("export-images: %lld images -> %s\n", static_cast<long long>(images.count), root.c_str());
  }
}

}  // namespace dlbench
