#include "data/cuda/jpeg_batch_decoder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "backend/cuda/kernel_check.h"
#include "core/status.h"
#include "data/cuda/nvjpeg_memory.h"

namespace dlbench::cuda {

namespace {

using nvjpeg::nvjpegStatus_t;

// Every nvJPEG status goes through here: "" for success, else the call and the status, one line.
std::string nvjpeg_failure(const char* call, nvjpegStatus_t status) {
  if (status == nvjpeg::NVJPEG_STATUS_SUCCESS) return {};
  return fmt::format("{}: {}", call, nvjpeg_status_text(status));
}

// Rows start 256-byte aligned (pitch a multiple of 256, so every image too): what the hardware engines'
// and the augmenter's wide loads like, for at most 255 bytes a row.
constexpr size_t kPitchAlign = 256;

// An end-of-image marker (FF D9) must lie in a file's last kTailBytes. FF D9 cannot occur inside
// entropy-coded data (an FF there is followed by 00 or RSTn), so a file truncated inside its scans has
// none there: nvJPEG, unlike libjpeg-turbo, may decode such a file without an error (padding the missing
// data), so it goes to the CPU, which names it. A file with more than this much trailing data after its
// marker goes to the CPU too, which decodes it: slower, same pixels.
constexpr size_t kTailBytes = 1024;

bool has_end_marker_near_end(std::span<const uint8_t> bytes) {
  const size_t from = bytes.size() > kTailBytes ? bytes.size() - kTailBytes : 0;
  for (size_t i = bytes.size() - 1; i > from; --i)
    if (bytes[i] == 0xD9 && bytes[i - 1] == 0xFF) return true;
  return false;
}

const char* backend_name(nvjpeg::nvjpegBackend_t kind) {
  return kind == nvjpeg::NVJPEG_BACKEND_HARDWARE ? "nvjpegCreateEx(HARDWARE)" : "nvjpegCreateEx(DEFAULT)";
}

}  // namespace

const char* jpeg_decode_status_name(JpegDecodeStatus status) {
  switch (status) {
    case JpegDecodeStatus::hardware:
      return "hardware";
    case JpegDecodeStatus::cuda:
      return "cuda";
    case JpegDecodeStatus::failed:
      return "failed";
  }
  return "unknown";
}

AugmentImage augment_image(const DecodedJpeg& image, const CropBox& box, Flip flip) {
  AugmentImage a;
  a.pixels = image.pixels;
  a.width = image.width;
  a.height = image.height;
  a.pitch = image.pitch;
  a.channels = 3;
  a.scale_eighths = 8;
  a.box = box;
  a.flip = flip;
  return a;
}

void JpegBatchDecoder::Group::clear() {
  index.clear();
  data.clear();
  length.clear();
  output.clear();
}

void JpegBatchDecoder::Group::add(int i, std::span<const uint8_t> bytes, const nvjpeg::nvjpegImage_t& image) {
  index.push_back(i);
  data.push_back(bytes.data());
  length.push_back(bytes.size());
  output.push_back(image);
}

JpegBatchDecoder::JpegBatchDecoder(const NvjpegLibrary& library, const JpegBatchDecoderOptions& options)
    : nv_(library), options_(options) {
  if (options_.backend == JpegBackendChoice::hardware_first) {
    // Fails on GPUs without JPEG engines (NVJPEG_STATUS_ARCH_MISMATCH or _NOT_SUPPORTED): not an error,
    // the DEFAULT backend then takes every image.
    open_backend(nvjpeg::NVJPEG_BACKEND_HARDWARE, hardware_, &hardware_note_);
  } else {
    hardware_note_ = "not asked for (cuda_only)";
  }
  std::string why_not;
  if (!open_backend(nvjpeg::NVJPEG_BACKEND_DEFAULT, default_, &why_not)) {
    close_backend(hardware_);
    throw Error("JpegBatchDecoder: " + why_not);
  }
}

JpegBatchDecoder::~JpegBatchDecoder() {
  close_backend(hardware_);
  close_backend(default_);
  // cudaFree waits for the work still using the arena.
  if (arena_) (void)cudaFree(arena_);
}

bool JpegBatchDecoder::open_backend(nvjpeg::nvjpegBackend_t kind, Backend& b, std::string* why_not) {
  // BITSTREAM_STRICT: a stream that breaks the standard is an error rather than a best guess, as the CPU
  // path (libjpeg warnings are errors there); the CPU then names the problem. A library too old for the
  // flag refuses it as a bad parameter: then without.
  // Its memory from a cache that never frees (nvjpeg_memory.h): a cudaFree inside a decode would wait for
  // the whole device, the training step included.
  nvjpeg::nvjpegDevAllocator_t* device = cached_nvjpeg_device_allocator();
  nvjpeg::nvjpegPinnedAllocator_t* pinned = cached_nvjpeg_pinned_allocator();
  nvjpegStatus_t s = nv_.nvjpegCreateEx(kind, device, pinned, nvjpeg::kFlagsBitstreamStrict, &b.handle);
  if (s == nvjpeg::NVJPEG_STATUS_INVALID_PARAMETER)
    s = nv_.nvjpegCreateEx(kind, device, pinned, nvjpeg::kFlagsDefault, &b.handle);
  std::string failure = nvjpeg_failure(backend_name(kind), s);
  if (failure.empty())
    failure = nvjpeg_failure("nvjpegJpegStateCreate", nv_.nvjpegJpegStateCreate(b.handle, &b.state));
  if (failure.empty())
    failure = nvjpeg_failure("nvjpegJpegStreamCreate", nv_.nvjpegJpegStreamCreate(b.handle, &b.stream));
  if (failure.empty()) return true;
  if (s != nvjpeg::NVJPEG_STATUS_SUCCESS) b.handle = nullptr;  // never created: nothing to destroy
  close_backend(b);
  if (why_not) *why_not = failure;
  return false;
}

void JpegBatchDecoder::close_backend(Backend& b) {
  // Teardown: a failure here cannot be acted on (and must not throw from a destructor).
  if (b.stream) (void)nv_.nvjpegJpegStreamDestroy(b.stream);
  if (b.state) (void)nv_.nvjpegJpegStateDestroy(b.state);
  if (b.handle) (void)nv_.nvjpegDestroy(b.handle);
  b = Backend{};
}

// The host-side checks of one image. Parses the header with the hardware handle where there is one (so
// that nvjpegDecodeBatchedSupported reads a stream of its own handle), else with the DEFAULT one.
bool JpegBatchDecoder::screen(std::span<const uint8_t> bytes, DecodedJpeg& r, bool* hardware_takes_it) {
  *hardware_takes_it = false;
  auto fail = [&](std::string reason) {
    r.status = JpegDecodeStatus::failed;
    r.reason = std::move(reason);
    return false;
  };
  if (bytes.empty()) return fail("empty file");
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), "\x89PNG\r\n\x1a\n", 8) == 0)
    return fail("not a JPEG (PNG signature)");
  if (bytes.size() < 4 || bytes[0] != 0xFF || bytes[1] != 0xD8)
    return fail("not a JPEG (no start-of-image marker)");
  if (!has_end_marker_near_end(bytes))
    return fail(fmt::format("truncated or padded: no end-of-image marker in the last {} bytes", kTailBytes));

  Backend& b = hardware_.handle ? hardware_ : default_;
  std::string failure =
      nvjpeg_failure("nvjpegJpegStreamParseHeader",
                     nv_.nvjpegJpegStreamParseHeader(b.handle, bytes.data(), bytes.size(), b.stream));
  if (!failure.empty()) return fail(failure);
  unsigned components = 0, width = 0, height = 0;
  nvjpeg::nvjpegJpegEncoding_t encoding = nvjpeg::NVJPEG_ENCODING_UNKNOWN;
  failure = nvjpeg_failure("nvjpegJpegStreamGetComponentsNum",
                           nv_.nvjpegJpegStreamGetComponentsNum(b.stream, &components));
  if (failure.empty())
    failure = nvjpeg_failure("nvjpegJpegStreamGetJpegEncoding",
                             nv_.nvjpegJpegStreamGetJpegEncoding(b.stream, &encoding));
  if (failure.empty())
    failure = nvjpeg_failure("nvjpegJpegStreamGetFrameDimensions",
                             nv_.nvjpegJpegStreamGetFrameDimensions(b.stream, &width, &height));
  if (!failure.empty()) return fail(failure);
  // CMYK/YCCK: nvJPEG's conversion is not the CPU's (Adobe inversion), so those stay with the CPU.
  if (components != 1 && components != 3) return fail(fmt::format("{} components (CMYK/YCCK?)", components));
  if (encoding != nvjpeg::NVJPEG_ENCODING_BASELINE_DCT &&
      encoding != nvjpeg::NVJPEG_ENCODING_EXTENDED_SEQUENTIAL_DCT_HUFFMAN &&
      encoding != nvjpeg::NVJPEG_ENCODING_PROGRESSIVE_DCT_HUFFMAN)
    return fail(fmt::format("frame type SOF 0x{:02x} (lossless, arithmetic coding?)", int(encoding)));
  if (width == 0 || height == 0 || int64_t(width) * height > options_.max_pixels)
    return fail(fmt::format("{}x{} pixels (budget {})", width, height, options_.max_pixels));
  r.width = int(width);
  r.height = int(height);
  r.pitch = int((size_t(width) * 3 + kPitchAlign - 1) / kPitchAlign * kPitchAlign);

  if (hardware_.handle) {
    // 0 means supported; a failing call means not (the DEFAULT backend then tries).
    int supported = -1;
    const nvjpegStatus_t s = nv_.nvjpegDecodeBatchedSupported(hardware_.handle, hardware_.stream, &supported);
    *hardware_takes_it = nvjpeg_failure("nvjpegDecodeBatchedSupported", s).empty() && supported == 0;
  }
  return true;
}

