#include "data/jpeg_image.h"

#include <fmt/format.h>

#include <algorithm>
#include <csetjmp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

// clang-format off
#include <cstddef>  // libjpeg's headers need size_t and FILE declared first
#include <cstdio>
#include <jerror.h>
#include <jpeglib.h>
// clang-format on

#include "core/status.h"

// Error handling: libjpeg reports an error by calling err->error_exit, which must not return. Ours
// longjmps back to the setjmp in the function that drives libjpeg. Those functions (decode_body,
// header_body, encode_body) therefore hold no C++ object with a destructor of their own after the setjmp
// (longjmp would skip it: undefined behaviour); everything owned lives in the caller's Decompressor or
// Compressor, whose destructor releases libjpeg's memory on every path.

namespace dlbench {
namespace {

constexpr int kMaxScans = 500;  // TurboJPEG's limit (TJFLAG_LIMITSCANS); real files have about 10

struct ErrorManager {
  jpeg_error_mgr pub;  // first, so that a j_common_ptr's err converts to ErrorManager*
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 64];
};

ErrorManager* error_manager(j_common_ptr cinfo) { return reinterpret_cast<ErrorManager*>(cinfo->err); }

[[noreturn]] void fail_with(j_common_ptr cinfo, const char* message) {
  ErrorManager* err = error_manager(cinfo);
  std::snprintf(err->message, sizeof err->message, "%s", message);
  std::longjmp(err->jump, 1);
}

[[noreturn]] void on_error_exit(j_common_ptr cinfo) {
  ErrorManager* err = error_manager(cinfo);
  if (err->pub.msg_code == JERR_NO_BACKING_STORE)  // a virtual array over max_memory_to_use
    fail_with(cinfo, "the image needs more decoder memory than allowed (corrupt or hostile header?)");
  char text[JMSG_LENGTH_MAX];
  (*err->pub.format_message)(cinfo, text);
  fail_with(cinfo, text);
}

// msg_level -1: a warning, which libjpeg would survive by guessing (grey for missing data, resyncing after
// garbage); for training data that is a corrupt image, so an error. Levels >= 0 are trace messages.
void on_emit_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;
  const int code = cinfo->err->msg_code;
  if (code == JWRN_JFIF_MAJOR || code == JWRN_ADOBE_XFORM) return;  // metadata libjpeg handles fine
  if (code == JWRN_JPEG_EOF) fail_with(cinfo, "truncated: premature end of JPEG data");
  on_error_exit(cinfo);
}

void on_output_message(j_common_ptr) {}  // never print

void on_progress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  const auto* dinfo = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (dinfo->input_scan_number > kMaxScans) {
    char text[96];
    std::snprintf(text, sizeof text, "more than %d scans (corrupt or hostile progressive JPEG)", kMaxScans);
    fail_with(cinfo, text);
  }
}

void install_error_manager(jpeg_common_struct* cinfo, ErrorManager& err) {
  cinfo->err = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error_exit;
  err.pub.emit_message = on_emit_message;
  err.pub.output_message = on_output_message;
  err.message[0] = '\0';
}

// Owns a decompressor; zero-initialised so that destroying one whose creation failed is safe.
struct Decompressor {
  jpeg_decompress_struct cinfo{};
  ErrorManager err{};
  jpeg_progress_mgr progress{};
  bool created = false;
  Decompressor() {
    install_error_manager(reinterpret_cast<j_common_ptr>(&cinfo), err);
    progress.progress_monitor = on_progress;
  }
  ~Decompressor() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;
};

template <size_t N>
bool has_bytes(std::span<const uint8_t> bytes, size_t offset, const char (&signature)[N]) {
  constexpr size_t length = N - 1;  // without the literal's terminating NUL
  return bytes.size() >= offset + length && std::memcmp(bytes.data() + offset, signature, length) == 0;
}

