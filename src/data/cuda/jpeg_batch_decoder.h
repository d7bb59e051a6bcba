// A batch of compressed JPEGs (host memory) decoded by nvJPEG into device memory as interleaved 8-bit RGB
// (NVJPEG_OUTPUT_RGBI; grayscale replicated into the three channels, as decode_jpeg(..., 3) does), ready
// for cuda::ImageAugmenter.
//
// Per batch, on the host, every image is screened first (start-of-image marker, an end-of-image marker near
// the end, nvjpegJpegStreamParseHeader, 1 or 3 components, a sequential or progressive Huffman DCT frame,
// at most max_pixels); then:
//   1. the images the hardware backend takes (nvjpegDecodeBatchedSupported) go to it in one batched call:
//      the GPU's JPEG engines (A100, H100, H200), no CPU Huffman decoding;
//   2. the rest (progressive, 4:1:0/4:1:1, or everything where the hardware backend does not open) go to
//      the DEFAULT backend (CUDA, Huffman on this thread) in one batched call;
//   3. a batched call that fails is retried image by image on the DEFAULT backend, so one bad image only
//      fails itself.
// An image that fails any step is reported `failed` with a one-line reason and not decoded: the caller
// decodes it on the CPU (decode_jpeg), which has the last word on whether the file is bad. So failing
// here is conservative by design (a file truncated or padded past 1 KiB after its end-of-image marker, CMYK)
// and costs time, never pixels.
//
// Known gap: the hardware engines do not report a corrupt scan (bad Huffman codes inside a well-formed
// stream); such an image may come back decoded into wrong pixels where libjpeg-turbo would refuse it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/cuda/image_augment.h"
#include "data/nvjpeg_library.h"

namespace dlbench::cuda {

// Which nvJPEG backend to use. hardware_first: the JPEG engines where the GPU has them, the DEFAULT (CUDA)
// backend for the rest; cuda_only: the DEFAULT backend for everything (GPUs without engines behave so).
enum class JpegBackendChoice : uint8_t { hardware_first, cuda_only };

// What happened to one image. hardware / cuda: decoded, by that backend; failed: not decoded (see reason).
enum class JpegDecodeStatus : uint8_t { hardware, cuda, failed };

const char* jpeg_decode_status_name(JpegDecodeStatus status);  // "hardware", "cuda", "failed"

// One image of a batch. Where decoded, `pixels` points into the decoder's arena (device memory): row y
// (width x 3 bytes, R G B) starts at pixels + y * pitch.
struct DecodedJpeg {
  JpegDecodeStatus status = JpegDecodeStatus::failed;
  std::string reason;  // failed only: one line, e.g. "not a JPEG (no start-of-image marker)"
  const uint8_t* pixels = nullptr;
  int width = 0, height = 0;  // full size (nvJPEG decodes at 8/8 only)
  int pitch = 0;              // bytes, >= 3 * width

  bool decoded() const { return status != JpegDecodeStatus::failed; }
};

// The augmenter's view of a decoded image: channels 3, scale_eighths 8, `box` in its full-size pixels.
AugmentImage augment_image(const DecodedJpeg& image, const CropBox& box, Flip flip = Flip::none);

struct JpegBatchDecoderOptions {
  JpegBackendChoice backend = JpegBackendChoice::hardware_first;
  int64_t max_pixels = 100'000'000;  // width x height from the header; larger fails (as decode_jpeg's)
};

// Contract.
// - Not thread-safe: one decoder per pipeline thread. It belongs to the CUDA device current at
//   construction, which must be current at every call.
// - decode() is asynchronous on `stream` for the device side: once it returns, the pixels of the images
//   decoded are written by work enqueued on `stream` (read them after an event recorded there, or on it).
//   Its host side (header parsing, and Huffman decoding of the images the DEFAULT backend takes) runs on
//   the calling thread before it returns.
// - The compressed bytes (`jpegs` and what they point to) must stay valid and unchanged until the work of
//   that decode() has run on `stream`: nvJPEG does not promise to have copied them when the call returns.
// - The results and the arena they point into are valid until the next decode() or the destruction of the
//   decoder. The next decode() overwrites the arena in `stream` order: work that reads the previous
//   batch's pixels on another stream must be ordered before it by the caller (an event).
// - The arena (one device allocation) grows when a batch needs more than it has, with headroom; it never
//   shrinks, so batches of the same sizes never reallocate. Growing synchronises `stream`.
// - Throws dlbench::Error where nvJPEG or CUDA fail outside one image's decode (creating handles,
//   allocating); per-image problems are results, never exceptions.
class JpegBatchDecoder {
 public:
  JpegBatchDecoder(const NvjpegLibrary& library, const JpegBatchDecoderOptions& options = {});
  ~JpegBatchDecoder();
  JpegBatchDecoder(const JpegBatchDecoder&) = delete;
  JpegBatchDecoder& operator=(const JpegBatchDecoder&) = delete;

  // results()[i] for jpegs[i]. An empty batch does nothing.
  std::span<const DecodedJpeg> decode(std::span<const std::span<const uint8_t>> jpegs, cudaStream_t stream);

  // Whether the hardware backend opened; where not, why ("nvjpegCreateEx(HARDWARE):
  // NVJPEG_STATUS_ARCH_MISMATCH (7)", or "not asked for (cuda_only)").
  bool has_hardware() const { return hardware_.handle != nullptr; }
  const std::string& hardware_note() const { return hardware_note_; }

  size_t arena_bytes() const { return arena_bytes_; }
  int arena_allocations() const { return arena_allocations_; }  // times the arena was (re)allocated

 private:
  // One nvJPEG handle (one backend) with its batched-decode state and a parsed-stream object.
  struct Backend {
    nvjpeg::nvjpegHandle_t handle = nullptr;
    nvjpeg::nvjpegJpegState_t state = nullptr;
    nvjpeg::nvjpegJpegStream_t stream = nullptr;
  };
  // The batch's images going through one batched call: indices into results_, their bytes, outputs.
  struct Group {
    std::vector<int> index;
    std::vector<const unsigned char*> data;
    std::vector<size_t> length;
    std::vector<nvjpeg::nvjpegImage_t> output;
    void clear();
    void add(int i, std::span<const uint8_t> bytes, const nvjpeg::nvjpegImage_t& image);
  };

  bool open_backend(nvjpeg::nvjpegBackend_t kind, Backend& backend, std::string* why_not);
  void close_backend(Backend& backend);
  bool screen(std::span<const uint8_t> bytes, DecodedJpeg& result, bool* hardware_takes_it);
  void place_in_arena(std::span<const std::span<const uint8_t>> jpegs, cudaStream_t stream);
  std::string decode_group(Backend& backend, Group& group, cudaStream_t stream);

  const NvjpegLibrary& nv_;
  JpegBatchDecoderOptions options_;
  Backend hardware_;  // NVJPEG_BACKEND_HARDWARE, where it opened
  Backend default_;   // NVJPEG_BACKEND_DEFAULT, always
  std::string hardware_note_;
  uint8_t* arena_ = nullptr;  // device memory, arena_bytes_
  size_t arena_bytes_ = 0;
  int arena_allocations_ = 0;
  std::vector<DecodedJpeg> results_;
  std::vector<uint8_t> on_hardware_;  // per image of the batch: the hardware backend takes it
  Group hardware_group_, default_group_;
};

}  // namespace dlbench::cuda
