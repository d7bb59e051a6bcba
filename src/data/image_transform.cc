#include "data/image_transform.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "data/random.h"

namespace dlbench {
namespace {

// Uniform double in [lo, hi): 53 random bits from the raw output (uniform_below(2^53) never rejects).
double uniform_real(std::mt19937_64& rng, double lo, double hi) {
  const double u = static_cast<double>(data_rng::uniform_below(rng, uint64_t{1} << 53)) * 0x1.0p-53;
  return lo + (hi - lo) * u;
}

// Python's round(): to nearest, ties to even (nearbyint in the default rounding mode).
int round_half_even(double v) { return static_cast<int>(std::nearbyint(v)); }

// float to IEEE binary16 bits, round to nearest even, in integer arithmetic only (no dependence on the
// compiler's floating-point contraction); the same bits as f16_from_double(double(f)).
inline uint16_t f16_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e00u;       // NaN
  if (ax >= 0x477ff000u) return sign | 0x7c00u;      // >= 65520 (halfway past 65504, ties to even): Inf
  if (ax >= 0x38800000u) {                           // normal in binary16: rebias the exponent
    uint32_t r = ax - 0x38000000u;                   // (127 - 15) << 23
    r += 0x0fffu + ((r >> 13) & 1u);                 // round the 13 dropped bits to nearest even
    return static_cast<uint16_t>(sign | (r >> 13));  // a carry into the exponent is still right
  }
  if (ax < 0x33000000u) return sign;   // below 2^-25: rounds to zero
  const uint32_t exponent = ax >> 23;  // 102..112
  const uint32_t significand = (ax & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exponent;  // to units of 2^-24, the subnormal step
  const uint32_t half = 1u << (shift - 1);
  uint32_t q = significand >> shift;
  const uint32_t rest = significand & ((1u << shift) - 1);
  if (rest > half || (rest == half && (q & 1u))) ++q;  // q == 0x400 is the smallest normal: its bits too
  return static_cast<uint16_t>(sign | q);
}

// float to bfloat16 bits, round to nearest even.
inline uint16_t bf16_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// One output column's (or row's) two source pixels, as byte offsets into the decoded image's buffer (of
// a row, or of the image), and the weight of the second.
struct Tap {
  ptrdiff_t offset0, offset1;
  float weight1;
};

// Taps for `count` outputs sampling [start, start + length) of a source axis of `size` pixels (half-pixel
// centres, clamped to the edge: torchvision / OpenCV bilinear without antialiasing).
void make_taps(double start, double length, int count, int size, ptrdiff_t stride, std::vector<Tap>& taps) {
  taps.resize(static_cast<size_t>(count));
  const double step = length / count;
  for (int k = 0; k < count; ++k) {
    double src = start + (k + 0.5) * step - 0.5;
    if (!(src > 0)) src = 0;  // also NaN
    int i0, i1;
    float w1;
    if (src >= size - 1) {
      i0 = i1 = size - 1;
      w1 = 0.f;
    } else {
      i0 = static_cast<int>(src);
      i1 = i0 + 1;
      w1 = static_cast<float>(src - i0);
    }
    taps[static_cast<size_t>(k)] = {i0 * stride, i1 * stride, w1};
  }
}

template <DType D>
inline void store(void* out, size_t index, float v) {
  if constexpr (D == DType::f32) {
    static_cast<float*>(out)[index] = v;
  } else if constexpr (D == DType::f16) {
    static_cast<uint16_t*>(out)[index] = f16_bits(v);
  } else {
    static_cast<uint16_t*>(out)[index] = bf16_bits(v);
  }
}

// Per output row: the two source rows it blends, each interpolated horizontally once into a float row
// (kept while the next output rows still use it: with downscales under 2x most source rows serve one or
// two output rows), then blended vertically and stored. Horizontally 2 table lookups and a lerp per value,
// vertically a lerp and a store over contiguous floats (vectorised). The lerp a + (b - a) w is exact when
// w is 0 and when a == b. The float rows are channel planes for nchw output, interleaved for nhwc, so both
// passes run over contiguous memory.
template <int C, Layout L>
void horizontal(const uint8_t* row, const std::vector<Tap>& cols, const float (*lut)[256], int out_w,
                float* out) {
  for (int ox = 0; ox < out_w; ++ox) {
    const Tap cx = cols[static_cast<size_t>(ox)];
    for (int c = 0; c < C; ++c) {
      const float a = lut[c][row[cx.offset0 + c]];
      const float v = a + (lut[c][row[cx.offset1 + c]] - a) * cx.weight1;
      out[L == Layout::nchw ? static_cast<size_t>(c) * static_cast<size_t>(out_w) + static_cast<size_t>(ox)
                            : static_cast<size_t>(ox) * C + c] = v;
    }
  }
}

template <int C, DType D, Layout L>
void resize_kernel(const uint8_t* src, const std::vector<Tap>& cols, const std::vector<Tap>& rows,
                   const float (*lut)[256], int out_w, int out_h, void* out) {
  const size_t row_values = static_cast<size_t>(out_w) * C;
  const size_t plane = static_cast<size_t>(out_w) * static_cast<size_t>(out_h);
  thread_local std::vector<float> cache;
  cache.resize(2 * row_values);
  float* slot[2] = {cache.data(), cache.data() + row_values};
  ptrdiff_t tag[2] = {-1, -1};  // the source row (byte offset) each slot holds
  auto find = [&](ptrdiff_t offset) { return tag[0] == offset ? 0 : tag[1] == offset ? 1 : -1; };
  for (int oy = 0; oy < out_h; ++oy) {
    const Tap ry = rows[static_cast<size_t>(oy)];
    int s0 = find(ry.offset0);
    if (s0 < 0) {
      s0 = find(ry.offset1) == 0 ? 1 : 0;
      horizontal<C, L>(src + ry.offset0, cols, lut, out_w, slot[s0]);
      tag[s0] = ry.offset0;
    }
    int s1 = find(ry.offset1);
    if (s1 < 0) {
      s1 = 1 - s0;
      horizontal<C, L>(src + ry.offset1, cols, lut, out_w, slot[s1]);
      tag[s1] = ry.offset1;
    }
    const float* top = slot[s0];
    const float* bottom = slot[s1];
    const float w = ry.weight1;
    if constexpr (L == Layout::nchw) {
      for (int c = 0; c < C; ++c) {
        const size_t from = static_cast<size_t>(c) * static_cast<size_t>(out_w);
        const size_t to =
            static_cast<size_t>(c) * plane + static_cast<size_t>(oy) * static_cast<size_t>(out_w);
        for (int x = 0; x < out_w; ++x) {
          const float a = top[from + static_cast<size_t>(x)];
          store<D>(out, to + static_cast<size_t>(x), a + (bottom[from + static_cast<size_t>(x)] - a) * w);
        }
      }
    } else {
      const size_t to = static_cast<size_t>(oy) * row_values;
      for (size_t i = 0; i < row_values; ++i) store<D>(out, to + i, top[i] + (bottom[i] - top[i]) * w);
    }
  }
}

template <int C, DType D>
void dispatch_layout(Layout layout, const uint8_t* src, const std::vector<Tap>& cols,
                     const std::vector<Tap>& rows, const float (*lut)[256], int out_w, int out_h, void* out) {
  if (layout == Layout::nchw)
    resize_kernel<C, D, Layout::nchw>(src, cols, rows, lut, out_w, out_h, out);
  else
    resize_kernel<C, D, Layout::nhwc>(src, cols, rows, lut, out_w, out_h, out);
}

template <int C>
void dispatch_dtype(DType dtype, Layout layout, const uint8_t* src, const std::vector<Tap>& cols,
                    const std::vector<Tap>& rows, const float (*lut)[256], int out_w, int out_h, void* out) {
  switch (dtype) {
    case DType::f32:
      return dispatch_layout<C, DType::f32>(layout, src, cols, rows, lut, out_w, out_h, out);
    case DType::f16:
      return dispatch_layout<C, DType::f16>(layout, src, cols, rows, lut, out_w, out_h, out);
    case DType::bf16:
      return dispatch_layout<C, DType::bf16>(layout, src, cols, rows, lut, out_w, out_h, out);
    default:
      DLB_CHECK(false, "crop_resize_normalize: dtype #{} (f32, f16 or bf16)", static_cast<int>(dtype));
  }
}

}  // namespace

CropBox random_resized_crop_box(int width, int height, std::mt19937_64& rng, double min_scale,
                                double max_scale, double min_ratio, double max_ratio) {
  DLB_CHECK(width > 0 && height > 0, "random_resized_crop_box: image of {}x{}", width, height);
  DLB_CHECK(0 < min_scale && min_scale <= max_scale && 0 < min_ratio && min_ratio <= max_ratio,
            "random_resized_crop_box: scale [{}, {}], ratio [{}, {}]", min_scale, max_scale, min_ratio,
            max_ratio);
  const double area = static_cast<double>(width) * height;
  const double log_min_ratio = std::log(min_ratio), log_max_ratio = std::log(max_ratio);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * uniform_real(rng, min_scale, max_scale);
    const double aspect_ratio = std::exp(uniform_real(rng, log_min_ratio, log_max_ratio));
    const double w = std::nearbyint(std::sqrt(target_area * aspect_ratio));
    const double h = std::nearbyint(std::sqrt(target_area / aspect_ratio));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const auto i = data_rng::uniform_below(rng, static_cast<uint64_t>(height - static_cast<int>(h) + 1));
      const auto j = data_rng::uniform_below(rng, static_cast<uint64_t>(width - static_cast<int>(w) + 1));
      return {static_cast<double>(j), static_cast<double>(i), w, h};
    }
  }
  // Fallback: the whole image, cut down to the ratio range, centred.
  const double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < min_ratio) {
    h = std::clamp(round_half_even(w / min_ratio), 1, height);
  } else if (in_ratio > max_ratio) {
    w = std::clamp(round_half_even(h * max_ratio), 1, width);
  }
  return {static_cast<double>((width - w) / 2), static_cast<double>((height - h) / 2), static_cast<double>(w),
          static_cast<double>(h)};
}