// Gives every screened image its place: one slot of pitch x height bytes each, in image order.
void JpegBatchDecoder::place_in_arena(std::span<const std::span<const uint8_t>> jpegs, cudaStream_t stream) {
  size_t needed = 0;
  for (const DecodedJpeg& r : results_)
    if (r.pitch > 0) needed += size_t(r.pitch) * size_t(r.height);
  if (needed > arena_bytes_) {
    // A quarter of headroom, in 2 MiB steps, so that batches slightly larger than the first do not
    // reallocate each in turn. The previous batch may still be decoding into the old arena on `stream`.
    constexpr size_t kStep = size_t(2) << 20;
    const size_t bytes = (needed + needed / 4 + kStep - 1) / kStep * kStep;
    if (arena_) {
      DLB_KERNEL_CHECK(cudaStreamSynchronize(stream));
      DLB_KERNEL_CHECK(cudaFree(arena_));
      arena_ = nullptr;
      arena_bytes_ = 0;
    }
    void* p = nullptr;
    DLB_KERNEL_CHECK(cudaMalloc(&p, bytes));
    arena_ = static_cast<uint8_t*>(p);
    arena_bytes_ = bytes;
    ++arena_allocations_;
  }
  size_t offset = 0;
  hardware_group_.clear();
  default_group_.clear();
  for (size_t i = 0; i < results_.size(); ++i) {
    DecodedJpeg& r = results_[i];
    if (r.pitch == 0) continue;  // failed screening
    r.pixels = arena_ + offset;
    offset += size_t(r.pitch) * size_t(r.height);
    nvjpeg::nvjpegImage_t image{};
    image.channel[0] = const_cast<unsigned char*>(r.pixels);  // RGBI: channel[0] only
    image.pitch[0] = size_t(r.pitch);
    (on_hardware_[i] ? hardware_group_ : default_group_).add(int(i), jpegs[i], image);
  }
}

