// JPEG decoding and encoding with libjpeg-turbo (through the classic libjpeg API), for image datasets.
//
// Decoding never trusts its input: every error inside libjpeg longjmps back here (libjpeg never calls
// exit() nor prints), libjpeg's warnings about corrupt data (premature end, extraneous bytes, bad Huffman
// codes, markers in the wrong place) are errors too, and the image size is checked against a pixel budget
// from the header, before anything of the image's size is allocated. libjpeg's own working memory is
// capped as well (a progressive JPEG keeps all its coefficients: 2 bytes per pixel and component), and so
// is the number of scans (500, as TurboJPEG's TJFLAG_LIMITSCANS), so that a small hostile file can cost
// neither unbounded memory nor unbounded time. A decode is then one of: an image, or false with a one-line
// message that says what was wrong ("not a JPEG (PNG signature)", "truncated: premature end of JPEG data",
// "Corrupt JPEG data: bad Huffman code", ...).
//
// The IDCT is libjpeg's accurate integer one (JDCT_ISLOW), with its "fancy" (triangle-filter) chroma
// upsampling: both libjpeg's defaults, and what PIL/Pillow (outside its draft mode) and
// torchvision.io.decode_jpeg use, so with the same libjpeg-turbo the pixels are theirs, bit for bit (ISLOW
// gives the same bits with or without SIMD). JDCT_IFAST would save about 13% of a full-size decode (1.26
// vs 1.45 ms for a 500x375 photo at quality 90, AVX2, one core) but its pixels differ from PIL's: by 1
// level on average and up to 5-6 at quality 90, up to 11-14 at quality 95 (two photos measured); and at
// reduced scales it changes nothing (the scaled IDCTs have no fast variant).
//
// DCT-domain downscaling: libjpeg-turbo decodes at scale num/8 by running a smaller IDCT per block, e.g. a
// 2000x1500 photo at 2/8 gives 500x375 for the cost of entropy decoding plus a quarter of the pixel work.
// Only 1/8, 2/8, 4/8 and 8/8 have SIMD IDCTs; 3/8, 5/8, 6/8 and 7/8 run in plain C and are slower than
// decoding the full size (500x375, quality 90, one core: 1/8 0.74 ms, 2/8 0.86, 3/8 1.07, 4/8 1.02,
// 5/8 1.55, 6/8 1.79, 7/8 2.18, 8/8 1.45). dct_scale_eighths() therefore picks among the fast four by
// default. Either way the resize that follows (image_transform.h) then downsamples by less than 2x (and
// needs no antialiasing), unless even 1/8 leaves the crop over twice the target, and a large photo is
// decoded at a fraction of its cost.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dlbench {

// HWC interleaved 8-bit pixels: channels 1 (gray) or 3 (RGB); encode_jpeg also takes 4 (CMYK).
struct RgbImage {
  int width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;  // height * width * channels
};

struct JpegInfo {
  int width = 0, height = 0, components = 0;  // of the full-size image; components 1 (gray), 3, 4 (CMYK)
};

// Reads the header only (up to the first scan). false + error for anything that is not a readable JPEG:
// "empty file", "not a JPEG (PNG signature)", "truncated: ...", libjpeg's own message.
bool read_jpeg_info(std::span<const uint8_t> bytes, JpegInfo& info, std::string& error);

// The DCT-domain downscale to decode at, as num (scale num/8): the smallest num such that the region
// crop_w x crop_h of the full image, scaled by num/8, is still at least target_w x target_h; 8 (no
// scaling) when even the full size is smaller than the target. fast_scales_only (the default): num among
// 1, 2, 4 and 8, the scales libjpeg-turbo decodes with SIMD (see above: 5/8 is slower than 8/8);
// false: any num in 1..8. Non-positive arguments give 8.
int dct_scale_eighths(int crop_w, int crop_h, int target_w, int target_h, bool fast_scales_only = true);

// The size of an image of width x height decoded at scale num/8: ceil(width * num / 8) as libjpeg has it.
inline int dct_scaled_size(int size, int scale_eighths) { return (size * scale_eighths + 7) / 8; }

// Decodes at scale scale_eighths/8 (1..8). want_channels 3: RGB, grayscale replicated, CMYK/YCCK converted
// (inverted, as Photoshop writes it, when the file has an Adobe marker; as PIL converts it); want_channels
// 1: luminance (the Y of YCbCr; ITU-R 601 weights, as PIL, from RGB or CMYK). `out` is resized, its
// allocation reused. false + error (and `out` unspecified) for zero bytes, another format's signature
// (named), corrupt or truncated data, a bad argument, and images over max_pixels (width x height of the
// full-size image, checked from the header before any allocation of that size).
bool decode_jpeg(std::span<const uint8_t> bytes, int scale_eighths, int want_channels, RgbImage& out,
                 std::string& error, int64_t max_pixels = 100'000'000);

struct JpegEncodeOptions {
  bool subsample_chroma = true;  // 4:2:0 (libjpeg's and PIL's default) or, if false, 4:4:4
  bool progressive = false;      // libjpeg's standard progressive scan script
};

// Encodes `channels` HWC pixels: 1 (gray), 3 (RGB, stored as YCbCr) or 4 (CMYK: written as given, with an
// Adobe marker, the way Photoshop stores it, so pass inverted values: 255 = no ink). Quality 1..100.
// Throws dlbench::Error on bad arguments.
std::vector<uint8_t> encode_jpeg(const uint8_t* pixels, int width, int height, int channels, int quality,
                                 const JpegEncodeOptions& options = {});

}  // namespace dlbench