// The name of the format whose signature `bytes` start with, or "" if none we know.
const char* foreign_format(std::span<const uint8_t> bytes) {
  if (has_bytes(bytes, 0, "\x89PNG\r\n\x1a\n")) return "PNG";
  if (has_bytes(bytes, 0, "GIF87a") || has_bytes(bytes, 0, "GIF89a")) return "GIF";
  if (has_bytes(bytes, 0, "RIFF") && has_bytes(bytes, 8, "WEBP")) return "WebP";
  if (has_bytes(bytes, 0, "II*\0") || has_bytes(bytes, 0, "MM\0*")) return "TIFF";
  if (has_bytes(bytes, 0, "\0\0\0\x0cjP  \r\n\x87\n") || has_bytes(bytes, 0, "\xff\x4f\xff\x51"))
    return "JPEG 2000";
  if (has_bytes(bytes, 0, "\xff\x0a") || has_bytes(bytes, 0, "\0\0\0\x0cJXL \r\n\x87\n")) return "JPEG XL";
  if (has_bytes(bytes, 4, "ftyp")) {
    if (has_bytes(bytes, 8, "avif") || has_bytes(bytes, 8, "avis")) return "AVIF";
    if (has_bytes(bytes, 8, "heic") || has_bytes(bytes, 8, "heix") || has_bytes(bytes, 8, "mif1"))
      return "HEIF";
    return "ISO media (MP4/QuickTime)";
  }
  if (has_bytes(bytes, 0, "BM")) return "BMP";
  if (has_bytes(bytes, 0, "\x1f\x8b")) return "gzip";
  if (has_bytes(bytes, 0, "PK\x03\x04")) return "ZIP";
  if (has_bytes(bytes, 0, "%PDF")) return "PDF";
  if (has_bytes(bytes, 0, "<?xml") || has_bytes(bytes, 0, "<svg")) return "XML/SVG";
  if (has_bytes(bytes, 0, "<!DOCTYPE") || has_bytes(bytes, 0, "<!doctype") || has_bytes(bytes, 0, "<html") ||
      has_bytes(bytes, 0, "<HTML"))
    return "HTML";
  return "";
}

// "" if `bytes` can be a JPEG (start with the SOI marker), else why not.
std::string not_a_jpeg(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return "empty file";
  if (bytes.size() >= 2 && bytes[0] == 0xff && bytes[1] == 0xd8) return "";
  if (const char* format = foreign_format(bytes); *format != '\0')
    return fmt::format("not a JPEG ({} signature)", format);
  std::string start;
  for (size_t i = 0; i < bytes.size() && i < 4; ++i) start += fmt::format(" {:02x}", bytes[i]);
  return fmt::format("not a JPEG (no SOI marker: starts with{})", start);
}

