#include "data/jpeg_image.h"

#include <gtest/gtest.h>

#include "image_test_util.h"

// clang-format off
#include <cstddef>  // libjpeg's headers need size_t and FILE declared first
#include <cstdio>
#include <jpeglib.h>
// clang-format on

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/status.h"
#include "temp_dir.h"

namespace dlbench {
namespace {

using testing::read_file;
using testing::TempDir;
using testing::write_file;

// JPEG tolerances, at quality 95 unless said otherwise: a decoded pixel may differ from what was encoded
// by the quantisation of its DCT coefficients and the colour conversions' rounding. Flat areas aligned to
// blocks keep only their DC coefficient (quantised with step 2 at quality 95): max abs error <= 2 (1
// measured). Smooth content (gradients, low frequencies): max abs error <= 8, mean <= 2 (measured with
// libjpeg-turbo 2.1.5: max 4, mean <= 0.65). Decodes are deterministic: libjpeg-turbo's ISLOW IDCT gives
// the same bits with or without SIMD.

using testing::make_image;

std::vector<uint8_t> encode(const RgbImage& image, int quality = 95, JpegEncodeOptions options = {}) {
  return encode_jpeg(image.pixels.data(), image.width, image.height, image.channels, quality, options);
}

RgbImage decode_ok(const std::vector<uint8_t>& bytes, int scale = 8, int channels = 3) {
  RgbImage out;
  std::string error;
  EXPECT_TRUE(decode_jpeg(bytes, scale, channels, out, error)) << error;
  return out;
}

std::string decode_error(const std::vector<uint8_t>& bytes, int64_t max_pixels = 100'000'000) {
  RgbImage out;
  std::string error;
  EXPECT_FALSE(decode_jpeg(bytes, 8, 3, out, error, max_pixels))
      << "decoded a " << out.width << "x" << out.height << " image";
  EXPECT_FALSE(error.empty());
  return error;
}

struct Difference {
  int max = 0;
  double mean = 0;
};

Difference difference(const RgbImage& a, const RgbImage& b) {
  EXPECT_EQ(a.width, b.width);
  EXPECT_EQ(a.height, b.height);
  EXPECT_EQ(a.channels, b.channels);
  Difference d;
  if (a.pixels.size() != b.pixels.size() || a.pixels.empty()) {
    ADD_FAILURE() << "sizes differ: " << a.pixels.size() << " vs " << b.pixels.size();
    return d;
  }
  double sum = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) {
    const int e = std::abs(int{a.pixels[i]} - int{b.pixels[i]});
    d.max = std::max(d.max, e);
    sum += e;
  }
  d.mean = sum / static_cast<double>(a.pixels.size());
  return d;
}

int pixel(const RgbImage& image, int x, int y, int c) {
  return image.pixels[(static_cast<size_t>(y) * image.width + x) * image.channels + c];
}

// Smooth content: gradients plus a low-frequency wave, distinct per channel.
RgbImage smooth_image(int width, int height, int channels = 3) {
  return make_image(width, height, channels, [&](int x, int y, int c) {
    const double wave = 40 * std::sin(x * 0.05 + c) * std::cos(y * 0.04 - c);
    return static_cast<int>(std::lround(30 + 150.0 * x / width + 50.0 * y / height * (c == 1 ? -1 : 1) +
                                        wave + (c == 2 ? 20 : 0)));
  });
}

// CMYK pixels stored as YCCK (Photoshop's usual CMYK JPEG: C, M, Y through the YCbCr transform, K as is),
// with the Adobe marker saying so; encode_jpeg writes plain CMYK only, so libjpeg directly.
std::vector<uint8_t> encode_ycck(const RgbImage& cmyk, int quality) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);  // exits on error: fine in a test that passes valid arguments
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = static_cast<JDIMENSION>(cmyk.width);
  cinfo.image_height = static_cast<JDIMENSION>(cmyk.height);
  cinfo.input_components = 4;
  cinfo.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_colorspace(&cinfo, JCS_YCCK);  // writes the Adobe marker with transform 2
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row =
        const_cast<uint8_t*>(cmyk.pixels.data() + static_cast<size_t>(cinfo.next_scanline) * cmyk.width * 4);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::vector<uint8_t> bytes(buffer, buffer + size);
  std::free(buffer);
  return bytes;
}

size_t find_marker(const std::vector<uint8_t>& bytes, uint8_t marker) {
  for (size_t i = 0; i + 1 < bytes.size(); ++i)
    if (bytes[i] == 0xff && bytes[i + 1] == marker) return i;
  return std::string::npos;
}

// ---- known content ----

