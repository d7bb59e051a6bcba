#include "app/data_commands.h"

#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "backend/backend_factory.h"
#include "core/file_io.h"
#include "core/file_paths.h"
#include "core/machine_limits.h"
#include "core/signals.h"
#include "core/status.h"
#include "data/batch_prefetcher.h"
#include "data/decode_mode.h"
#include "data/gpu_image_pipeline.h"
#include "data/idx.h"
#include "data/image_dataset.h"
#include "data/image_limits.h"
#include "data/image_source.h"
#include "data/jpeg_image.h"
#include "data/shard.h"
#include "data/staged_folder.h"

namespace dlbench {

namespace fs = std::filesystem;

namespace {

bool is_image_set(const std::string& path) { return is_shard_set(path) || is_image_folder(path); }

std::shared_ptr<const EncodedImageSource> open_images(const std::string& path) {
  if (is_shard_set(path)) return open_shard_set(path);
  return open_image_folder(path);
}

// A safe point between two files of `pack` or `export-images`: after SIGINT or SIGTERM, Stopped, whose
// unwinding removes the staged folder, so nothing is written to DST.
void stop_if_asked(const char* command, const std::string& where, const std::string& destination) {
  if (!stop_requested()) return;
  throw Stopped(stop_signal(), fmt::format("{} stopped by {} {}; nothing was written to {}", command,
                                           signal_name(stop_signal()), where, destination));
}

// One image folder to pack, into `part` of DST ("" for DST itself, else "train" or "val").
struct PackPart {
  std::string source, part;
  ImageFolderListing listing;
};

// Packs one image folder into the staged folder; returns the line that reports it.
std::string pack_one(const PackPart& p, const StagedFolder& staged, const PackOptions& options) {
  const std::string source = p.source;
  const std::string shown = p.part.empty() ? staged.destination() : staged.destination() + "/" + p.part;
  const std::string folder = p.part.empty() ? staged.path() : staged.path() + "/" + p.part;
  std::error_code ec;
  if (!p.part.empty() && !fs::create_directory(folder, ec))
    throw_user_error("pack: cannot create {} ({})", shown, ec.message());
  std::vector<ShardInput> files;
  files.reserve(p.listing.paths.size());
  for (size_t i = 0; i < p.listing.paths.size(); ++i)
    files.push_back(
        {p.listing.paths[i], fs::relative(p.listing.paths[i], source).string(), p.listing.labels[i]});
  const auto shard_bytes = static_cast<size_t>(options.shard_mb * (1 << 20));
  int64_t last_percent = -1;
  const PackResult result =
      write_shard_set(files, p.listing.class_names, folder, shown, shard_bytes, options.strict,
                      [&](int64_t done, int64_t total) {
                        stop_if_asked("pack", fmt::format("after {} of {} files of {}", done, total, source),
                                      staged.destination());
                        const int64_t percent = total ? done * 100 / total : 100;
                        if (percent / 10 != last_percent / 10) {
                          std::printf("pack: %s %lld/%lld\n", source.c_str(), static_cast<long long>(done),
                                      static_cast<long long>(total));
                          std::fflush(stdout);
                          last_percent = percent;
                        }
                      });
  for (const std::string& path : result.skipped_paths) std::printf("pack: skipped %s\n", path.c_str());
  // Every file of a class skipped: the class would be as empty as an empty folder (image_source.h).
  for (size_t c = 0; c < result.class_records.size(); ++c)
    DLB_REQUIRE(result.class_records[c] > 0,
                "pack: {}/{}: none of the class's images could be read; fix or remove them; nothing was "
                "written to {}",
                source, p.listing.class_names[c], staged.destination());
  return fmt::format("pack: {} -> {}: {} images of {} classes in {} shards, {:.1f} MiB{}", source, shown,
                     result.records, p.listing.class_names.size(), result.shards,
                     static_cast<double>(result.bytes) / (1 << 20),
                     result.skipped ? fmt::format(", {} unreadable files skipped", result.skipped) : "");
}

// data-bench's prefetcher ring: one batch handed out, the next ones decoding.
constexpr int kBuffersInFlight = 3;

}  // namespace

void run_pack(const PackOptions& options) {
  DLB_REQUIRE(options.shard_mb > 0, "--shard-mb {}: must be positive", options.shard_mb);
  DLB_REQUIRE(fs::is_directory(options.source), "pack: {}: not a directory", options.source);
  check_path_uses(
      {{"SRC", options.source, PathRole::reads_tree}, {"DST", options.destination, PathRole::writes_tree}});
  defer_stop_to_safe_points();
  // Every folder listed (and an empty class refused) before anything is written.
  std::vector<PackPart> parts;
  const std::string train = options.source + "/train", val = options.source + "/val";
  if (!is_image_folder(options.source) && is_image_folder(train)) {
    parts.push_back({train, "train", list_image_folder(train)});
    if (is_image_folder(val)) parts.push_back({val, "val", list_image_folder(val)});
  } else {
    parts.push_back({options.source, "", list_image_folder(options.source)});
  }
  StagedFolder staged(options.destination, "pack");
  std::vector<std::string> reports;
  for (const PackPart& part : parts) reports.push_back(pack_one(part, staged, options));
  staged.commit();
  for (const std::string& line : reports) std::printf("%s\n", line.c_str());
}

namespace {

// The image set --data names: it, or ROOT/train where ROOT holds one.
std::string data_bench_path(const DataBenchOptions& o) {
  std::string path = o.data;
  if (!is_image_set(path) && is_image_set(path + "/train")) path += "/train";
  DLB_REQUIRE(is_image_set(path), "--data {}: neither an image folder (CLASS/FILE.jpg) nor a shard set",
              o.data);
  return path;
}

// Where data-bench's batches go: on the CPU into host memory through the prefetcher; on the GPU where
// training takes them, the device's memory, through the same pipeline. The device runs nothing else, so
// this is the most the pipeline feeds.
class DataBenchFeed {
 public:
  DataBenchFeed(const ImageDataset& data, const DataBenchOptions& o, DType dtype, Layout layout,
                DecodeMode decode, int64_t count) {
    const SampleShape shape = data.sample_shape();
    const std::vector<int64_t> dims = {o.batch_size, shape.channels, shape.height, shape.width};
    auto batch_indices = [batch = o.batch_size, n = data.size()](int64_t b) {
      std::vector<int64_t> indices(static_cast<size_t>(batch));
      for (int64_t i = 0; i < batch; ++i) indices[static_cast<size_t>(i)] = (b * batch + i) % n;
      return indices;
    };
    if (decode != DecodeMode::gpu) {
      cpu_ = std::make_unique<BatchPrefetcher>(
          data, dims, dtype, layout, count, batch_indices, kBuffersInFlight,
          [](size_t bytes) { return ::operator new (bytes, std::align_val_t{64}); },
          [](void* p) { ::operator delete (p, std::align_val_t{64}); });
      return;
    }
    device_ = make_backend("cuda", Device{DeviceKind::cuda, 0}, 1);
    on_device_.backend = device_.get();
    on_device_.images =
        Tensor(device_->allocate(static_cast<size_t>(shape.numel() * o.batch_size) * dtype_size(dtype)), dims,
               dtype, layout, device_->device());
    on_device_.labels = Tensor(device_->allocate(static_cast<size_t>(o.batch_size) * sizeof(int32_t)),
                               {o.batch_size}, DType::i32, Layout::nchw, device_->device());
    GpuPipelineOptions g;
    g.image_dims = dims;
    g.dtype = dtype;
    g.layout = layout;
    g.count = count;
    g.indices = batch_indices;
    g.device = 0;
    DLB_REQUIRE(o.gpu_decode_threads >= 1 && o.gpu_decode_threads <= 8,
                "--gpu-decode-threads {}: choose 1 to 8", o.gpu_decode_threads);
    g.decode_threads = o.gpu_decode_threads;
    g.depth = g.decode_threads + 2;
    gpu_ = make_gpu_image_pipeline(data, g);
    std::printf("data-bench: decoding with %s\n", gpu_->description().c_str());
  }

