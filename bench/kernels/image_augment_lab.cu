// The GPU augmentation's lab (data/cuda/image_augment.h): ResNet-50's training batch, checked against the
// CPU path and timed beside it. Not a test (tests/backend_cuda_kernels/image_augment_test.cc is).
//
// The batch: --batch images (256) of photo sizes around 500x375 (landscape and portrait), random pixels,
// decoded at 8/8 and at 4/8 (as dct_scale_eighths picks for small crops), in device memory with padded
// rows as nvJPEG leaves them; boxes from random_resized_crop_box (seed 1), a random flip each; out
// 224x224x3 in the chosen dtype and layout (f16 NHWC by default), ImageNet normalisation.
//   * validation: every value against crop_resize_normalize's, "wrong" = further apart than one unit in the
//     last place of the dtype (f32: 1e-6), "exact" = the share of values bit for bit the CPU's;
//   * GPU: the median of --reps calls of ImageAugmenter::run (descriptor upload + the one kernel) between
//     two events; images/s = batch / median; GB/s = (output bytes written + source bytes inside the crop
//     boxes, the least the kernel must read) / median;
//   * CPU: crop_resize_normalize over the same batch on one core (this thread), the median of 3 passes.
//
//   image_augment_lab [--reps N] [--batch N] [--dtype f32|f16|bf16] [--layout nhwc|nchw]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/kernel_check.h"
#include "backend/reference/half_float.h"
#include "data/cuda/image_augment.h"
#include "data/image_transform.h"
#include "data/jpeg_image.h"

using namespace dlbench;

