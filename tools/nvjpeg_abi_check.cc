// Checks src/data/nvjpeg_library.h against the real nvjpeg.h: fails TO COMPILE where an enum value, a
// struct's size or field offset, or an entry point's signature differs; then, run, opens nvJPEG through
// dlbench's loader and says its version and whether the hardware backend starts.
//
// On a machine with the CUDA toolkit (not part of the CMake build; CI has no nvjpeg.h), from the root:
// clang-format off
//   CUDA=/usr/local/cuda; g++ -std=c++20 -Wall -Wextra -I src -I $CUDA/targets/x86_64-linux/include tools/nvjpeg_abi_check.cc src/data/nvjpeg_library.cc src/core/status.cc -ldl -lfmt -Wl,-rpath,$CUDA/targets/x86_64-linux/lib -o nvjpeg_abi_check && ./nvjpeg_abi_check
// clang-format on
//
// Our declarations carry nvJPEG's names in namespace dlbench::nvjpeg; the real ones are global. Each of
// our types is mapped to its real counterpart (Real<>), through pointers, const and function types, so
// that `Real<decltype(NvjpegLibrary::f)>` must be exactly `decltype(&::f)`.
#include <nvjpeg.h>

#include <cstddef>
#include <cstdio>
#include <string>
#include <type_traits>

#include "data/nvjpeg_library.h"

namespace ours = dlbench::nvjpeg;
using dlbench::NvjpegLibrary;

// ---- our type -> nvjpeg.h's type ----
template <typename T>
struct RealOf {
  using type = T;  // the types both share: int, size_t, unsigned char, void, cudaStream_t ...
};
template <typename T>
using Real = typename RealOf<T>::type;
template <typename T>
struct RealOf<const T> {
  using type = const Real<T>;
};
template <typename T>
struct RealOf<T*> {
  using type = Real<T>*;
};
template <typename R, typename... Args>
struct RealOf<R (*)(Args...)> {
  using type = Real<R> (*)(Real<Args>...);
};

#define MAPS_TO(our_type, real_type) \
  template <>                        \
  struct RealOf<our_type> {          \
    using type = real_type;          \
  }
MAPS_TO(ours::nvjpegStatus_t, nvjpegStatus_t);
MAPS_TO(ours::nvjpegChromaSubsampling_t, nvjpegChromaSubsampling_t);
MAPS_TO(ours::nvjpegOutputFormat_t, nvjpegOutputFormat_t);
MAPS_TO(ours::nvjpegBackend_t, nvjpegBackend_t);
MAPS_TO(ours::nvjpegJpegEncoding_t, nvjpegJpegEncoding_t);
MAPS_TO(ours::libraryPropertyType, libraryPropertyType);
MAPS_TO(ours::nvjpegImage_t, nvjpegImage_t);
MAPS_TO(ours::nvjpegDevAllocator_t, nvjpegDevAllocator_t);
MAPS_TO(ours::nvjpegPinnedAllocator_t, nvjpegPinnedAllocator_t);
MAPS_TO(ours::nvjpegHandle, nvjpegHandle);
MAPS_TO(ours::nvjpegJpegState, nvjpegJpegState);
MAPS_TO(ours::nvjpegJpegStream, nvjpegJpegStream);
MAPS_TO(ours::nvjpegDecodeParams, nvjpegDecodeParams);
MAPS_TO(ours::nvjpegJpegDecoder, nvjpegJpegDecoder);
MAPS_TO(ours::nvjpegBufferPinned, nvjpegBufferPinned);
MAPS_TO(ours::nvjpegBufferDevice, nvjpegBufferDevice);

// ---- the stream type is the very one ----
static_assert(std::is_same_v<ours::CudaStream, cudaStream_t>, "CudaStream is not cudaStream_t");