  void next() {
    if (gpu_) {
      gpu_->next(on_device_.images, on_device_.labels, device_->native_stream());
    } else {
      last_ = &cpu_->next();
    }
  }
  // `crc` extended by the last batch's images and labels, as they are in memory (waits for the device).
  uint32_t digest(uint32_t crc) {
    const Tensor& images = gpu_ ? on_device_.images : last_->images;
    const Tensor& labels = gpu_ ? on_device_.labels : last_->labels;
    auto extend = [&](const Tensor& t) {
      host_copy_.resize(t.bytes());
      if (gpu_)
        device_->copy_to_host(host_copy_.data(), t.data(), t.bytes());
      else
        std::memcpy(host_copy_.data(), t.data(), t.bytes());
      return static_cast<uint32_t>(crc32(crc, host_copy_.data(), static_cast<uInt>(host_copy_.size())));
    };
    crc = extend(images);
    return extend(labels);
  }
  // Until the batches handed out are in place.
  void synchronize() {
    if (device_) device_->synchronize();
  }
  const GpuImagePipeline* gpu() const { return gpu_.get(); }

 private:
  // The batch's place on the device, given back before the backend goes (declared after it).
  struct DeviceBatch {
    Backend* backend = nullptr;
    Tensor images, labels;
    ~DeviceBatch() {
      if (!backend) return;
      backend->deallocate(images.data());
      backend->deallocate(labels.data());
    }
  };
  std::unique_ptr<Backend> device_;
  DeviceBatch on_device_;
  std::unique_ptr<GpuImagePipeline> gpu_;
  std::unique_ptr<BatchPrefetcher> cpu_;
  const BatchPrefetcher::Batch* last_ = nullptr;  // the CPU path's last batch
  std::vector<unsigned char> host_copy_;          // digest()'s
};

// data-bench's timed batches, in numbers.
struct DataBenchWindow {
  double seconds = 0, cpu_seconds = 0;
  ImageDatasetStats before, after;
  GpuPipelineStats gpu_before, gpu_after;
  std::optional<uint32_t> digest;  // --digest
};

// The warm-up batches, then the timed ones.
DataBenchWindow time_batches(const DataBenchOptions& o, const ImageDataset& data, DataBenchFeed& feed) {
  DataBenchWindow w;
  uint32_t crc = static_cast<uint32_t>(crc32(0, nullptr, 0));
  auto next = [&] {
    feed.next();
    if (o.digest) crc = feed.digest(crc);
  };
  for (int64_t b = 0; b < o.warmup_batches; ++b) next();
  feed.synchronize();
  w.before = data.stats();
  if (feed.gpu()) w.gpu_before = feed.gpu()->stats();
  const double cpu_before = process_cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t b = 0; b < o.batches; ++b) next();
  feed.synchronize();  // the last batch is in place
  if (o.digest) w.digest = crc;
  w.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // What the pipeline costs the machine: every thread's user + system time over the window.
  w.cpu_seconds = process_cpu_seconds() - cpu_before;
  w.after = data.stats();
  if (feed.gpu()) w.gpu_after = feed.gpu()->stats();
  return w;
}

// The window's lines, and its JSON with --json.
void report_data_bench(const DataBenchOptions& o, const ImageDataset& data, const DataBenchWindow& w,
                       const DataBenchFeed& feed, DType dtype, int threads, DecodeMode decode) {
  const SampleShape shape = data.sample_shape();
  const double images = static_cast<double>(o.batches * o.batch_size);
  const double cpu_per_1000 = 1e3 * w.cpu_seconds / images;
  const double rate = images / w.seconds;
  const double busy = w.after.decode_seconds - w.before.decode_seconds;
  const bool gpu = feed.gpu() != nullptr;
  // Images libjpeg-turbo decoded in the window: all of them on the CPU path, the fallbacks on the GPU's.
  const int64_t on_cpu =
      gpu ? w.gpu_after.decoded_on_cpu - w.gpu_before.decoded_on_cpu : w.after.decoded - w.before.decoded;
  if (gpu) {
    std::printf("data-bench: %lld on the JPEG engines, %lld by nvJPEG's CUDA backend, %lld on the CPU\n",
                static_cast<long long>(w.gpu_after.decoded_on_hardware - w.gpu_before.decoded_on_hardware),
                static_cast<long long>(w.gpu_after.decoded_on_gpu_cuda - w.gpu_before.decoded_on_gpu_cuda),
                static_cast<long long>(on_cpu));
    std::printf("data-bench: host time of the stages: %s\n",
                pipeline_profile(w.gpu_before, w.gpu_after, o.batches).c_str());
  }
  std::printf(
      "data-bench: %.1f img/s with %d threads = %.1f img/s per thread | %.2f ms of one thread per image | "
      "%.2f CPU seconds per 1000 images | %lld bad files skipped\n",
      rate, threads, rate / threads, 1e3 * busy / images, cpu_per_1000,
      static_cast<long long>(w.after.bad_files));
  if (w.digest)
    std::printf(
        "data-bench: digest %08x of %lld batches (each waited for: the rate above is no measurement)\n",
        *w.digest, static_cast<long long>(o.warmup_batches + o.batches));
  if (o.json_path.empty()) return;
  nlohmann::json j = {{"command", "data-bench"},
                      {"data", o.data},
                      {"images", data.size()},
                      {"transform", o.train ? "train" : "eval"},
                      {"image_size", shape.height},
                      {"channels", shape.channels},
                      {"dtype", dtype_name(dtype)},
                      {"layout", layout_name(o.layout)},
                      {"batch_size", o.batch_size},
                      {"batches", o.batches},
                      {"threads", threads},
                      {"gpu_decode_threads", gpu ? nlohmann::json(o.gpu_decode_threads) : nlohmann::json()},
                      {"images_per_second", rate},
                      {"images_per_second_per_thread", rate / threads},
                      {"thread_ms_per_image", 1e3 * busy / images},
                      {"cpu_seconds_per_1000_images", cpu_per_1000},
                      {"bad_files", w.after.bad_files},
                      {"decode", decode_mode_name(decode)},
                      {"images_decoded_on_cpu", on_cpu}};
  if (w.digest) j["digest"] = fmt::format("{:08x}", *w.digest);
  write_file_atomically(o.json_path, j.dump(2) + "\n");
  std::printf("result written to %s\n", o.json_path.c_str());
}

}  // namespace