// One batched call on `b`: "" or what failed.
std::string JpegBatchDecoder::decode_group(Backend& b, Group& g, cudaStream_t stream) {
  // Initialised per call: the batch size varies with what the hardware takes (DALI does the same). The
  // thread count is ignored by current libraries; 1: Huffman decoding stays on this thread.
  std::string failure =
      nvjpeg_failure("nvjpegDecodeBatchedInitialize",
                     nv_.nvjpegDecodeBatchedInitialize(b.handle, b.state, int(g.index.size()), 1,
                                                       nvjpeg::NVJPEG_OUTPUT_RGBI));
  if (!failure.empty()) return failure;
  return nvjpeg_failure(
      "nvjpegDecodeBatched",
      nv_.nvjpegDecodeBatched(b.handle, b.state, g.data.data(), g.length.data(), g.output.data(), stream));
}

std::span<const DecodedJpeg> JpegBatchDecoder::decode(std::span<const std::span<const uint8_t>> jpegs,
                                                      cudaStream_t stream) {
  results_.resize(jpegs.size());
  on_hardware_.assign(jpegs.size(), 0);
  if (jpegs.empty()) return {};
  for (size_t i = 0; i < jpegs.size(); ++i) {
    DecodedJpeg& r = results_[i];
    r.reason.clear();  // keeps its capacity
    r.pixels = nullptr;
    r.width = r.height = r.pitch = 0;
    bool hardware_takes_it = false;
    if (screen(jpegs[i], r, &hardware_takes_it)) {
      r.status = hardware_takes_it ? JpegDecodeStatus::hardware : JpegDecodeStatus::cuda;
      on_hardware_[i] = hardware_takes_it;
    } else {
      r.width = r.height = r.pitch = 0;  // no slot in the arena
    }
  }
  place_in_arena(jpegs, stream);

  if (!hardware_group_.index.empty() && !decode_group(hardware_, hardware_group_, stream).empty()) {
    // The engines refused the batch as a whole: every image of it tries the DEFAULT backend.
    for (size_t k = 0; k < hardware_group_.index.size(); ++k) {
      const int i = hardware_group_.index[k];
      results_[size_t(i)].status = JpegDecodeStatus::cuda;
      default_group_.add(i, jpegs[size_t(i)], hardware_group_.output[k]);
    }
  }
  if (default_group_.index.empty()) return results_;
  if (default_group_.index.size() == 1 || !decode_group(default_, default_group_, stream).empty()) {
    // One status for a whole batch: find the image(s) it was about, one call each. Rare (a file that
    // passed screening and still fails), so the cost of batches of one does not matter.
    Group one;
    for (size_t k = 0; k < default_group_.index.size(); ++k) {
      one.clear();
      one.add(default_group_.index[k], {default_group_.data[k], default_group_.length[k]},
              default_group_.output[k]);
      std::string failure = decode_group(default_, one, stream);
      if (failure.empty()) continue;
      DecodedJpeg& r = results_[size_t(default_group_.index[k])];
      r.status = JpegDecodeStatus::failed;
      r.reason = std::move(failure);
      r.pixels = nullptr;
    }
  }
  return results_;
}

}  // namespace dlbench::cuda
