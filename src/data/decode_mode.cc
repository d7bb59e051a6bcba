#include "data/decode_mode.h"

#include "core/status.h"
#include "data/nvjpeg_library.h"

namespace dlbench {

const char* decode_mode_name(DecodeMode mode) {
  switch (mode) {
    case DecodeMode::automatic:
      return "auto";
    case DecodeMode::cpu:
      return "cpu";
    case DecodeMode::gpu:
      return "gpu";
  }
  return "?";
}

DecodeMode parse_decode_mode(const std::string& text, const char* flag) {
  if (text == "auto") return DecodeMode::automatic;
  if (text == "cpu") return DecodeMode::cpu;
  if (text == "gpu") return DecodeMode::gpu;
  throw_user_error("{} {}: unknown; choose auto, cpu or gpu", flag, text);
}

DecodeMode resolve_decode(DecodeMode requested, DeviceKind device, std::string* note) {
  // Only a GPU device can use nvJPEG: the CPU device never opens it (and so never prints about it).
  if (requested == DecodeMode::cpu || device != DeviceKind::cuda)
    return resolve_decode(requested, device, nullptr, "", note);
  std::string why_not;
  const NvjpegLibrary* library = NvjpegLibrary::open(&why_not);
  return resolve_decode(requested, device, library, why_not, note);
}

DecodeMode resolve_decode(DecodeMode requested, DeviceKind device, const NvjpegLibrary* library,
                          const std::string& why_not, std::string* note) {
  if (note) note->clear();
  if (requested == DecodeMode::cpu) return DecodeMode::cpu;
  const bool on_gpu = device == DeviceKind::cuda;
  if (requested == DecodeMode::gpu) {
    DLB_REQUIRE(on_gpu,
                "--decode gpu: the device is the CPU (nvJPEG decodes into a GPU's memory); use --decode cpu, "
                "or run on a GPU");
    DLB_REQUIRE(library, "--decode gpu: {}; install the CUDA toolkit's nvJPEG or use --decode cpu", why_not);
    return DecodeMode::gpu;
  }
  if (!on_gpu) return DecodeMode::cpu;
  if (!library) {
    if (note) *note = why_not + ": decoding on the CPU";
    return DecodeMode::cpu;
  }
  return DecodeMode::gpu;
}

}  // namespace dlbench