TEST(JpegKnownContent, FlatColoursComeBackWithinTwo) {
  const int colours[][3] = {{0, 0, 0}, {255, 255, 255}, {200, 30, 90}, {17, 128, 240}, {128, 128, 128}};
  for (const auto& rgb : colours) {
    const RgbImage image = make_image(48, 32, 3, [&](int, int, int c) { return rgb[c]; });
    const RgbImage back = decode_ok(encode(image));
    const Difference d = difference(image, back);
    EXPECT_LE(d.max, 2) << rgb[0] << "," << rgb[1] << "," << rgb[2];
  }
}

TEST(JpegKnownContent, GradientsWithinTolerance) {
  const RgbImage horizontal =
      make_image(160, 120, 3, [](int x, int, int c) { return x * 255 / 159 - c * 20; });
  const RgbImage vertical = make_image(160, 120, 3, [](int, int y, int c) { return 255 - y * 2 + c * 10; });
  const RgbImage smooth = smooth_image(160, 120);
  for (const RgbImage* image : {&horizontal, &vertical, &smooth}) {
    const Difference d = difference(*image, decode_ok(encode(*image)));
    EXPECT_LE(d.max, 8);
    EXPECT_LE(d.mean, 2.0);
  }
  // Quality 100 without chroma subsampling: what remains is mostly the YCbCr round trip's rounding
  // (measured: max 4, mean 0.45).
  const Difference d = difference(smooth, decode_ok(encode(smooth, 100, {.subsample_chroma = false})));
  EXPECT_LE(d.max, 5);
  EXPECT_LE(d.mean, 0.6);
}

TEST(JpegKnownContent, CheckerboardOfBlocks) {
  // 8x8 blocks aligned to the DCT's: every block is flat, so only DC coefficients remain.
  const RgbImage grey_board =
      make_image(64, 48, 3, [](int x, int y, int) { return ((x / 8 + y / 8) % 2) * 255; });
  Difference d = difference(grey_board, decode_ok(encode(grey_board)));
  EXPECT_LE(d.max, 2);
  EXPECT_LE(d.mean, 0.5);
  // Colour blocks: chroma changes every 8 pixels, which 4:2:0 would average over 16; encode 4:4:4.
  const RgbImage colour_board = make_image(64, 48, 3, [](int x, int y, int c) {
    const int colour[2][3] = {{220, 40, 30}, {20, 90, 230}};
    return colour[(x / 8 + y / 8) % 2][c];
  });
  d = difference(colour_board, decode_ok(encode(colour_board, 100, {.subsample_chroma = false})));
  EXPECT_LE(d.max, 3);
  EXPECT_LE(d.mean, 1.0);
}

TEST(JpegKnownContent, GrayscaleDecodedAsRgbIsTheReplicatedGray) {
  const RgbImage gray = smooth_image(70, 50, 1);
  const std::vector<uint8_t> bytes = encode(gray);
  JpegInfo info;
  std::string error;
  ASSERT_TRUE(read_jpeg_info(bytes, info, error)) << error;
  EXPECT_EQ(info.components, 1);
  const RgbImage one = decode_ok(bytes, 8, 1);
  const Difference d = difference(gray, one);  // no colour conversion: measured max 1, mean 0.15
  EXPECT_LE(d.max, 4);
  EXPECT_LE(d.mean, 1.0);
  const RgbImage three = decode_ok(bytes, 8, 3);
  ASSERT_EQ(three.channels, 3);
  ASSERT_EQ(three.pixels.size(), one.pixels.size() * 3);
  for (size_t i = 0; i < one.pixels.size(); ++i)
    for (int c = 0; c < 3; ++c) ASSERT_EQ(three.pixels[i * 3 + c], one.pixels[i]) << "pixel " << i;
}

TEST(JpegKnownContent, RgbDecodedAsLuminance) {
  const RgbImage rgb = smooth_image(64, 40);
  const std::vector<uint8_t> bytes = encode(rgb, 95, {.subsample_chroma = false});
  const RgbImage colour = decode_ok(bytes, 8, 3);
  const RgbImage luma = decode_ok(bytes, 8, 1);
  ASSERT_EQ(luma.channels, 1);
  ASSERT_EQ(luma.pixels.size(), colour.pixels.size() / 3);
  for (size_t i = 0; i < luma.pixels.size(); ++i) {
    const double expected =
        0.299 * colour.pixels[i * 3] + 0.587 * colour.pixels[i * 3 + 1] + 0.114 * colour.pixels[i * 3 + 2];
    ASSERT_NEAR(luma.pixels[i], expected, 1.5) << "pixel " << i;  // Y decoded directly vs from rounded RGB
  }
}

