// libFuzzer target for JPEG decoding and the training transform (src/data/jpeg_image.h,
// src/data/image_transform.h): any bytes must give false + a message or a valid image, never a crash, a
// leak, a hang, a sanitizer report or an exception.
//
// fuzz-build: src/data/jpeg_image.cc src/data/image_transform.cc src/core/status.cc -lfmt -ljpeg
// Build (from the repository root):
//   clang++-14 -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I src \
//     fuzz/jpeg_decode_fuzz.cc src/data/jpeg_image.cc src/data/image_transform.cc src/core/status.cc \
//     -lfmt -ljpeg -o jpeg_decode_fuzz
// jpeg_image.cc and image_transform.cc need only src/core/status.cc (throw_check_failure, behind
// DLB_CHECK); tensor.h's DType and Layout are enums, no code. Without -fno-sanitize-recover UBSan only
// prints, and libFuzzer would not stop at a report. libjpeg itself is the system's, not instrumented:
// ASan sees its heap (malloc is intercepted: leaks, double frees) but not its stray reads and writes.
// Run:  ./jpeg_decode_fuzz CORPUS_DIR [SEED_DIR] -max_total_time=60 -rss_limit_mb=2048 -timeout=10
// Seed it with a few small JPEG files as they are (baseline, progressive, gray, CMYK, restart intervals,
// arithmetic coding...): random bytes rarely get past the SOI marker and the first tables, and libjpeg
// is not instrumented, so its own branches do not guide the mutations (only this code's do).
//
// An input that starts with the SOI marker (FF D8) is the file, and its last byte (bit 0 cleared) picks
// the options below. Any other input: its first byte picks them, and the rest is
//   bit 0 = 0: the file;
//   bit 0 = 1: an image that the harness encodes with encode_jpeg (size, channels, quality, progressive,
//              subsampling, pixels), then corrupts with the input's last bytes (3 per patch: a 16-bit
//              position and a byte): mutations of valid files even without a corpus.
// bit 1: decode to 1 channel instead of 3; bits 2-3: output dtype (f32, f16, bf16); bit 4: nhwc; bit 5:
// dct_scale_eighths' fast scales only.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "data/image_transform.h"
#include "data/jpeg_image.h"

namespace {

using namespace dlbench;

constexpr int64_t kMaxPixels = 1 << 22;  // 4 Mpixel: hostile headers stay cheap, real images still pass
constexpr int kOut = 24;                 // output size: small, the transform's cost is not the target

[[noreturn]] void fail() { std::abort(); }  // an invariant broken: libFuzzer reports the input

// An encoded image described by `in` (mode bit 0 = 1), or empty when `in` is too short.
std::vector<uint8_t> synthesize(std::span<const uint8_t> in) {
  if (in.size() < 6) return {};
  const int width = 1 + in[0] % 48, height = 1 + in[1] % 48;
  const int channels = (in[2] % 3 == 0) ? 1 : (in[2] % 3 == 1) ? 3 : 4;
  const int quality = 1 + in[3] % 100;
  JpegEncodeOptions options;
  options.progressive = in[4] & 1;
  options.subsample_chroma = in[4] & 2;
  const int patches = (in[4] >> 2) & 7;
  const size_t patch_bytes = static_cast<size_t>(patches) * 3;
  const std::span<const uint8_t> body = in.subspan(5);
  if (body.size() < patch_bytes) return {};
  const std::span<const uint8_t> pixel_source = body.first(body.size() - patch_bytes);
  std::vector<uint8_t> pixels(static_cast<size_t>(width) * height * channels);
  for (size_t i = 0; i < pixels.size(); ++i)
    pixels[i] = pixel_source.empty() ? static_cast<uint8_t>(i * 37) : pixel_source[i % pixel_source.size()];
  std::vector<uint8_t> bytes = encode_jpeg(pixels.data(), width, height, channels, quality, options);
  const std::span<const uint8_t> patch = body.last(patch_bytes);
  for (int p = 0; p < patches; ++p) {
    const size_t at = (size_t{patch[3 * p]} << 8 | patch[3 * p + 1]) % bytes.size();
    bytes[at] = patch[3 * p + 2];
  }
  return bytes;
}

void check_output(const std::vector<float>& out) {
  for (float v : out)
    if (!std::isfinite(v) || std::fabs(v) > 3.0f) fail();  // ImageNet normalisation: within about +-2.7
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    JpegInfo info;
    RgbImage image;
    std::string error;
    if (read_jpeg_info({}, info, error) || decode_jpeg({}, 8, 3, image, error) || error.empty()) fail();
    return 0;
  }
  const bool plain_file = size >= 2 && data[0] == 0xff && data[1] == 0xd8;
  const uint8_t mode = plain_file ? static_cast<uint8_t>(data[size - 1] & ~1u) : data[0];
  std::span<const uint8_t> bytes(data + (plain_file ? 0 : 1), size - (plain_file ? 0 : 1));
  std::vector<uint8_t> synthesized;
  if (mode & 1) {
    synthesized = synthesize(bytes);
    bytes = synthesized;
  }
  const int channels = (mode & 2) ? 1 : 3;
  const DType dtype = ((mode >> 2) & 3) == 0 ? DType::f32 : ((mode >> 2) & 3) == 1 ? DType::f16 : DType::bf16;
  const Layout layout = (mode & 16) ? Layout::nhwc : Layout::nchw;

