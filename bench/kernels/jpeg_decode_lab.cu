// The GPU input path's lab, before it is a pipeline: what nvJPEG's batched decode (data/cuda/
// jpeg_batch_decoder.h) and the batched augmentation (data/cuda/image_augment.h) reach on one host thread
// and one stream, on a folder of JPEGs. Not a test, and not the pipeline: files are read into memory first,
// and decode, augmentation and the host's part run one after the other, each batch waited for.
//
// Per batch of --batch images (256) drawn in turn from the files: JpegBatchDecoder::decode, then boxes
// from random_resized_crop_box (seed 1) and a random flip each, ImageAugmenter::run into 224x224x3 fp16
// NHWC, then the stream is synchronised. After --warmup batches (3), --batches (20) are timed: images/s,
// and the CPU seconds (user + system, every thread) per 1,000 images. Run once with the hardware engines
// first and once with the DEFAULT backend only.
//
//   jpeg_decode_lab DIR [--batch N] [--batches N] [--warmup N] [--files N]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/kernel_check.h"
#include "core/machine_limits.h"
#include "data/cuda/image_augment.h"
#include "data/cuda/jpeg_batch_decoder.h"
#include "data/image_transform.h"
#include "data/nvjpeg_library.h"

using namespace dlbench;

namespace {

std::vector<std::vector<uint8_t>> read_jpegs(const std::string& dir, size_t most) {
  std::vector<std::vector<uint8_t>> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    files.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (files.size() == most) break;
  }
  return files;
}

void run(const NvjpegLibrary& library, cuda::JpegBackendChoice choice,
         const std::vector<std::vector<uint8_t>>& files, int batch, int batches, int warmup) {
  cudaStream_t stream = nullptr;
  DLB_KERNEL_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cuda::JpegBatchDecoderOptions options;
  options.backend = choice;
  cuda::JpegBatchDecoder decoder(library, options);
  cuda::ImageAugmenter augmenter(batch);
  void* out = nullptr;
  DLB_KERNEL_CHECK(cudaMalloc(&out, static_cast<size_t>(batch) * 224 * 224 * 3 * 2));
  const cuda::AugmentOutput output{out, 224, 224, 3, DType::f16, Layout::nhwc};
  std::mt19937_64 rng(1);
  size_t next = 0, failed = 0, on_hardware = 0, decoded = 0;
  std::vector<std::span<const uint8_t>> jpegs(static_cast<size_t>(batch));
  std::vector<cuda::AugmentImage> images;
  double start = 0, cpu_start = 0;
  for (int b = 0; b < warmup + batches; ++b) {
    if (b == warmup) {
      DLB_KERNEL_CHECK(cudaStreamSynchronize(stream));
      start = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
      cpu_start = process_cpu_seconds();
    }
    for (auto& jpeg : jpegs) {
      jpeg = std::span<const uint8_t>(files[next]);
      next = (next + 1) % files.size();
    }
    const std::span<const cuda::DecodedJpeg> results = decoder.decode(jpegs, stream);
    images.clear();
    for (const cuda::DecodedJpeg& r : results) {
      if (!r.decoded()) {
        ++failed;  // the pipeline decodes these on the CPU; the lab only counts them
        continue;
      }
      on_hardware += r.status == cuda::JpegDecodeStatus::hardware;
      ++decoded;
      const CropBox box = random_resized_crop_box(r.width, r.height, rng);
      images.push_back(cuda::augment_image(r, box, rng() % 2 ? cuda::Flip::horizontal : cuda::Flip::none));
    }
    augmenter.run(images, output, kImageNetNormalization, stream);
    DLB_KERNEL_CHECK(cudaStreamSynchronize(stream));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count() - start;
  const double timed = static_cast<double>(batches) * batch;
  std::printf(
      "%-14s %9.0f img/s  %6.2f CPU s per 1000 images  (%s; %zu of %zu decoded on the engines, %zu failed)\n",
      choice == cuda::JpegBackendChoice::hardware_first ? "hardware_first" : "cuda_only", timed / seconds,
      1e3 * (process_cpu_seconds() - cpu_start) / timed,
      decoder.hardware_note().empty() ? "-" : decoder.hardware_note().c_str(), on_hardware, decoded, failed);
  DLB_KERNEL_CHECK(cudaFree(out));
  DLB_KERNEL_CHECK(cudaStreamDestroy(stream));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: jpeg_decode_lab DIR [--batch N] [--batches N] [--warmup N] [--files N]\n");
    return 2;
  }
  int batch = 256, batches = 20, warmup = 3;
  size_t most = 4096;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long value = std::atol(argv[i + 1]);
    if (flag == "--batch") batch = static_cast<int>(value);
    if (flag == "--batches") batches = static_cast<int>(value);
    if (flag == "--warmup") warmup = static_cast<int>(value);
    if (flag == "--files") most = static_cast<size_t>(value);
  }
  std::string why_not;
  const NvjpegLibrary* library = NvjpegLibrary::open(&why_not);
  if (!library) {
    std::fprintf(stderr, "jpeg_decode_lab: %s\n", why_not.c_str());
    return 1;
  }
  const std::vector<std::vector<uint8_t>> files = read_jpegs(argv[1], most);
  if (files.empty()) {
    std::fprintf(stderr, "jpeg_decode_lab: no files under %s\n", argv[1]);
    return 1;
  }
  std::printf("nvJPEG %s; %zu files from %s; batch %d, %d timed batches after %d; out 224x224x3 fp16 NHWC\n",
              library->version().c_str(), files.size(), argv[1], batch, batches, warmup);
  run(*library, cuda::JpegBackendChoice::hardware_first, files, batch, batches, warmup);
  run(*library, cuda::JpegBackendChoice::cuda_only, files, batch, batches, warmup);
  return 0;
}
