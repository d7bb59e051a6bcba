// JPEG batches decoded and augmented on the GPU, delivered straight into the network's input tensor.
//
// Per rank, batch n of a run goes through a read thread, one of W decode threads and the GPU
// (data/cuda/gpu_image_pipeline.cc):
//   1. the read thread: --data-threads workers read each sample's compressed bytes (a file or a shard
//      record) and its JPEG header, and choose its crop with choose_sample_crop (image_dataset.h): the CPU
//      path's boxes, draw for draw. A file whose bytes or header are bad is replaced by the next sample, as
//      the CPU path replaces it. No decoding happens here.
//   2. decode thread n % W (--gpu-decode-threads; nvJPEG's host side costs ~20 ms a batch of 256, so one
//      thread alone feeds ~13,000 img/s): cuda::JpegBatchDecoder decodes the batch on the thread's own
//      stream (the JPEG engines; nvJPEG's CUDA backend for what they refuse), alternating between two
//      decoders so that a decode never overwrites pixels an augmentation still reads; the images nvJPEG
//      cannot take (CMYK, colour into a 1-channel network...) are decoded by libjpeg-turbo on this thread,
//      uploaded, and counted in decoded_on_cpu; then cuda::ImageAugmenter cuts, resizes, flips, normalises
//      and casts the whole batch into one of `depth` device buffers in one launch, and an event marks the
//      batch ready.
//   3. next(), on the training thread: the compute stream waits for that event and copies the batch into the
//      network's input (device to device: 77 MB for ResNet-50 fp16 at batch 256, an
//      estimated 60 us of a 28 ms step) and its labels; an event recorded
//      after the copies frees the buffer. The step's CUDA graph keeps its fixed input address, and the next
//      batches' decoding overlaps the step's forward and backward alike.
// nvJPEG decodes at full size: a crop much more than twice the output's size aliases (the CPU path decodes
// DCT-downscaled there). ImageNet-sized photos are within that; very large ones are not.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/batch_prefetcher.h"
#include "data/image_dataset.h"

namespace dlbench {

// What the pipeline did so far (its own counts; the bad files are also the data set's, note_bad).
struct GpuPipelineStats {
  int64_t decoded_on_hardware = 0;  // by the GPU's JPEG engines
  int64_t decoded_on_gpu_cuda = 0;  // by nvJPEG's CUDA backend (progressive files, or no engines)
  int64_t decoded_on_cpu = 0;       // by libjpeg-turbo: the images nvJPEG could not take
  int64_t skipped = 0;              // bad files met (each time one was drawn)
  // Where the two threads' time went, in seconds (for the profile: which stage sets the pace).
  double read_seconds = 0;         // read thread: reading files and headers (all readers at once)
  double read_idle_seconds = 0;    // read thread: waiting for a free slot
  double decode_seconds = 0;       // decode thread: JpegBatchDecoder::decode (screening, submitting)
  double gpu_wait_seconds = 0;     // decode thread: waiting for its decoder's previous batch on the GPU
  double cpu_decode_seconds = 0;   // decode thread: libjpeg-turbo fallbacks and their uploads
  double augment_seconds = 0;      // decode thread: ImageAugmenter::run (waits for its staging slot)
  double decode_idle_seconds = 0;  // decode thread: waiting for the read thread
};

// "read 3.1 (idle 20.0) | decode 5.2, cpu 0.0, augment 0.4 (idle 1.0) ms per batch": the stages' host
// time per batch between two snapshots of the stats.
std::string pipeline_profile(const GpuPipelineStats& before, const GpuPipelineStats& after, int64_t batches);

struct GpuPipelineOptions {
  std::vector<int64_t> image_dims;  // [batch, C, H, W] of the network's input
  DType dtype = DType::f16;         // the input's dtype (f32, f16, bf16)
  Layout layout = Layout::nhwc;
  int64_t count = 0;                      // batches the run takes
  BatchPrefetcher::BatchIndices indices;  // batch n's sample indices, called on the read thread in order
  int depth = 4;                          // device buffers: up to depth batches ready ahead
  int decode_threads = 2;                 // threads that decode and augment, batches in turn (< depth)
  int device = 0;                         // the CUDA device (the network's)
  bool hardware = true;                   // the JPEG engines where the GPU has them; false: CUDA backend only
};

class GpuImagePipeline {
 public:
  virtual ~GpuImagePipeline() = default;
  // Waits until batch n (n = the calls so far) is ready, then enqueues on `stream` (a cudaStream_t of the
  // pipeline's device, given as void* so that this header needs no CUDA) a wait for it and the copies into
  // `images` and `labels` (device tensors: image_dims in dtype and layout, i32 [batch]). Returns the
  // batch's labels in host memory, valid until the next call. Rethrows what building the batch threw (a bad
  // file under --strict, a CUDA failure). More than `count` calls is a caller bug.
  virtual std::span<const int32_t> next(Tensor& images, Tensor& labels, void* stream) = 0;
  // Seconds next() waited for batches, in all.
  virtual double waited_seconds() const = 0;
  virtual GpuPipelineStats stats() const = 0;
  // "nvJPEG 13.0.1, JPEG engines" (or the CUDA backend and why).
  virtual std::string description() const = 0;
};

// The pipeline for `data` (which outlives it), on options.device. UserError where nvJPEG does not open
// or the build has no CUDA; dlbench::Error for bad options.
std::unique_ptr<GpuImagePipeline> make_gpu_image_pipeline(const ImageDataset& data,
                                                          GpuPipelineOptions options);

}  // namespace dlbench