  JpegInfo info;
  std::string error;
  const bool header_ok = read_jpeg_info(bytes, info, error);
  if (!header_ok && error.empty()) fail();
  if (header_ok && (info.width <= 0 || info.height <= 0 || info.width > 65535 || info.height > 65535)) fail();

  uint64_t seed = 0;
  for (size_t i = 0; i < bytes.size() && i < 64; ++i) seed = seed * 131 + bytes[i];
  std::mt19937_64 rng(seed);
  CropBox box{0, 0, 1, 1};
  if (header_ok) box = random_resized_crop_box(info.width, info.height, rng);
  const int chosen = header_ok ? dct_scale_eighths(static_cast<int>(box.width), static_cast<int>(box.height),
                                                   kOut, kOut, (mode & 32) != 0)
                               : 8;

  RgbImage image;
  std::vector<float> out_f32(static_cast<size_t>(3) * kOut * kOut);
  std::vector<uint16_t> out_16(static_cast<size_t>(3) * kOut * kOut);
  for (int scale : {8, 4, 1, chosen}) {
    error.clear();
    if (!decode_jpeg(bytes, scale, channels, image, error, kMaxPixels)) {
      if (error.empty()) fail();
      continue;
    }
    // A decoded image: the header read it too, the sizes are libjpeg's scaled ones, the buffer matches.
    if (!header_ok) fail();
    if (image.width != dct_scaled_size(info.width, scale) ||
        image.height != dct_scaled_size(info.height, scale) || image.channels != channels ||
        image.pixels.size() != static_cast<size_t>(image.width) * static_cast<size_t>(image.height) *
                                   static_cast<size_t>(channels))
      fail();
    const CropBox boxes[] = {box,
                             center_crop_box(info.width, info.height, kOut * 8 / 7, kOut),
                             {0, 0, static_cast<double>(info.width), static_cast<double>(info.height)}};
    for (const CropBox& b : boxes) {
      const bool flip = (rng() & 1) != 0;
      if (dtype == DType::f32) {
        crop_resize_normalize(image, scale, b, kOut, kOut, flip, kImageNetNormalization, DType::f32, layout,
                              out_f32.data());
        check_output(out_f32);
      } else {
        crop_resize_normalize(image, scale, b, kOut, kOut, flip, kImageNetNormalization, dtype, layout,
                              out_16.data());
      }
    }
  }
  return 0;
}