namespace {

constexpr int kOut = 224;

struct Batch {
  std::vector<RgbImage> images;           // the CPU's copies (dense rows)
  std::vector<cuda::AugmentImage> items;  // the device's, pixels filled in by upload()
  std::vector<uint8_t> flips;
  double crop_bytes = 0;  // source bytes inside the boxes
};

Batch make_batch(int count, int scale_eighths) {
  static const int kSizes[][2] = {{500, 375}, {375, 500}, {500, 333}, {480, 360}, {500, 400}, {333, 500}};
  std::mt19937_64 pixels(2024), boxes(1);
  Batch b;
  for (int i = 0; i < count; ++i) {
    const int full_w = kSizes[i % 6][0], full_h = kSizes[i % 6][1];
    RgbImage image;
    image.width = dct_scaled_size(full_w, scale_eighths);
    image.height = dct_scaled_size(full_h, scale_eighths);
    image.channels = 3;
    image.pixels.resize(size_t(image.width) * image.height * 3);
    for (uint8_t& p : image.pixels) p = static_cast<uint8_t>(pixels() >> 56);
    cuda::AugmentImage item;
    item.width = image.width, item.height = image.height, item.channels = 3;
    item.pitch = (image.width * 3 + 63) / 64 * 64;
    item.scale_eighths = scale_eighths;
    item.box = random_resized_crop_box(full_w, full_h, boxes);
    const bool flip = (boxes() >> 63) != 0;
    item.flip = flip ? cuda::Flip::horizontal : cuda::Flip::none;
    const double s = scale_eighths / 8.0;
    b.crop_bytes += std::min(item.box.width * s + 1, double(image.width)) *
                    std::min(item.box.height * s + 1, double(image.height)) * 3;
    b.images.push_back(std::move(image));
    b.items.push_back(item);
    b.flips.push_back(flip);
  }
  return b;
}

// All images in one device buffer at their pitch; returns it (cudaFree'd by the caller).
void* upload(Batch& b) {
  size_t total = 0;
  for (const auto& item : b.items) total += size_t(item.pitch) * item.height;
  std::vector<uint8_t> host(total, 0);
  uint8_t* device = nullptr;
  DLB_KERNEL_CHECK(cudaMalloc(&device, total));
  size_t at = 0;
  for (size_t i = 0; i < b.items.size(); ++i) {
    const size_t row = size_t(b.images[i].width) * 3;
    for (int y = 0; y < b.images[i].height; ++y)
      std::memcpy(host.data() + at + y * size_t(b.items[i].pitch), b.images[i].pixels.data() + y * row, row);
    b.items[i].pixels = device + at;
    at += size_t(b.items[i].pitch) * b.items[i].height;
  }
  DLB_KERNEL_CHECK(cudaMemcpy(device, host.data(), total, cudaMemcpyHostToDevice));
  return device;
}

double value(const uint8_t* p, DType d, size_t i) {
  if (d == DType::f32) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  uint16_t bits;
  std::memcpy(&bits, p + 2 * i, 2);
  return d == DType::f16 ? f16_to_double(bits) : bf16_to_double(bits);
}

int ordered16(const uint8_t* p, size_t i) {
  uint16_t bits;
  std::memcpy(&bits, p + 2 * i, 2);
  return bits & 0x8000 ? -int(bits & 0x7fff) : int(bits);
}

struct Check {
  size_t values = 0, wrong = 0, exact = 0;
};

// The GPU's samples against the CPU's, which are left in `cpu` (the timing reuses the buffer).
Check validate(const Batch& b, const std::vector<uint8_t>& gpu, std::vector<uint8_t>& cpu, DType dtype,
               Layout layout) {
  const size_t per_sample = size_t(kOut) * kOut * 3 * dtype_size(dtype), n = per_sample / dtype_size(dtype);
  Check c;
  for (size_t i = 0; i < b.images.size(); ++i) {
    uint8_t* want = cpu.data() + i * per_sample;
    const uint8_t* got = gpu.data() + i * per_sample;
    crop_resize_normalize(b.images[i], b.items[i].scale_eighths, b.items[i].box, kOut, kOut, b.flips[i] != 0,
                          kImageNetNormalization, dtype, layout, want);
    for (size_t k = 0; k < n; ++k) {
      const bool ok = dtype == DType::f32 ? std::abs(value(got, dtype, k) - value(want, dtype, k)) <= 1e-6
                                          : std::abs(ordered16(got, k) - ordered16(want, k)) <= 1;
      c.wrong += !ok;
      c.exact +=
          std::memcmp(got + k * dtype_size(dtype), want + k * dtype_size(dtype), dtype_size(dtype)) == 0;
    }
    c.values += n;
  }
  return c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double gpu_median_us(cuda::ImageAugmenter& augmenter, const Batch& b, const cuda::AugmentOutput& out,
                     cudaStream_t stream, int reps) {
  for (int i = 0; i < 3; ++i) augmenter.run(b.items, out, kImageNetNormalization, stream);
  std::vector<cudaEvent_t> start(reps), stop(reps);
  for (int i = 0; i < reps; ++i) {
    DLB_KERNEL_CHECK(cudaEventCreate(&start[i]));
    DLB_KERNEL_CHECK(cudaEventCreate(&stop[i]));
  }
  for (int i = 0; i < reps; ++i) {
    DLB_KERNEL_CHECK(cudaEventRecord(start[i], stream));
    augmenter.run(b.items, out, kImageNetNormalization, stream);
    DLB_KERNEL_CHECK(cudaEventRecord(stop[i], stream));
  }
  DLB_KERNEL_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> us(reps);
  for (int i = 0; i < reps; ++i) {
    float ms = 0;
    DLB_KERNEL_CHECK(cudaEventElapsedTime(&ms, start[i], stop[i]));
    us[i] = 1e3 * ms;
    cudaEventDestroy(start[i]);
    cudaEventDestroy(stop[i]);
  }
  return median(us);
}

double cpu_median_us(const Batch& b, std::vector<uint8_t>& out, DType dtype, Layout layout) {
  const size_t per_sample = size_t(kOut) * kOut * 3 * dtype_size(dtype);
  std::vector<double> us;
  for (int pass = 0; pass < 3; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < b.images.size(); ++i)
      crop_resize_normalize(b.images[i], b.items[i].scale_eighths, b.items[i].box, kOut, kOut,
                            b.flips[i] != 0, kImageNetNormalization, dtype, layout,
                            out.data() + i * per_sample);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(us);
}

// One row of the table; false if a value is wrong.
bool lab_scale(cuda::ImageAugmenter& augmenter, int count, int scale_eighths, DType dtype, Layout layout,
               cudaStream_t stream, int reps) {
  Batch b = make_batch(count, scale_eighths);
  void* pixels = upload(b);
  const size_t bytes = size_t(count) * kOut * kOut * 3 * dtype_size(dtype);
  void* y = nullptr;
  DLB_KERNEL_CHECK(cudaMalloc(&y, bytes));
  DLB_KERNEL_CHECK(cudaMemset(y, 0xff, bytes));
  const cuda::AugmentOutput out{y, kOut, kOut, 3, dtype, layout};
  augmenter.run(b.items, out, kImageNetNormalization, stream);
  DLB_KERNEL_CHECK(cudaStreamSynchronize(stream));
  std::vector<uint8_t> gpu(bytes), cpu(bytes);
  DLB_KERNEL_CHECK(cudaMemcpy(gpu.data(), y, bytes, cudaMemcpyDeviceToHost));
  const Check check = validate(b, gpu, cpu, dtype, layout);
  const double gpu_us = gpu_median_us(augmenter, b, out, stream, reps);
  const double cpu_us = cpu_median_us(b, cpu, dtype, layout);
  std::printf("%-6d %-5s %-9s %-5s %9zu %7.4f %10.1f %10.0f %8.0f %10.1f %9.0f %8.0fx\n", scale_eighths,
              dtype_name(dtype), "224x224", layout_name(layout), check.wrong,
              double(check.exact) / double(check.values), gpu_us, count / (gpu_us * 1e-6),
              (double(bytes) + b.crop_bytes) / (gpu_us * 1e3), cpu_us * 1e-3, count / (cpu_us * 1e-6),
              cpu_us / gpu_us);
  DLB_KERNEL_CHECK(cudaFree(y));
  DLB_KERNEL_CHECK(cudaFree(pixels));
  return check.wrong == 0;
}

bool parse(int argc, char** argv, int& reps, int& batch, DType& dtype, Layout& layout) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], v = argv[i + 1];
    if (flag == "--reps") {
      reps = std::max(1, std::atoi(v.c_str()));
    } else if (flag == "--batch") {
      batch = std::clamp(std::atoi(v.c_str()), 1, 65535);
    } else if (flag == "--dtype" && (v == "f32" || v == "f16" || v == "bf16")) {
      dtype = v == "f32" ? DType::f32 : v == "f16" ? DType::f16 : DType::bf16;
    } else if (flag == "--layout" && (v == "nhwc" || v == "nchw")) {
      layout = v == "nhwc" ? Layout::nhwc : Layout::nchw;
    } else {
      return false;
    }
  }
  return argc % 2 == 1;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 50, batch = 256;
  DType dtype = DType::f16;
  Layout layout = Layout::nhwc;
  if (!parse(argc, argv, reps, batch, dtype, layout)) {
    std::fprintf(stderr, "usage: %s [--reps N] [--batch N] [--dtype f32|f16|bf16] [--layout nhwc|nchw]\n",
                 argv[0]);
    return 2;
  }
  try {
    cudaDeviceProp prop{};
    DLB_KERNEL_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf(
        "device: %s, %d SMs; batch %d of ~500x375 RGB, out 224x224x3; GPU: median of %d calls, "
        "CPU: one core, median of 3 passes\n\n",
        prop.name, prop.multiProcessorCount, batch, reps);
    std::printf("%-6s %-5s %-9s %-5s %9s %7s %10s %10s %8s %10s %9s %9s\n", "scale", "dtype", "out", "layout",
                "wrong", "exact", "gpu_us", "gpu_img/s", "GB/s", "cpu_ms", "cpu_img/s", "speedup");
    cudaStream_t stream = nullptr;
    // Blocking: the plain cudaMemcpy / cudaMemset calls (legacy default stream) are ordered with it.
    DLB_KERNEL_CHECK(cudaStreamCreate(&stream));
    bool ok = true;
    {
      cuda::ImageAugmenter augmenter(batch);
      for (int scale : {8, 4}) ok = lab_scale(augmenter, batch, scale, dtype, layout, stream, reps) && ok;
    }
    DLB_KERNEL_CHECK(cudaStreamDestroy(stream));
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "image_augment_lab: %s\n", e.what());
    return 1;
  }
}
