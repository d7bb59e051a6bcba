#include "data/nvjpeg_library.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>
#include <type_traits>

namespace dlbench {

namespace {

// Every entry point of `l` from `lib`; the name of the first one missing, or nullptr.
const char* load_entry_points(void* lib, NvjpegLibrary& l) {
  const char* missing = nullptr;
  auto load = [&](auto& fn, const char* symbol) {
    if (missing) return;
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
    if (!fn) missing = symbol;
  };
  load(l.nvjpegGetProperty, "nvjpegGetProperty");
  load(l.nvjpegCreateEx, "nvjpegCreateEx");
  load(l.nvjpegDestroy, "nvjpegDestroy");
  load(l.nvjpegGetHardwareDecoderInfo, "nvjpegGetHardwareDecoderInfo");
  load(l.nvjpegJpegStateCreate, "nvjpegJpegStateCreate");
  load(l.nvjpegJpegStateDestroy, "nvjpegJpegStateDestroy");
  load(l.nvjpegGetImageInfo, "nvjpegGetImageInfo");
  load(l.nvjpegDecodeBatchedInitialize, "nvjpegDecodeBatchedInitialize");
  load(l.nvjpegDecodeBatched, "nvjpegDecodeBatched");
  load(l.nvjpegDecodeBatchedEx, "nvjpegDecodeBatchedEx");
  load(l.nvjpegDecodeBatchedSupported, "nvjpegDecodeBatchedSupported");
  load(l.nvjpegDecodeBatchedSupportedEx, "nvjpegDecodeBatchedSupportedEx");
  load(l.nvjpegJpegStreamCreate, "nvjpegJpegStreamCreate");
  load(l.nvjpegJpegStreamDestroy, "nvjpegJpegStreamDestroy");
  load(l.nvjpegJpegStreamParse, "nvjpegJpegStreamParse");
  load(l.nvjpegJpegStreamParseHeader, "nvjpegJpegStreamParseHeader");
  load(l.nvjpegJpegStreamGetFrameDimensions, "nvjpegJpegStreamGetFrameDimensions");
  load(l.nvjpegJpegStreamGetComponentsNum, "nvjpegJpegStreamGetComponentsNum");
  load(l.nvjpegJpegStreamGetChromaSubsampling, "nvjpegJpegStreamGetChromaSubsampling");
  load(l.nvjpegJpegStreamGetJpegEncoding, "nvjpegJpegStreamGetJpegEncoding");
  load(l.nvjpegDecodeParamsCreate, "nvjpegDecodeParamsCreate");
  load(l.nvjpegDecodeParamsDestroy, "nvjpegDecodeParamsDestroy");
  load(l.nvjpegDecodeParamsSetOutputFormat, "nvjpegDecodeParamsSetOutputFormat");
  load(l.nvjpegDecodeParamsSetROI, "nvjpegDecodeParamsSetROI");
  load(l.nvjpegDecoderCreate, "nvjpegDecoderCreate");
  load(l.nvjpegDecoderDestroy, "nvjpegDecoderDestroy");
  load(l.nvjpegDecoderJpegSupported, "nvjpegDecoderJpegSupported");
  load(l.nvjpegDecoderStateCreate, "nvjpegDecoderStateCreate");
  load(l.nvjpegDecodeJpeg, "nvjpegDecodeJpeg");
  load(l.nvjpegDecodeJpegHost, "nvjpegDecodeJpegHost");
  load(l.nvjpegDecodeJpegTransferToDevice, "nvjpegDecodeJpegTransferToDevice");
  load(l.nvjpegDecodeJpegDevice, "nvjpegDecodeJpegDevice");
  load(l.nvjpegBufferPinnedCreate, "nvjpegBufferPinnedCreate");
  load(l.nvjpegBufferPinnedDestroy, "nvjpegBufferPinnedDestroy");
  load(l.nvjpegBufferDeviceCreate, "nvjpegBufferDeviceCreate");
  load(l.nvjpegBufferDeviceDestroy, "nvjpegBufferDeviceDestroy");
  load(l.nvjpegStateAttachPinnedBuffer, "nvjpegStateAttachPinnedBuffer");
  load(l.nvjpegStateAttachDeviceBuffer, "nvjpegStateAttachDeviceBuffer");
  return missing;
}

}  // namespace

std::unique_ptr<NvjpegLibrary> NvjpegLibrary::load(const std::vector<const char*>& sonames,
                                                   std::string* why_not) {
  std::string reason = fmt::format("nvJPEG not found ({})", sonames.empty() ? "" : sonames.front());
  for (const char* soname : sonames) {
    // RTLD_LOCAL: nvJPEG's symbols stay out of the process's namespace (they are reached only through here).
    void* lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!lib) continue;
    auto l = std::make_unique<NvjpegLibrary>();
    if (const char* missing = load_entry_points(lib, *l)) {
      // An older or foreign file of that name: not the library these declarations describe.
      reason = fmt::format("nvJPEG {} lacks {}", soname, missing);
      dlclose(lib);
      continue;
    }
    // The file stays open for as long as the pointers live (never closed: the process's lifetime).
    l->nvjpegGetProperty(nvjpeg::MAJOR_VERSION, &l->major);
    l->nvjpegGetProperty(nvjpeg::MINOR_VERSION, &l->minor);
    l->nvjpegGetProperty(nvjpeg::PATCH_LEVEL, &l->patch);
    l->soname = soname;
    if (why_not) why_not->clear();
    return l;
  }
  if (why_not) *why_not = reason;
  return nullptr;
}

const NvjpegLibrary* NvjpegLibrary::open(std::string* why_not) {
  static std::unique_ptr<NvjpegLibrary> library;
  static std::string reason;
  static std::once_flag once;
  // CUDA 13's first, then 12's: the entry points used are the same in both.
  std::call_once(once, [] { library = load({"libnvjpeg.so.13", "libnvjpeg.so.12"}, &reason); });
  if (why_not) *why_not = library ? std::string() : reason;
  return library.get();
}

std::string NvjpegLibrary::version() const { return fmt::format("{}.{}.{}", major, minor, patch); }

std::string nvjpeg_status_text(int status) {
  static const char* const kNames[] = {"NVJPEG_STATUS_SUCCESS",
                                       "NVJPEG_STATUS_NOT_INITIALIZED",
                                       "NVJPEG_STATUS_INVALID_PARAMETER",
                                       "NVJPEG_STATUS_BAD_JPEG",
                                       "NVJPEG_STATUS_JPEG_NOT_SUPPORTED",
                                       "NVJPEG_STATUS_ALLOCATOR_FAILURE",
                                       "NVJPEG_STATUS_EXECUTION_FAILED",
                                       "NVJPEG_STATUS_ARCH_MISMATCH",
                                       "NVJPEG_STATUS_INTERNAL_ERROR",
                                       "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED",
                                       "NVJPEG_STATUS_INCOMPLETE_BITSTREAM"};
  constexpr int kCount = static_cast<int>(std::size(kNames));
  const char* name = status >= 0 && status < kCount ? kNames[status] : "unknown nvJPEG status";
  return fmt::format("{} ({})", name, status);
}

}  // namespace dlbench