// Creates the decompressor, points it at `bytes` and reads the header. Only called right after a setjmp.
bool start_reading(Decompressor& d, std::span<const uint8_t> bytes, std::string& error) {
  d.created = true;
  jpeg_create_decompress(&d.cinfo);
  d.cinfo.progress = &d.progress;
  jpeg_mem_src(&d.cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  if (jpeg_read_header(&d.cinfo, TRUE) != JPEG_HEADER_OK) {
    error = "no image in the JPEG (tables only)";
    return false;
  }
  return true;
}

bool header_body(Decompressor& d, std::span<const uint8_t> bytes, JpegInfo& info, std::string& error) {
  if (setjmp(d.err.jump)) {
    error = d.err.message;
    return false;
  }
  if (!start_reading(d, bytes, error)) return false;
  info.width = static_cast<int>(d.cinfo.image_width);
  info.height = static_cast<int>(d.cinfo.image_height);
  info.components = d.cinfo.num_components;
  return true;
}

// Adobe-inverted or plain CMYK (0 = no ink) to RGB as PIL converts it: R = (255 - K) - C (255 - K) / 255.
inline uint8_t mul_div_255(int a, int b) {
  const int t = a * b + 128;
  return static_cast<uint8_t>(((t >> 8) + t) >> 8);
}

void cmyk_row_to_output(const uint8_t* cmyk, int width, bool inverted, int channels, uint8_t* out) {
  const int flip = inverted ? 255 : 0;
  for (int x = 0; x < width; ++x, cmyk += 4) {
    const int not_k = 255 - (cmyk[3] ^ flip);  // ^255 == 255 - v for bytes
    const int r = not_k - mul_div_255(cmyk[0] ^ flip, not_k);
    const int g = not_k - mul_div_255(cmyk[1] ^ flip, not_k);
    const int b = not_k - mul_div_255(cmyk[2] ^ flip, not_k);
    if (channels == 3) {
      out[0] = static_cast<uint8_t>(r);
      out[1] = static_cast<uint8_t>(g);
      out[2] = static_cast<uint8_t>(b);
      out += 3;
    } else {  // PIL's "L" from RGB: ITU-R 601-2 luma in 16-bit fixed point
      *out++ = static_cast<uint8_t>((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
    }
  }
}

bool decode_body(Decompressor& d, std::span<const uint8_t> bytes, int scale_eighths, int want_channels,
                 RgbImage& out, std::string& error, int64_t max_pixels) {
  if (setjmp(d.err.jump)) {
    error = d.err.message;
    return false;
  }
  if (!start_reading(d, bytes, error)) return false;
  jpeg_decompress_struct& cinfo = d.cinfo;
  const int64_t width = cinfo.image_width, height = cinfo.image_height;
  if (width * height > max_pixels) {
    error = fmt::format("image of {}x{} pixels is over the limit of {} pixels", width, height, max_pixels);
    return false;
  }
  // libjpeg's own memory: whole-image coefficient buffers (progressive and multi-scan files) take 2 bytes
  // per pixel and component, padded to MCUs; the rest is a few rows.
  cinfo.mem->max_memory_to_use =
      static_cast<long>((64 << 20) + 2 * cinfo.num_components * (width + 32) * (height + 32));

  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  const bool inverted = cmyk && cinfo.saw_Adobe_marker;
  cinfo.out_color_space = cmyk ? JCS_CMYK : want_channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  cinfo.scale_num = static_cast<unsigned>(scale_eighths);
  cinfo.scale_denom = 8;
  cinfo.dct_method = JDCT_ISLOW;
  cinfo.do_fancy_upsampling = TRUE;
  jpeg_calc_output_dimensions(&cinfo);

  const int out_w = static_cast<int>(cinfo.output_width), out_h = static_cast<int>(cinfo.output_height);
  const size_t row_bytes = static_cast<size_t>(out_w) * static_cast<size_t>(want_channels);
  out.width = out_w;
  out.height = out_h;
  out.channels = want_channels;
  out.pixels.resize(row_bytes * static_cast<size_t>(out_h));  // may throw bad_alloc: caught by the caller

  jpeg_start_decompress(&cinfo);  // a progressive file is read and entropy-decoded whole here
  if (static_cast<int>(cinfo.output_width) != out_w || static_cast<int>(cinfo.output_height) != out_h ||
      cinfo.out_color_components != (cmyk ? 4 : want_channels)) {
    error = "libjpeg changed the output size or components after jpeg_calc_output_dimensions";
    return false;
  }
  if (cmyk) {
    JSAMPARRAY row = (*cinfo.mem->alloc_sarray)(reinterpret_cast<j_common_ptr>(&cinfo), JPOOL_IMAGE,
                                                cinfo.output_width * 4, 1);
    while (cinfo.output_scanline < cinfo.output_height) {
      const JDIMENSION y = cinfo.output_scanline;
      if (jpeg_read_scanlines(&cinfo, row, 1) != 1) {
        error = "libjpeg returned no scanline";
        return false;
      }
      cmyk_row_to_output(row[0], out_w, inverted, want_channels, out.pixels.data() + y * row_bytes);
    }
  } else {
    constexpr int kRowsPerCall = 16;
    JSAMPROW rows[kRowsPerCall];
    while (cinfo.output_scanline < cinfo.output_height) {
      const JDIMENSION y = cinfo.output_scanline;
      const JDIMENSION count = std::min<JDIMENSION>(kRowsPerCall, cinfo.output_height - y);
      for (JDIMENSION i = 0; i < count; ++i) rows[i] = out.pixels.data() + (y + i) * row_bytes;
      if (jpeg_read_scanlines(&cinfo, rows, count) == 0) {
        error = "libjpeg returned no scanline";
        return false;
      }
    }
  }
  jpeg_finish_decompress(&cinfo);  // reads up to EOI: damage after the last pixel is an error too
  return true;
}

// A destination manager growing a malloc'd buffer that the Compressor owns (libjpeg's jpeg_mem_dest
// would lose track of its buffer when an error interrupts it).
struct MemoryDestination {
  jpeg_destination_mgr pub;  // first
  unsigned char* data = nullptr;
  size_t capacity = 0;
  size_t size = 0;
};

MemoryDestination* memory_destination(j_compress_ptr cinfo) {
  return reinterpret_cast<MemoryDestination*>(cinfo->dest);
}

void grow_destination(j_compress_ptr cinfo, size_t capacity) {
  MemoryDestination* dest = memory_destination(cinfo);
  auto* data = static_cast<unsigned char*>(std::realloc(dest->data, capacity));
  if (data == nullptr) ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 10);
  dest->pub.next_output_byte = data + dest->capacity;
  dest->pub.free_in_buffer = capacity - dest->capacity;
  dest->data = data;
  dest->capacity = capacity;
}

void on_init_destination(j_compress_ptr cinfo) { grow_destination(cinfo, 1 << 16); }
boolean on_empty_output_buffer(j_compress_ptr cinfo) {
  grow_destination(cinfo, memory_destination(cinfo)->capacity * 2);
  return TRUE;
}
void on_term_destination(j_compress_ptr cinfo) {
  MemoryDestination* dest = memory_destination(cinfo);
  dest->size = dest->capacity - dest->pub.free_in_buffer;
}

struct Compressor {
  jpeg_compress_struct cinfo{};
  ErrorManager err{};
  MemoryDestination dest{};
  bool created = false;
  Compressor() {
    install_error_manager(reinterpret_cast<j_common_ptr>(&cinfo), err);
    dest.pub.init_destination = on_init_destination;
    dest.pub.empty_output_buffer = on_empty_output_buffer;
    dest.pub.term_destination = on_term_destination;
  }
  ~Compressor() {
    if (created) jpeg_destroy_compress(&cinfo);
    std::free(dest.data);
  }
  Compressor(const Compressor&) = delete;
  Compressor& operator=(const Compressor&) = delete;
};

bool encode_body(Compressor& c, const uint8_t* pixels, int width, int height, int channels, int quality,
                 const JpegEncodeOptions& options) {
  if (setjmp(c.err.jump)) return false;
  c.created = true;
  jpeg_create_compress(&c.cinfo);
  jpeg_compress_struct& cinfo = c.cinfo;
  cinfo.dest = &c.dest.pub;
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = channels;
  cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : channels == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&cinfo);  // CMYK input: stored as CMYK, with an Adobe marker
  jpeg_set_quality(&cinfo, quality, TRUE);
  cinfo.dct_method = JDCT_ISLOW;
  if (!options.subsample_chroma) {
    for (int i = 0; i < cinfo.num_components; ++i) {
      cinfo.comp_info[i].h_samp_factor = 1;
      cinfo.comp_info[i].v_samp_factor = 1;
    }
  }
  if (options.progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  const size_t row_bytes = static_cast<size_t>(width) * static_cast<size_t>(channels);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(pixels + cinfo.next_scanline * row_bytes);  // libjpeg only reads it
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  return true;
}

}  // namespace

bool read_jpeg_info(std::span<const uint8_t> bytes, JpegInfo& info, std::string& error) {
  if (std::string why = not_a_jpeg(bytes); !why.empty()) {
    error = std::move(why);
    return false;
  }
  Decompressor d;
  return header_body(d, bytes, info, error);
}

int dct_scale_eighths(int crop_w, int crop_h, int target_w, int target_h, bool fast_scales_only) {
  if (crop_w <= 0 || crop_h <= 0 || target_w <= 0 || target_h <= 0) return 8;
  for (int num = 1; num < 8; num += fast_scales_only ? num : 1) {  // 1, 2, 4 or 1, 2, ..., 7
    // crop * num / 8 >= target, in integers.
    if (int64_t{crop_w} * num >= int64_t{target_w} * 8 && int64_t{crop_h} * num >= int64_t{target_h} * 8)
      return num;
  }
  return 8;
}

bool decode_jpeg(std::span<const uint8_t> bytes, int scale_eighths, int want_channels, RgbImage& out,
                 std::string& error, int64_t max_pixels) {
  if (scale_eighths < 1 || scale_eighths > 8) {
    error = fmt::format("DCT scale {}/8 is not one of 1/8 .. 8/8", scale_eighths);
    return false;
  }
  if (want_channels != 1 && want_channels != 3) {
    error = fmt::format("cannot decode to {} channels (1 or 3)", want_channels);
    return false;
  }
  if (std::string why = not_a_jpeg(bytes); !why.empty()) {
    error = std::move(why);
    return false;
  }
  try {
    Decompressor d;
    return decode_body(d, bytes, scale_eighths, want_channels, out, error, max_pixels);
  } catch (const std::bad_alloc&) {
    error = "out of memory for the decoded image";
    return false;
  }
}

std::vector<uint8_t> encode_jpeg(const uint8_t* pixels, int width, int height, int channels, int quality,
                                 const JpegEncodeOptions& options) {
  DLB_CHECK(pixels != nullptr, "encode_jpeg: no pixels");
  DLB_CHECK(width > 0 && height > 0 && width <= JPEG_MAX_DIMENSION && height <= JPEG_MAX_DIMENSION,
            "encode_jpeg: size {}x{} outside 1..{}", width, height, JPEG_MAX_DIMENSION);
  DLB_CHECK(channels == 1 || channels == 3 || channels == 4, "encode_jpeg: {} channels (1, 3 or 4)",
            channels);
  DLB_CHECK(quality >= 1 && quality <= 100, "encode_jpeg: quality {} outside 1..100", quality);
  Compressor c;
  const bool ok = encode_body(c, pixels, width, height, channels, quality, options);
  DLB_CHECK(ok, "encode_jpeg: libjpeg failed: {}", c.err.message);
  return std::vector<uint8_t>(c.dest.data, c.dest.data + c.dest.size);
}

}  // namespace dlbench
