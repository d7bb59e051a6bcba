// The image transforms of image_transform.h on the GPU: a whole batch of decoded 8-bit images in device
// memory (nvJPEG's interleaved output) cut, resized, flipped, normalised and cast into the network's input
// tensor by one kernel launch.
//
// The boxes are chosen on the host by random_resized_crop_box / center_crop_box (same RNG, same code as the
// CPU path); this file only applies them. Per output value the kernel does what crop_resize_normalize does,
// operation for operation: the source coordinate box_x * scale + (k + 0.5) * box_w * scale / out_w - 0.5 in
// double (clamped to the image, so a box reaching outside takes edge pixels), the same 256-entry table of
// normalised values per channel (built on the host exactly as the CPU builds it), the horizontal lerp then
// the vertical one in float without fused multiply-adds, then one rounding to the output dtype. So the
// result is the CPU's bit for bit where the host compiler does not contract a * b + c itself (x86-64
// without -march: no FMA); tests/backend_cuda_kernels/image_augment_test.cc states the tolerances.
//
// Grayscale: a 1-channel image into a 3-channel output is replicated (channel c reads table c at the gray
// level), as decode_jpeg(..., want_channels = 3) replicates it before the CPU transform. A 3-channel image
// into a 1-channel output gives its first channel: meant for a gray file that nvJPEG decoded as RGB (R = G
// = B = the file's luminance); a colour file's luminance is the CPU's to compute (decode_jpeg(..., 1)).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "data/image_transform.h"

namespace dlbench::cuda {

enum class Flip : uint8_t { none, horizontal };

// One decoded image in device memory and what to cut out of it.
struct AugmentImage {
  const uint8_t* pixels = nullptr;  // device memory, HWC interleaved: row y starts at pixels + y * pitch
  int width = 0, height = 0;        // of the decoded image, i.e. dct_scaled_size(full size, scale_eighths)
  int pitch = 0;                    // bytes from one row to the next, >= width * channels
  int channels = 0;                 // 1 (gray) or 3 (RGB)
  int scale_eighths = 8;            // the image was decoded at scale scale_eighths / 8 (1..8)
  CropBox box;                      // in the FULL-size image's pixels (as image_transform.h's functions give)
  Flip flip = Flip::none;
};

// Where the batch goes: a dense [batch, channels, height, width] tensor (logical dims) in `layout`
// (nhwc: batch x height x width x channels; nchw: batch x channels x height x width), device memory.
struct AugmentOutput {
  void* data = nullptr;
  int width = 0, height = 0;
  int channels = 3;          // 1 or 3
  DType dtype = DType::f16;  // f32, f16 or bf16 (round to nearest even)
  Layout layout = Layout::nhwc;
};

// Launches the batched transform. Owns what one launch needs besides the images: the per-image
// descriptors and the normalisation table, staged in pinned host memory and sent with one
// cudaMemcpyAsync per batch into device memory, in two slots used in turn; before a slot is rewritten the
// host waits for the launch that last used it (two batches back), so batch k+1 can be prepared while
// batch k still runs. One object per pipeline: not thread-safe; calls may use different streams. It
// belongs to the device current at construction, which must be current at every call.
class ImageAugmenter {
 public:
  explicit ImageAugmenter(int max_batch);  // the most images one call takes (1..65535)
  ~ImageAugmenter();
  ImageAugmenter(const ImageAugmenter&) = delete;
  ImageAugmenter& operator=(const ImageAugmenter&) = delete;

  // Writes images.size() samples to `out` (sample n from images[n]), asynchronously on `stream`. The
  // images' pixels must stay valid and unchanged until the stream has run the launch; `images` itself
  // (host memory) may be reused once this returns. Throws dlbench::Error on bad arguments (sizes,
  // channels, dtype, a box that is not finite or empty, a normalisation with a zero std) and on CUDA
  // failures. An empty batch does nothing.
  void run(std::span<const AugmentImage> images, const AugmentOutput& out, const Normalization& norm,
           cudaStream_t stream);

  int max_batch() const { return max_batch_; }

 private:
  struct Slot {
    void* host = nullptr;    // pinned staging
    void* device = nullptr;  // what the kernel reads
    cudaEvent_t done = nullptr;
    bool used = false;
  };
  void release();
  int max_batch_;
  Slot slots_[2];
  int next_ = 0;
};

}  // namespace dlbench::cuda
