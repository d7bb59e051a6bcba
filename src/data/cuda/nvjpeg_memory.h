// The device and pinned host memory nvJPEG allocates for itself, from a cache that keeps what it frees.
//
// nvJPEG allocates and frees buffers as batches come (its batched state, per-image staging), and
// cudaFree and cudaFreeHost wait for the whole device: during training, for the step's graph. A decode
// thread that frees memory would then wait for every step, and decoding would no longer overlap training.
// These allocators give nvJPEG blocks from a process-wide cache (per device for device memory, per flags
// for pinned memory, the smallest free block that fits and wastes at most half of itself); its frees put
// blocks back. Nothing is returned to CUDA before the process ends, so the cache holds the most nvJPEG ever
// held at once. Thread-safe (every pipeline's decoders share it).
#pragma once

#include "data/nvjpeg_library.h"

namespace dlbench::cuda {

nvjpeg::nvjpegDevAllocator_t* cached_nvjpeg_device_allocator();
nvjpeg::nvjpegPinnedAllocator_t* cached_nvjpeg_pinned_allocator();

}  // namespace dlbench::cuda
