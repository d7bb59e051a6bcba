// nvJPEG, the CUDA toolkit's JPEG decoder (the GPU's hardware JPEG engines on A100/H100/H200, its CUDA
// kernels elsewhere), opened at run time.
//
// nvJPEG ships with the toolkit, not the driver, and CI has neither: so, as bench/gpu_info.cc opens NVML,
// the library is dlopen'ed (libnvjpeg.so.13, then libnvjpeg.so.12) and the project declares here the C
// types, enum values and entry points of the batched and hardware decode path itself, with nvJPEG's own
// names, in namespace dlbench::nvjpeg. No nvjpeg.h is included, so the build needs no nvJPEG.
//
// These declarations must match nvjpeg.h exactly (values, struct layouts, signatures):
// tools/nvjpeg_abi_check.cc includes both and fails to compile where one differs. Run it on a machine
// with the toolkit after changing anything here.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

// The CUDA runtime's stream, as cuda_runtime_api.h names it (cudaStream_t is `CUstream_st*`). Declared at
// global scope so that nvjpeg::CudaStream is the very type cudaStream_t is, not a look-alike.
struct CUstream_st;

namespace dlbench::nvjpeg {

using CudaStream = CUstream_st*;

// NVJPEG_MAX_COMPONENT (a macro in nvjpeg.h, hence not its name here): planes of an nvjpegImage_t.
constexpr int kMaxComponents = 4;

// The enums have nvjpeg.h's values; a fixed underlying int keeps their size that of the C enums.
enum nvjpegStatus_t : int {
  NVJPEG_STATUS_SUCCESS = 0,
  NVJPEG_STATUS_NOT_INITIALIZED = 1,
  NVJPEG_STATUS_INVALID_PARAMETER = 2,
  NVJPEG_STATUS_BAD_JPEG = 3,
  NVJPEG_STATUS_JPEG_NOT_SUPPORTED = 4,
  NVJPEG_STATUS_ALLOCATOR_FAILURE = 5,
  NVJPEG_STATUS_EXECUTION_FAILED = 6,
  NVJPEG_STATUS_ARCH_MISMATCH = 7,
  NVJPEG_STATUS_INTERNAL_ERROR = 8,
  NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED = 9,
  NVJPEG_STATUS_INCOMPLETE_BITSTREAM = 10,
};

// Chroma subsampling of a stream; GRAY: one (luma) component. The hardware backend takes neither 410
// nor 411: such images fall back.
enum nvjpegChromaSubsampling_t : int {
  NVJPEG_CSS_444 = 0,
  NVJPEG_CSS_422 = 1,
  NVJPEG_CSS_420 = 2,
  NVJPEG_CSS_440 = 3,
  NVJPEG_CSS_411 = 4,
  NVJPEG_CSS_410 = 5,
  NVJPEG_CSS_GRAY = 6,
  NVJPEG_CSS_410V = 7,
  NVJPEG_CSS_UNKNOWN = -1,
};

// What a decode writes. RGBI/BGRI: interleaved, into channel[0] only (pitch >= 3 x width); the planar
// formats one plane per channel.
enum nvjpegOutputFormat_t : int {
  NVJPEG_OUTPUT_UNCHANGED = 0,
  NVJPEG_OUTPUT_YUV = 1,
  NVJPEG_OUTPUT_Y = 2,
  NVJPEG_OUTPUT_RGB = 3,
  NVJPEG_OUTPUT_BGR = 4,
  NVJPEG_OUTPUT_RGBI = 5,
  NVJPEG_OUTPUT_BGRI = 6,
};

// HYBRID: Huffman on the CPU; GPU_HYBRID: Huffman on the GPU (batches of 50 and more); HARDWARE: the JPEG
// engines (baseline, single scan, no 410/411). The *_DEVICE ones take the compressed bytes in device
// memory.
enum nvjpegBackend_t : int {
  NVJPEG_BACKEND_DEFAULT = 0,
  NVJPEG_BACKEND_HYBRID = 1,
  NVJPEG_BACKEND_GPU_HYBRID = 2,
  NVJPEG_BACKEND_HARDWARE = 3,
  NVJPEG_BACKEND_GPU_HYBRID_DEVICE = 4,
  NVJPEG_BACKEND_HARDWARE_DEVICE = 5,
  NVJPEG_BACKEND_LOSSLESS_JPEG = 6,
};

// A stream's SOF marker: progressive images are not the hardware decoder's.
enum nvjpegJpegEncoding_t : int {
  NVJPEG_ENCODING_UNKNOWN = 0x0,
  NVJPEG_ENCODING_BASELINE_DCT = 0xc0,
  NVJPEG_ENCODING_EXTENDED_SEQUENTIAL_DCT_HUFFMAN = 0xc1,
  NVJPEG_ENCODING_PROGRESSIVE_DCT_HUFFMAN = 0xc2,
  NVJPEG_ENCODING_LOSSLESS_HUFFMAN = 0xc3,
};

// library_types.h's, for nvjpegGetProperty.
enum libraryPropertyType : int { MAJOR_VERSION = 0, MINOR_VERSION = 1, PATCH_LEVEL = 2 };

// nvjpegCreateEx's flags (NVJPEG_FLAGS_*, macros in nvjpeg.h).
constexpr unsigned kFlagsDefault = 0;
constexpr unsigned kFlagsHwDecodeNoPipeline = 1u << 0;
constexpr unsigned kFlagsEnableMemoryPools = 1u << 1;
constexpr unsigned kFlagsBitstreamStrict = 1u << 2;

// The output of one image: device pointers and row pitches in bytes, per plane.
struct nvjpegImage_t {
  unsigned char* channel[kMaxComponents];
  size_t pitch[kMaxComponents];
};

// Allocators the library calls instead of cudaMalloc/cudaHostAlloc (nullptr: those).
using tDevMalloc = int (*)(void**, size_t);
using tDevFree = int (*)(void*);
using tPinnedMalloc = int (*)(void**, size_t, unsigned int flags);
using tPinnedFree = int (*)(void*);
struct nvjpegDevAllocator_t {
  tDevMalloc dev_malloc;
  tDevFree dev_free;
};
struct nvjpegPinnedAllocator_t {
  tPinnedMalloc pinned_malloc;
  tPinnedFree pinned_free;
};

// Opaque handles: the library's objects, never looked into.
struct nvjpegHandle;
struct nvjpegJpegState;
struct nvjpegJpegStream;
struct nvjpegDecodeParams;
struct nvjpegJpegDecoder;
struct nvjpegBufferPinned;
struct nvjpegBufferDevice;
using nvjpegHandle_t = nvjpegHandle*;              // the library instance, one backend
using nvjpegJpegState_t = nvjpegJpegState*;        // a decoder's state between phases / batches
using nvjpegJpegStream_t = nvjpegJpegStream*;      // a parsed bitstream (host side)
using nvjpegDecodeParams_t = nvjpegDecodeParams*;  // output format, ROI, CMYK per decode
using nvjpegJpegDecoder_t = nvjpegJpegDecoder*;    // one backend's decoder (decoupled API)
using nvjpegBufferPinned_t = nvjpegBufferPinned*;
using nvjpegBufferDevice_t = nvjpegBufferDevice*;

}  // namespace dlbench::nvjpeg