void run_data_bench(const DataBenchOptions& o) {
  const std::string path = data_bench_path(o);
  DLB_REQUIRE(o.batch_size >= 1 && o.batches >= 1 && o.warmup_batches >= 0,
              "data-bench: --batch-size and --batches must be positive");
  if (!o.json_path.empty()) check_writable(o.json_path, "--json", OutputKind::json_object);
  const DType dtype = compute_dtype(o.precision);
  // The batches would be decoded into the GPU's memory where there is one (the training run's device).
  std::string decode_note;
  const DecodeMode decode =
      resolve_decode(o.decode, cuda_backend_available() ? DeviceKind::cuda : DeviceKind::cpu, &decode_note);
  const Layout layout = o.layout;
  auto source = open_images(path);
  ImageDatasetOptions options = default_image_options(*source);
  options.threads = resolve_threads(o.threads, usable_cores() - 1, "--data-threads");
  if (o.image_size != 0) options.image_size = o.image_size;
  check_image_size(options.image_size, options.channels, o.batch_size, dtype, kBuffersInFlight,
                   "--image-size");
  options.train = o.train;
  options.seed = o.seed;
  options.strict = o.strict;
  ImageDataset data(source, options);
  const SampleShape shape = data.sample_shape();
  std::printf(
      "data-bench | %s: %lld images, %d classes | %s transform -> %lldx%lldx%lld %s %s | batch %lld | "
      "%d decoding threads\n",
      data.name().c_str(), static_cast<long long>(data.size()), data.num_classes(),
      o.train ? "training" : "evaluation", static_cast<long long>(shape.channels),
      static_cast<long long>(shape.height), static_cast<long long>(shape.width), dtype_name(dtype),
      layout_name(layout), static_cast<long long>(o.batch_size), options.threads);
  if (!decode_note.empty()) std::printf("data-bench: %s\n", decode_note.c_str());
  DataBenchFeed feed(data, o, dtype, layout, decode, o.warmup_batches + o.batches);
  const DataBenchWindow window = time_batches(o, data, feed);
  report_data_bench(o, data, window, feed, dtype, options.threads, decode);
}