TEST(JpegKnownContent, AdobeCmykDecodesToRgb) {
  // Four flat 16x16 quadrants of CMYK stored inverted, as Photoshop writes it (255 = no ink), with the
  // Adobe marker libjpeg writes for CMYK. Expected RGB: (255 - ink) (255 - K) / 255 per channel.
  struct Quadrant {
    int stored[4];
    int rgb[3];
  };
  const Quadrant quadrants[4] = {
      {{0, 255, 255, 255}, {0, 255, 255}},    // full cyan
      {{255, 255, 255, 0}, {0, 0, 0}},        // full black
      {{255, 0, 255, 255}, {255, 0, 255}},    // full magenta
      {{200, 150, 100, 128}, {100, 75, 50}},  // a brown with half black
  };
  const RgbImage cmyk =
      make_image(32, 32, 4, [&](int x, int y, int c) { return quadrants[(y / 16) * 2 + x / 16].stored[c]; });
  // Plain CMYK (encode_jpeg) and YCCK: the same colours (YCCK's colour transform adds rounding: 4).
  for (bool ycck : {false, true}) {
    SCOPED_TRACE(ycck ? "YCCK" : "CMYK");
    const std::vector<uint8_t> bytes = ycck ? encode_ycck(cmyk, 98) : encode(cmyk, 98);
    JpegInfo info;
    std::string error;
    ASSERT_TRUE(read_jpeg_info(bytes, info, error)) << error;
    EXPECT_EQ(info.components, 4);
    const RgbImage rgb = decode_ok(bytes, 8, 3);
    const RgbImage luma = decode_ok(bytes, 8, 1);
    ASSERT_EQ(rgb.width, 32);
    ASSERT_EQ(rgb.channels, 3);
    for (int q = 0; q < 4; ++q) {
      const int x = (q % 2) * 16 + 8, y = (q / 2) * 16 + 8;  // a quadrant's centre, away from its edges
      for (int c = 0; c < 3; ++c)
        EXPECT_NEAR(pixel(rgb, x, y, c), quadrants[q].rgb[c], 4) << "quadrant " << q << " channel " << c;
      const double expected_luma =
          0.299 * quadrants[q].rgb[0] + 0.587 * quadrants[q].rgb[1] + 0.114 * quadrants[q].rgb[2];
      EXPECT_NEAR(pixel(luma, x, y, 0), expected_luma, 4) << "quadrant " << q;
    }
  }
}

TEST(JpegKnownContent, ProgressiveDecodesLikeBaseline) {
  const RgbImage image = smooth_image(90, 70);
  const RgbImage baseline = decode_ok(encode(image, 90));
  const RgbImage progressive = decode_ok(encode(image, 90, {.progressive = true}));
  EXPECT_EQ(difference(baseline, progressive).max, 0);  // same coefficients, other order
}

TEST(JpegHeader, ReadsSizeAndComponents) {
  const RgbImage image = smooth_image(123, 45);
  JpegInfo info;
  std::string error;
  ASSERT_TRUE(read_jpeg_info(encode(image), info, error)) << error;
  EXPECT_EQ(info.width, 123);
  EXPECT_EQ(info.height, 45);
  EXPECT_EQ(info.components, 3);
}

// ---- DCT-domain scaling ----

TEST(JpegDctScale, HalfScaleIsCloseToABoxFilteredFullDecode) {
  const RgbImage image = smooth_image(128, 96);
  const std::vector<uint8_t> bytes = encode(image, 95);
  const RgbImage full = decode_ok(bytes, 8);
  const RgbImage half = decode_ok(bytes, 4);
  ASSERT_EQ(half.width, 64);
  ASSERT_EQ(half.height, 48);
  const RgbImage boxed = make_image(64, 48, 3, [&](int x, int y, int c) {
    const int sum = pixel(full, 2 * x, 2 * y, c) + pixel(full, 2 * x + 1, 2 * y, c) +
                    pixel(full, 2 * x, 2 * y + 1, c) + pixel(full, 2 * x + 1, 2 * y + 1, c);
    return (sum + 2) / 4;
  });
  const Difference d = difference(half, boxed);  // measured: max 2, mean 0.24
  EXPECT_LE(d.max, 4);
  EXPECT_LE(d.mean, 0.75);
}