CropBox center_crop_box(int width, int height, int resize, int crop) {
  DLB_CHECK(width > 0 && height > 0 && resize > 0 && crop > 0,
            "center_crop_box: image {}x{}, resize {}, crop {}", width, height, resize, crop);
  // torchvision's Resize(int): the shorter side to `resize`, the longer to int(resize * long / short).
  int64_t resized_w = resize, resized_h = resize;
  if (width < height) resized_h = int64_t{resize} * height / width;
  if (height < width) resized_w = int64_t{resize} * width / height;
  // CenterCrop: offset round((size - crop) / 2); a crop larger than the image pads it equally (the extra
  // pixel of an odd difference at the far end) and starts at minus the near padding.
  auto offset = [crop](int64_t size) -> double {
    if (size >= crop) return round_half_even(static_cast<double>(size - crop) / 2.0);
    return -static_cast<double>((crop - size) / 2);
  };
  const double sx = static_cast<double>(width) / static_cast<double>(resized_w);
  const double sy = static_cast<double>(height) / static_cast<double>(resized_h);
  return {offset(resized_w) * sx, offset(resized_h) * sy, crop * sx, crop * sy};
}

void crop_resize_normalize(const RgbImage& image, int scale_eighths, const CropBox& box, int out_w, int out_h,
                           bool flip, const Normalization& norm, DType dtype, Layout layout, void* out) {
  const int channels = image.channels;
  DLB_CHECK(channels == 1 || channels == 3, "crop_resize_normalize: {} channels (1 or 3)", channels);
  DLB_CHECK(image.width > 0 && image.height > 0 &&
                image.pixels.size() == static_cast<size_t>(image.width) * static_cast<size_t>(image.height) *
                                           static_cast<size_t>(channels),
            "crop_resize_normalize: image {}x{}x{} with {} bytes", image.width, image.height, channels,
            image.pixels.size());
  DLB_CHECK(scale_eighths >= 1 && scale_eighths <= 8, "crop_resize_normalize: scale {}/8", scale_eighths);
  DLB_CHECK(out_w > 0 && out_h > 0 && out != nullptr, "crop_resize_normalize: output {}x{}", out_w, out_h);
  DLB_CHECK(std::isfinite(box.x) && std::isfinite(box.y) && std::isfinite(box.width) &&
                std::isfinite(box.height) && box.width > 0 && box.height > 0,
            "crop_resize_normalize: box ({}, {}) {}x{}", box.x, box.y, box.width, box.height);

  float lut[3][256];
  for (int c = 0; c < channels; ++c) {
    DLB_CHECK(std::isfinite(norm.mean[c]) && std::isfinite(norm.std[c]) && norm.std[c] != 0,
              "crop_resize_normalize: channel {} mean {} std {}", c, norm.mean[c], norm.std[c]);
    for (int v = 0; v < 256; ++v)
      lut[c][v] = static_cast<float>((v / 255.0 - static_cast<double>(norm.mean[c])) /
                                     static_cast<double>(norm.std[c]));
  }

  // The box in the decoded image's pixels, and the taps of every output column and row.
  thread_local std::vector<Tap> cols, rows;
  const double scale = scale_eighths / 8.0;
  const ptrdiff_t row_bytes = static_cast<ptrdiff_t>(image.width) * channels;
  make_taps(box.x * scale, box.width * scale, out_w, image.width, channels, cols);
  make_taps(box.y * scale, box.height * scale, out_h, image.height, row_bytes, rows);
  if (flip) std::reverse(cols.begin(), cols.end());

  const uint8_t* src = image.pixels.data();
  if (channels == 3)
    dispatch_dtype<3>(dtype, layout, src, cols, rows, lut, out_w, out_h, out);
  else
    dispatch_dtype<1>(dtype, layout, src, cols, rows, lut, out_w, out_h, out);
}

}  // namespace dlbench