// ---- enum values and sizes ----
#define SAME_VALUE(name) \
  static_assert(static_cast<long long>(ours::name) == static_cast<long long>(::name), #name " differs")
#define SAME_ENUM_SIZE(type) static_assert(sizeof(ours::type) == sizeof(::type), "sizeof " #type " differs")
SAME_ENUM_SIZE(nvjpegStatus_t);
SAME_VALUE(NVJPEG_STATUS_SUCCESS);
SAME_VALUE(NVJPEG_STATUS_NOT_INITIALIZED);
SAME_VALUE(NVJPEG_STATUS_INVALID_PARAMETER);
SAME_VALUE(NVJPEG_STATUS_BAD_JPEG);
SAME_VALUE(NVJPEG_STATUS_JPEG_NOT_SUPPORTED);
SAME_VALUE(NVJPEG_STATUS_ALLOCATOR_FAILURE);
SAME_VALUE(NVJPEG_STATUS_EXECUTION_FAILED);
SAME_VALUE(NVJPEG_STATUS_ARCH_MISMATCH);
SAME_VALUE(NVJPEG_STATUS_INTERNAL_ERROR);
SAME_VALUE(NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED);
SAME_VALUE(NVJPEG_STATUS_INCOMPLETE_BITSTREAM);
SAME_ENUM_SIZE(nvjpegChromaSubsampling_t);
SAME_VALUE(NVJPEG_CSS_444);
SAME_VALUE(NVJPEG_CSS_422);
SAME_VALUE(NVJPEG_CSS_420);
SAME_VALUE(NVJPEG_CSS_440);
SAME_VALUE(NVJPEG_CSS_411);
SAME_VALUE(NVJPEG_CSS_410);
SAME_VALUE(NVJPEG_CSS_GRAY);
SAME_VALUE(NVJPEG_CSS_410V);
SAME_VALUE(NVJPEG_CSS_UNKNOWN);
SAME_ENUM_SIZE(nvjpegOutputFormat_t);
SAME_VALUE(NVJPEG_OUTPUT_UNCHANGED);
SAME_VALUE(NVJPEG_OUTPUT_YUV);
SAME_VALUE(NVJPEG_OUTPUT_Y);
SAME_VALUE(NVJPEG_OUTPUT_RGB);
SAME_VALUE(NVJPEG_OUTPUT_BGR);
SAME_VALUE(NVJPEG_OUTPUT_RGBI);
SAME_VALUE(NVJPEG_OUTPUT_BGRI);
SAME_ENUM_SIZE(nvjpegBackend_t);
SAME_VALUE(NVJPEG_BACKEND_DEFAULT);
SAME_VALUE(NVJPEG_BACKEND_HYBRID);
SAME_VALUE(NVJPEG_BACKEND_GPU_HYBRID);
SAME_VALUE(NVJPEG_BACKEND_HARDWARE);
SAME_VALUE(NVJPEG_BACKEND_GPU_HYBRID_DEVICE);
SAME_VALUE(NVJPEG_BACKEND_HARDWARE_DEVICE);
SAME_VALUE(NVJPEG_BACKEND_LOSSLESS_JPEG);
SAME_ENUM_SIZE(nvjpegJpegEncoding_t);
SAME_VALUE(NVJPEG_ENCODING_UNKNOWN);
SAME_VALUE(NVJPEG_ENCODING_BASELINE_DCT);
SAME_VALUE(NVJPEG_ENCODING_EXTENDED_SEQUENTIAL_DCT_HUFFMAN);
SAME_VALUE(NVJPEG_ENCODING_PROGRESSIVE_DCT_HUFFMAN);
SAME_VALUE(NVJPEG_ENCODING_LOSSLESS_HUFFMAN);
SAME_ENUM_SIZE(libraryPropertyType);
SAME_VALUE(MAJOR_VERSION);
SAME_VALUE(MINOR_VERSION);
SAME_VALUE(PATCH_LEVEL);
// The macros of nvjpeg.h, under names of our own.
static_assert(ours::kMaxComponents == NVJPEG_MAX_COMPONENT, "NVJPEG_MAX_COMPONENT differs");
static_assert(ours::kFlagsDefault == NVJPEG_FLAGS_DEFAULT, "NVJPEG_FLAGS_DEFAULT differs");
static_assert(ours::kFlagsHwDecodeNoPipeline == NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE,
              "NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE differs");
static_assert(ours::kFlagsEnableMemoryPools == (NVJPEG_FLAGS_ENABLE_MEMORY_POOLS),
              "NVJPEG_FLAGS_ENABLE_MEMORY_POOLS differs");
static_assert(ours::kFlagsBitstreamStrict == (NVJPEG_FLAGS_BITSTREAM_STRICT),
              "NVJPEG_FLAGS_BITSTREAM_STRICT differs");

// ---- struct layouts ----
#define SAME_LAYOUT(type, field)                                                                \
  static_assert(offsetof(ours::type, field) == offsetof(::type, field) &&                       \
                    sizeof(ours::type::field) == sizeof(::type::field) &&                       \
                    std::is_same_v<Real<decltype(ours::type::field)>, decltype(::type::field)>, \
                #type "::" #field " differs")
#define SAME_SIZE(type) static_assert(sizeof(ours::type) == sizeof(::type), "sizeof " #type " differs")
SAME_SIZE(nvjpegImage_t);
SAME_LAYOUT(nvjpegImage_t, channel);
SAME_LAYOUT(nvjpegImage_t, pitch);
SAME_SIZE(nvjpegDevAllocator_t);
SAME_LAYOUT(nvjpegDevAllocator_t, dev_malloc);
SAME_LAYOUT(nvjpegDevAllocator_t, dev_free);
SAME_SIZE(nvjpegPinnedAllocator_t);
SAME_LAYOUT(nvjpegPinnedAllocator_t, pinned_malloc);
SAME_LAYOUT(nvjpegPinnedAllocator_t, pinned_free);

// ---- entry points ----
constexpr int kEntryPoints = 38;  // the function pointers of NvjpegLibrary, each checked below
#define SAME_SIGNATURE(name)                                                            \
  static_assert(std::is_same_v<Real<decltype(NvjpegLibrary::name)>, decltype(&::name)>, \
                #name " differs from nvjpeg.h")
SAME_SIGNATURE(nvjpegGetProperty);
SAME_SIGNATURE(nvjpegCreateEx);
SAME_SIGNATURE(nvjpegDestroy);
SAME_SIGNATURE(nvjpegGetHardwareDecoderInfo);
SAME_SIGNATURE(nvjpegJpegStateCreate);
SAME_SIGNATURE(nvjpegJpegStateDestroy);
SAME_SIGNATURE(nvjpegGetImageInfo);
SAME_SIGNATURE(nvjpegDecodeBatchedInitialize);
SAME_SIGNATURE(nvjpegDecodeBatched);
SAME_SIGNATURE(nvjpegDecodeBatchedEx);
SAME_SIGNATURE(nvjpegDecodeBatchedSupported);
SAME_SIGNATURE(nvjpegDecodeBatchedSupportedEx);
SAME_SIGNATURE(nvjpegJpegStreamCreate);
SAME_SIGNATURE(nvjpegJpegStreamDestroy);
SAME_SIGNATURE(nvjpegJpegStreamParse);
SAME_SIGNATURE(nvjpegJpegStreamParseHeader);
SAME_SIGNATURE(nvjpegJpegStreamGetFrameDimensions);
SAME_SIGNATURE(nvjpegJpegStreamGetComponentsNum);
SAME_SIGNATURE(nvjpegJpegStreamGetChromaSubsampling);
SAME_SIGNATURE(nvjpegJpegStreamGetJpegEncoding);
SAME_SIGNATURE(nvjpegDecodeParamsCreate);
SAME_SIGNATURE(nvjpegDecodeParamsDestroy);
SAME_SIGNATURE(nvjpegDecodeParamsSetOutputFormat);
SAME_SIGNATURE(nvjpegDecodeParamsSetROI);
SAME_SIGNATURE(nvjpegDecoderCreate);
SAME_SIGNATURE(nvjpegDecoderDestroy);
SAME_SIGNATURE(nvjpegDecoderJpegSupported);
SAME_SIGNATURE(nvjpegDecoderStateCreate);
SAME_SIGNATURE(nvjpegDecodeJpeg);
SAME_SIGNATURE(nvjpegDecodeJpegHost);
SAME_SIGNATURE(nvjpegDecodeJpegTransferToDevice);
SAME_SIGNATURE(nvjpegDecodeJpegDevice);
SAME_SIGNATURE(nvjpegBufferPinnedCreate);
SAME_SIGNATURE(nvjpegBufferPinnedDestroy);
SAME_SIGNATURE(nvjpegBufferDeviceCreate);
SAME_SIGNATURE(nvjpegBufferDeviceDestroy);
SAME_SIGNATURE(nvjpegStateAttachPinnedBuffer);
SAME_SIGNATURE(nvjpegStateAttachDeviceBuffer);
// A pointer added to NvjpegLibrary without its check above moves `major`.
static_assert(std::is_standard_layout_v<NvjpegLibrary>);
static_assert(offsetof(NvjpegLibrary, major) == kEntryPoints * sizeof(void (*)()),
              "NvjpegLibrary has an entry point this file does not check (or kEntryPoints is stale)");

int main() {
  std::printf("nvjpeg_abi_check: the declarations match nvjpeg.h %d.%d.%d (it compiled)\n", NVJPEG_VER_MAJOR,
              NVJPEG_VER_MINOR, NVJPEG_VER_PATCH);
  std::string why_not;
  const NvjpegLibrary* lib = NvjpegLibrary::open(&why_not);
  if (!lib) {
    std::printf("nvjpeg_abi_check: the loader found no library: %s\n", why_not.c_str());
    return 1;
  }
  std::printf("nvjpeg_abi_check: opened %s, nvJPEG %s\n", lib->soname, lib->version().c_str());
  int failed = 0;
  for (ours::nvjpegBackend_t backend : {ours::NVJPEG_BACKEND_HARDWARE, ours::NVJPEG_BACKEND_DEFAULT}) {
    ours::nvjpegHandle_t handle = nullptr;
    const int status = lib->nvjpegCreateEx(backend, nullptr, nullptr, ours::kFlagsDefault, &handle);
    const char* name = backend == ours::NVJPEG_BACKEND_HARDWARE ? "HARDWARE" : "DEFAULT";
    std::printf("nvjpeg_abi_check: nvjpegCreateEx(NVJPEG_BACKEND_%s): %s\n", name,
                dlbench::nvjpeg_status_text(status).c_str());
    if (status != ours::NVJPEG_STATUS_SUCCESS) {
      failed += backend == ours::NVJPEG_BACKEND_DEFAULT;  // the hardware backend may be absent (no engines)
      continue;
    }
    if (backend == ours::NVJPEG_BACKEND_HARDWARE) {
      unsigned engines = 0, cores = 0;
      const int info = lib->nvjpegGetHardwareDecoderInfo(handle, &engines, &cores);
      std::printf("nvjpeg_abi_check:   hardware decoder: %u engines x %u cores (%s)\n", engines, cores,
                  dlbench::nvjpeg_status_text(info).c_str());
    }
    ours::nvjpegJpegState_t state = nullptr;
    const int state_status = lib->nvjpegJpegStateCreate(handle, &state);
    std::printf("nvjpeg_abi_check:   nvjpegJpegStateCreate: %s\n",
                dlbench::nvjpeg_status_text(state_status).c_str());
    if (state) lib->nvjpegJpegStateDestroy(state);
    lib->nvjpegDestroy(handle);
  }
  return failed ? 1 : 0;
}
