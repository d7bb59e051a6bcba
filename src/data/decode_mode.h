// --decode auto|cpu|gpu: where JPEGs are decoded, resolved once per run from the flag, the device and
// whether nvJPEG opens (data/nvjpeg_library.h), then passed down as the mode used.
//
// gpu: nvJPEG's batched decode and the batched augmentation kernel (data/gpu_image_pipeline.h); cpu:
// libjpeg-turbo on the data threads (data/image_dataset.h). `auto` takes the GPU where it can and says in
// one line why where it cannot.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace dlbench {

struct NvjpegLibrary;

// automatic: the GPU where nvJPEG loads and the run's device is a GPU, else the CPU.
enum class DecodeMode : uint8_t { automatic, cpu, gpu };

// "auto", "cpu", "gpu".
const char* decode_mode_name(DecodeMode mode);

// The flag's text as a mode; UserError naming `flag` (e.g. "--decode") for anything else.
DecodeMode parse_decode_mode(const std::string& text, const char* flag);

// The mode used (cpu or gpu, never automatic) for images decoded for a run on `device`, asking
// NvjpegLibrary::open() where it matters. UserError (one line) where `requested` cannot be honoured: gpu
// on the CPU device, or without nvJPEG. *note: a line to print, or "" (auto on a GPU device without nvJPEG
// says why it decodes on the CPU; auto on the CPU device says nothing).
DecodeMode resolve_decode(DecodeMode requested, DeviceKind device, std::string* note);

// The same with the library given: `library` (nullptr where it did not open, `why_not` saying why), for
// tests of every branch on any machine.
DecodeMode resolve_decode(DecodeMode requested, DeviceKind device, const NvjpegLibrary* library,
                          const std::string& why_not, std::string* note);

}  // namespace dlbench