TEST(JpegDctScale, ScaledSizesAreLibjpegs) {
  const std::vector<uint8_t> bytes = encode(smooth_image(37, 23));
  for (int scale = 1; scale <= 8; ++scale) {
    const RgbImage out = decode_ok(bytes, scale);
    EXPECT_EQ(out.width, (37 * scale + 7) / 8) << "scale " << scale;
    EXPECT_EQ(out.height, (23 * scale + 7) / 8) << "scale " << scale;
    EXPECT_EQ(out.width, dct_scaled_size(37, scale));
    EXPECT_EQ(out.pixels.size(), static_cast<size_t>(out.width) * out.height * 3);
  }
}

TEST(JpegDctScale, SmallestScaleKeepingTheCropAtLeastTheTarget) {
  // Any eighth (fast_scales_only = false) and, by default, only the SIMD scales 1/8, 2/8, 4/8, 8/8.
  auto any = [](int cw, int ch, int tw, int th) { return dct_scale_eighths(cw, ch, tw, th, false); };
  // 2000x1500, whole image to 224: 1/8 would give 250x187.5 (too short), 2/8 gives 500x375.
  EXPECT_EQ(any(2000, 1500, 224, 224), 2);
  EXPECT_EQ(dct_scale_eighths(2000, 1500, 224, 224), 2);
  // 500x375 (an ImageNet photo) whole: 375 * 4/8 = 187.5 < 224, 375 * 5/8 = 234.4; 5/8 is no fast scale.
  EXPECT_EQ(any(500, 375, 224, 224), 5);
  EXPECT_EQ(dct_scale_eighths(500, 375, 224, 224), 8);
  // Its evaluation centre crop (328x328 in full-size pixels): 5/8 gives 205, 6/8 gives 246.
  EXPECT_EQ(any(328, 328, 224, 224), 6);
  EXPECT_EQ(dct_scale_eighths(328, 328, 224, 224), 8);
  // 1000x800: 3/8 gives 300x300 (any); of the fast ones 2/8 gives 200 (too short), 4/8 400.
  EXPECT_EQ(any(1000, 800, 224, 224), 3);
  EXPECT_EQ(dct_scale_eighths(1000, 800, 224, 224), 4);
  EXPECT_EQ(any(1792, 1792, 224, 224), 1);  // exactly 8x: 1/8 gives exactly 224
  EXPECT_EQ(dct_scale_eighths(1792, 1792, 224, 224), 1);
  EXPECT_EQ(any(1791, 1792, 224, 224), 2);
  EXPECT_EQ(dct_scale_eighths(1791, 1792, 224, 224), 2);
  EXPECT_EQ(any(4000, 300, 224, 224), 6);  // the short side decides
  EXPECT_EQ(any(224, 224, 224, 224), 8);
  EXPECT_EQ(any(100, 80, 224, 224), 8);  // smaller than the target: no scaling
  EXPECT_EQ(dct_scale_eighths(100, 80, 224, 224), 8);
  EXPECT_EQ(dct_scale_eighths(0, 80, 224, 224), 8);
  EXPECT_EQ(dct_scale_eighths(900, 900, 224, 112), 2);  // 900/4 = 225 >= 224
}

// ---- bad data: always false with a message, never a crash or a half image ----

TEST(JpegBadData, ZeroBytes) {
  const std::vector<uint8_t> empty;
  EXPECT_CONTAINS(decode_error(empty), "empty");
  JpegInfo info;
  std::string error;
  EXPECT_FALSE(read_jpeg_info(empty, info, error));
  EXPECT_CONTAINS(error, "empty");
}

