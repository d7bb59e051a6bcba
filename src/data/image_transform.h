// The image transforms of ImageNet training and evaluation, on decoded 8-bit images (jpeg_image.h).
//
// Training (torchvision's RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize):
//   box = random_resized_crop_box(full w, full h, rng); num = dct_scale_eighths(box w, box h, 224, 224);
//   decode_jpeg(bytes, num, 3, image); crop_resize_normalize(image, num, box, 224, 224, flip, ...).
// Evaluation (Resize(256) + CenterCrop(224)): the same with center_crop_box(w, h, 256, 224), no flip.
//
// Boxes are in the full-size image's pixels whatever scale the image was decoded at, so the crop is chosen
// from the header alone and the decode can be DCT-downscaled to just the size the crop needs.
#pragma once

#include <random>

#include "core/tensor.h"
#include "data/jpeg_image.h"

namespace dlbench {

// A rectangle in a full-size image's pixel coordinates: pixel (i, j) covers [j, j+1) x [i, i+1).
struct CropBox {
  double x = 0, y = 0, width = 0, height = 0;
};

// torchvision's RandomResizedCrop.get_params: up to 10 tries of an area fraction U(min_scale, max_scale)
// and a log-uniform aspect ratio (width / height) in [min_ratio, max_ratio], w and h rounded half to even
// (Python's round), accepted if 0 < w <= width and 0 < h <= height, then placed uniformly at integer
// offsets; if all 10 fail, the largest centred crop whose ratio is clamped to the range. Integral boxes,
// always inside the image. All randomness from `rng`'s raw output through data_rng (random.h), so a seed
// gives the same boxes on every platform (not torch's numbers, which come from another generator).
// width, height > 0 (else dlbench::Error).
CropBox random_resized_crop_box(int width, int height, std::mt19937_64& rng, double min_scale = 0.08,
                                double max_scale = 1.0, double min_ratio = 3.0 / 4,
                                double max_ratio = 4.0 / 3);

// Evaluation, as torchvision's Resize(resize) + CenterCrop(crop): the shorter side resized to `resize`,
// the longer to int(resize * long / short) (truncated, as torchvision), then the crop x crop square at
// offsets round((resized - crop) / 2) (half to even), returned in the full-size image's coordinates
// (resized coordinates times size / resized size, per axis). A crop larger than the resized image gives a
// box reaching outside the image, whose outside pixels crop_resize_normalize takes from the nearest edge
// (torchvision pads with zeros there instead).
CropBox center_crop_box(int width, int height, int resize, int crop);

struct Normalization {
  float mean[3];
  float std[3];
};  // on 0..1 pixel values; a 1-channel image uses mean[0] and std[0]
inline constexpr Normalization kImageNetNormalization{{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};

// Cuts `box` (full-size coordinates; the image was decoded at scale scale_eighths/8, so the box is scaled
// by that) out of `image`, resizes it to out_w x out_h with bilinear interpolation, mirrors it
// horizontally if `flip`, normalises each channel to (v / 255 - mean) / std and writes one sample to `out`
// as `dtype` (f32, f16 or bf16, rounded to nearest even) in `layout` (nchw: C planes of out_h x out_w;
// nhwc: out_h x out_w x C interleaved), C = image.channels (1 or 3).
//
// The resize is OpenCV's / torchvision's non-antialiased bilinear (align_corners=False): output pixel k
// samples source coordinate box_x + (k + 0.5) * box_w / out_w - 0.5 (in the decoded image's pixels),
// clamped to the image, linearly between its two neighbours. The interpolation runs on the normalised
// values (a 256-entry table per channel, exact in double then rounded to float), so an output pixel that
// lands on a source pixel is exactly that pixel's normalised value. Downscaling by much more than 2x
// aliases: decode at dct_scale_eighths' scale so that it never does.
// Throws dlbench::Error on bad arguments (channels, sizes, pixel count, dtype, a box that is not finite
// or empty).
void crop_resize_normalize(const RgbImage& image, int scale_eighths, const CropBox& box, int out_w, int out_h,
                           bool flip, const Normalization& norm, DType dtype, Layout layout, void* out);

}  // namespace dlbench