namespace dlbench {

// The entry points, as loaded from the library. Every one is required: a library lacking one is not
// used (open() says which). Named as in nvjpeg.h, so that NVIDIA's documentation reads for them.
struct NvjpegLibrary {
  using Status = nvjpeg::nvjpegStatus_t;
  using Handle = nvjpeg::nvjpegHandle_t;
  using State = nvjpeg::nvjpegJpegState_t;
  using Stream = nvjpeg::nvjpegJpegStream_t;
  using Params = nvjpeg::nvjpegDecodeParams_t;
  using Decoder = nvjpeg::nvjpegJpegDecoder_t;
  using Image = nvjpeg::nvjpegImage_t;
  using CudaStream = nvjpeg::CudaStream;

  // Library.
  Status (*nvjpegGetProperty)(nvjpeg::libraryPropertyType type, int* value);
  Status (*nvjpegCreateEx)(nvjpeg::nvjpegBackend_t backend, nvjpeg::nvjpegDevAllocator_t* dev_allocator,
                           nvjpeg::nvjpegPinnedAllocator_t* pinned_allocator, unsigned int flags,
                           Handle* handle);
  Status (*nvjpegDestroy)(Handle handle);
  // The hardware decoder's engines (fails where the handle's backend is not HARDWARE).
  Status (*nvjpegGetHardwareDecoderInfo)(Handle handle, unsigned int* num_engines,
                                         unsigned int* num_cores_per_engine);
  Status (*nvjpegJpegStateCreate)(Handle handle, State* state);
  Status (*nvjpegJpegStateDestroy)(State state);
  // Components, subsampling and per-component sizes (kMaxComponents ints each) from the header alone.
  Status (*nvjpegGetImageInfo)(Handle handle, const unsigned char* data, size_t length, int* components,
                               nvjpeg::nvjpegChromaSubsampling_t* subsampling, int* widths, int* heights);

  // Batched decode: Initialize once per batch size and format; data/lengths/destinations hold batch_size.
  Status (*nvjpegDecodeBatchedInitialize)(Handle handle, State state, int batch_size, int max_cpu_threads,
                                          nvjpeg::nvjpegOutputFormat_t output_format);
  Status (*nvjpegDecodeBatched)(Handle handle, State state, const unsigned char* const* data,
                                const size_t* lengths, Image* destinations, CudaStream stream);
  // The same with decode parameters per image (the hardware backend's ROI, format).
  Status (*nvjpegDecodeBatchedEx)(Handle handle, State state, const unsigned char* const* data,
                                  const size_t* lengths, Image* destinations, Params* decode_params,
                                  CudaStream stream);
  // Whether the hardware backend's batch takes a parsed stream: *is_supported == 0 means yes.
  Status (*nvjpegDecodeBatchedSupported)(Handle handle, Stream jpeg_stream, int* is_supported);
  Status (*nvjpegDecodeBatchedSupportedEx)(Handle handle, Stream jpeg_stream, Params decode_params,
                                           int* is_supported);