TEST(JpegBadData, PngNamedJpgIsNamedPng) {
  TempDir dir;
  const std::string path = dir.file("n02105855_2933.JPEG");  // ImageNet's famous PNG-in-disguise
  write_file(path, std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x10\0\0\0\x10\x08\x02\0\0\0", 33));
  const std::string contents = read_file(path);
  const std::vector<uint8_t> bytes(contents.begin(), contents.end());
  EXPECT_CONTAINS(decode_error(bytes), "PNG");
  JpegInfo info;
  std::string error;
  EXPECT_FALSE(read_jpeg_info(bytes, info, error));
  EXPECT_CONTAINS(error, "not a JPEG (PNG signature)");
  const std::string gif = "GIF89a\x10\0\x10\0";
  EXPECT_CONTAINS(decode_error(std::vector<uint8_t>(gif.begin(), gif.end())), "GIF");
}

TEST(JpegBadData, RandomBytes) {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> bytes(4096);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  bytes[0] = 0x12;
  EXPECT_CONTAINS(decode_error(bytes), "not a JPEG");
  // Random bytes behind a valid SOI marker reach libjpeg, which must reject them.
  for (int trial = 0; trial < 20; ++trial) {
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    bytes[0] = 0xff;
    bytes[1] = 0xd8;
    decode_error(bytes);
  }
}

TEST(JpegBadData, TruncatedAtHalfIsAnErrorNotAGreyHalf) {
  const std::vector<uint8_t> bytes = encode(smooth_image(200, 150), 90);
  const std::vector<uint8_t> half(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(bytes.size() / 2));
  EXPECT_CONTAINS(decode_error(half), "truncated");
  JpegInfo info;  // the header is intact
  std::string error;
  EXPECT_TRUE(read_jpeg_info(half, info, error)) << error;
  // Also a progressive file, whose scans are all read before the first row, and a cut in the header.
  const std::vector<uint8_t> progressive = encode(smooth_image(200, 150), 90, {.progressive = true});
  EXPECT_CONTAINS(
      decode_error(std::vector<uint8_t>(
          progressive.begin(), progressive.begin() + static_cast<ptrdiff_t>(progressive.size() / 2))),
      "truncated");
  const std::vector<uint8_t> header_only(bytes.begin(), bytes.begin() + 100);
  EXPECT_CONTAINS(decode_error(header_only), "truncated");
  EXPECT_FALSE(read_jpeg_info(header_only, info, error));
  // Only the EOI marker missing: every pixel is there, but the file is still cut short.
  const std::vector<uint8_t> no_eoi(bytes.begin(), bytes.end() - 2);
  EXPECT_CONTAINS(decode_error(no_eoi), "truncated");
}

TEST(JpegBadData, CorruptedScanIsDetected) {
  // Inverting 16 bytes in the middle of the entropy-coded data of this (deterministic) file puts markers
  // and invalid Huffman codes in the scan: libjpeg warns ("Corrupt JPEG data: ..."), which is an error
  // here. (Corruption that still decodes as valid Huffman codes cannot be detected: a JPEG has no
  // checksum; then the decode just must not crash, which the fuzz target checks.)
  std::vector<uint8_t> bytes = encode(smooth_image(200, 150), 90);
  const size_t sos = find_marker(bytes, 0xda);
  ASSERT_NE(sos, std::string::npos);
  const size_t scan_start = sos + 2 + (size_t{bytes[sos + 2]} << 8 | bytes[sos + 3]);
  const size_t middle = scan_start + (bytes.size() - scan_start) / 2;
  for (size_t i = middle; i < middle + 16; ++i) bytes[i] ^= 0xff;
  EXPECT_CONTAINS(decode_error(bytes), "Corrupt JPEG data");
}

TEST(JpegBadData, HugeDimensionsAreRefusedBeforeAllocating) {
  std::vector<uint8_t> bytes = encode(smooth_image(16, 16), 90);
  const size_t sof =
      find_marker(bytes, 0xc0);  // baseline SOF0: FF C0, length(2), precision(1), height(2), width(2)
  ASSERT_NE(sof, std::string::npos);
  bytes[sof + 5] = 60000 >> 8;
  bytes[sof + 6] = 60000 & 0xff;
  bytes[sof + 7] = 60000 >> 8;
  bytes[sof + 8] = 60000 & 0xff;
  JpegInfo info;
  std::string error;
  ASSERT_TRUE(read_jpeg_info(bytes, info, error)) << error;  // the header alone is fine
  EXPECT_EQ(info.width, 60000);
  EXPECT_EQ(info.height, 60000);
  EXPECT_CONTAINS(decode_error(bytes), "60000x60000 pixels is over the limit of 100000000");
  // The limit is the caller's: a normal image over a small one.
  EXPECT_CONTAINS(decode_error(encode(smooth_image(100, 100)), 9999), "over the limit of 9999");
}

TEST(JpegBadData, BadArgumentsAreErrors) {
  const std::vector<uint8_t> bytes = encode(smooth_image(16, 16));
  RgbImage out;
  std::string error;
  EXPECT_FALSE(decode_jpeg(bytes, 0, 3, out, error));
  EXPECT_CONTAINS(error, "scale");
  EXPECT_FALSE(decode_jpeg(bytes, 9, 3, out, error));
  EXPECT_FALSE(decode_jpeg(bytes, 8, 2, out, error));
  EXPECT_CONTAINS(error, "2 channels");
  EXPECT_THROW(encode_jpeg(nullptr, 4, 4, 3, 90), Error);
  const std::vector<uint8_t> pixels(48);
  EXPECT_THROW(encode_jpeg(pixels.data(), 4, 4, 2, 90), Error);
  EXPECT_THROW(encode_jpeg(pixels.data(), 4, 4, 3, 101), Error);
  EXPECT_THROW(encode_jpeg(pixels.data(), 0, 4, 3, 90), Error);
}

}  // namespace
}  // namespace dlbench