void run_export_images(const ExportOptions& o) {
  DLB_REQUIRE(!o.destination.empty(), "export-images: give the destination folder");
  DLB_REQUIRE(o.quality >= 1 && o.quality <= 100, "--quality {}: must be in 1..100", o.quality);
  const std::string dir = o.data == "fashion-mnist" ? "/usr/share/datasets/fashion-mnist" : o.data;
  defer_stop_to_safe_points();
  StagedFolder staged(o.destination, "export-images");
  std::vector<std::string> reports;
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
    for (int c = 0; c < classes; ++c) {
      std::error_code ec;
      fs::create_directories(fmt::format("{}/{}/class-{:02d}", staged.path(), name, c), ec);
      DLB_REQUIRE(!ec, "export-images: cannot create {}/{} ({}); nothing was written to it", o.destination,
                  name, write_failure(ec.value()));
    }
    const size_t per_image = static_cast<size_t>(images.rows * images.cols);
    for (int64_t i = 0; i < images.count; ++i) {
      stop_if_asked("export-images",
                    fmt::format("after {} of {} images of {}/{}", i, images.count, dir, prefix),
                    o.destination);
      const std::vector<uint8_t> jpeg =
          encode_jpeg(images.pixels.data() + static_cast<size_t>(i) * per_image,
                      static_cast<int>(images.cols), static_cast<int>(images.rows), 1, o.quality);
      staged.write_file(fmt::format("{}/class-{:02d}/{:05d}.jpg", name, labels[static_cast<size_t>(i)], i),
                        jpeg.data(), jpeg.size());
    }
    reports.push_back(fmt::format("export-images: {} images -> {}/{}", images.count, o.destination, name));
  }
  staged.commit();
  for (const std::string& line : reports) std::printf("%s\n", line.c_str());
}

}  // namespace dlbench