  // Bitstreams, parsed on the host.
  Status (*nvjpegJpegStreamCreate)(Handle handle, Stream* jpeg_stream);
  Status (*nvjpegJpegStreamDestroy)(Stream jpeg_stream);
  Status (*nvjpegJpegStreamParse)(Handle handle, const unsigned char* data, size_t length, int save_metadata,
                                  int save_stream, Stream jpeg_stream);
  Status (*nvjpegJpegStreamParseHeader)(Handle handle, const unsigned char* data, size_t length,
                                        Stream jpeg_stream);
  Status (*nvjpegJpegStreamGetFrameDimensions)(Stream jpeg_stream, unsigned int* width, unsigned int* height);
  Status (*nvjpegJpegStreamGetComponentsNum)(Stream jpeg_stream, unsigned int* components);
  Status (*nvjpegJpegStreamGetChromaSubsampling)(Stream jpeg_stream,
                                                 nvjpeg::nvjpegChromaSubsampling_t* subsampling);
  Status (*nvjpegJpegStreamGetJpegEncoding)(Stream jpeg_stream, nvjpeg::nvjpegJpegEncoding_t* encoding);

  // Decode parameters.
  Status (*nvjpegDecodeParamsCreate)(Handle handle, Params* decode_params);
  Status (*nvjpegDecodeParamsDestroy)(Params decode_params);
  Status (*nvjpegDecodeParamsSetOutputFormat)(Params decode_params, nvjpeg::nvjpegOutputFormat_t format);
  // (0, 0, -1, -1): the whole image.
  Status (*nvjpegDecodeParamsSetROI)(Params decode_params, int offset_x, int offset_y, int roi_width,
                                     int roi_height);

  // The decoupled API: one backend's decoder and its state, for images the batch does not take.
  Status (*nvjpegDecoderCreate)(Handle handle, nvjpeg::nvjpegBackend_t implementation, Decoder* decoder);
  Status (*nvjpegDecoderDestroy)(Decoder decoder);
  // *is_supported == 0: the decoder takes the stream with these parameters.
  Status (*nvjpegDecoderJpegSupported)(Decoder decoder, Stream jpeg_stream, Params decode_params,
                                       int* is_supported);
  Status (*nvjpegDecoderStateCreate)(Handle handle, Decoder decoder, State* state);
  Status (*nvjpegDecodeJpeg)(Handle handle, Decoder decoder, State state, Stream jpeg_stream,
                             Image* destination, Params decode_params, CudaStream stream);
  // The same in three phases: host (Huffman, on a CPU thread), the copy, the device part.
  Status (*nvjpegDecodeJpegHost)(Handle handle, Decoder decoder, State state, Params decode_params,
                                 Stream jpeg_stream);
  Status (*nvjpegDecodeJpegTransferToDevice)(Handle handle, Decoder decoder, State state, Stream jpeg_stream,
                                             CudaStream stream);
  Status (*nvjpegDecodeJpegDevice)(Handle handle, Decoder decoder, State state, Image* destination,
                                   CudaStream stream);

  // The buffers a decoupled state needs attached before its first decode.
  Status (*nvjpegBufferPinnedCreate)(Handle handle, nvjpeg::nvjpegPinnedAllocator_t* allocator,
                                     nvjpeg::nvjpegBufferPinned_t* buffer);
  Status (*nvjpegBufferPinnedDestroy)(nvjpeg::nvjpegBufferPinned_t buffer);
  Status (*nvjpegBufferDeviceCreate)(Handle handle, nvjpeg::nvjpegDevAllocator_t* allocator,
                                     nvjpeg::nvjpegBufferDevice_t* buffer);
  Status (*nvjpegBufferDeviceDestroy)(nvjpeg::nvjpegBufferDevice_t buffer);
  Status (*nvjpegStateAttachPinnedBuffer)(State state, nvjpeg::nvjpegBufferPinned_t buffer);
  Status (*nvjpegStateAttachDeviceBuffer)(State state, nvjpeg::nvjpegBufferDevice_t buffer);

  // Not entry points (tools/nvjpeg_abi_check.cc counts the pointers above up to `major`).
  int major = 0, minor = 0, patch = 0;  // nvjpegGetProperty's
  const char* soname = nullptr;         // the file opened: "libnvjpeg.so.13"

  // The process's nvJPEG, opened once and kept until exit: nullptr where there is none, with the reason
  // in *why_not: "nvJPEG not found (libnvjpeg.so.13)", or the file and the entry point it lacks.
  static const NvjpegLibrary* open(std::string* why_not);

  // The first of `sonames` that opens and has every entry point, not cached (open() is this, once, with
  // libnvjpeg.so.13 and libnvjpeg.so.12); the names must outlive it (string literals). A file found
  // without an entry point is closed again.
  static std::unique_ptr<NvjpegLibrary> load(const std::vector<const char*>& sonames, std::string* why_not);

  // "13.0.1"
  std::string version() const;
};

// "NVJPEG_STATUS_BAD_JPEG (3)", for error lines.
std::string nvjpeg_status_text(int status);

}  // namespace dlbench
