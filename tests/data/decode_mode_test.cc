// The nvJPEG loader and --decode's resolution: every branch, on any machine (the library is given, or
// looked for under names that exist or not).
#include "data/decode_mode.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "core/status.h"
#include "data/nvjpeg_library.h"

namespace dlbench {
namespace {

// The message of the UserError `body` throws ("" when it throws none).
template <typename Body>
std::string user_error_of(Body body) {
  try {
    body();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(NvjpegLibrary, AMissingLibraryGivesNullAndTheNameLookedFor) {
  std::string why_not;
  EXPECT_EQ(NvjpegLibrary::load({"libnvjpeg-not-here.so.13"}, &why_not), nullptr);
  EXPECT_EQ(why_not, "nvJPEG not found (libnvjpeg-not-here.so.13)");
}

TEST(NvjpegLibrary, ALibraryWithoutTheEntryPointsIsClosedNamingTheFirstMissing) {
  // libm opens everywhere and has no nvJPEG in it.
  std::string why_not;
  EXPECT_EQ(NvjpegLibrary::load({"libnvjpeg-not-here.so.13", "libm.so.6"}, &why_not), nullptr);
  EXPECT_EQ(why_not, "nvJPEG libm.so.6 lacks nvjpegGetProperty");
}

TEST(NvjpegLibrary, TheProcessLibraryIsFoundOrNamesLibnvjpeg13) {
  std::string why_not = "unset";
  const NvjpegLibrary* library = NvjpegLibrary::open(&why_not);
  if (library) {  // a machine with the CUDA toolkit's nvJPEG
    EXPECT_TRUE(why_not.empty()) << why_not;
    EXPECT_GE(library->major, 12);
    EXPECT_NE(library->nvjpegCreateEx, nullptr);
  } else {
    EXPECT_EQ(why_not, "nvJPEG not found (libnvjpeg.so.13)");
  }
  EXPECT_EQ(NvjpegLibrary::open(nullptr), library) << "opened once per process";
}

TEST(NvjpegLibrary, StatusTextNamesTheStatus) {
  EXPECT_EQ(nvjpeg_status_text(nvjpeg::NVJPEG_STATUS_BAD_JPEG), "NVJPEG_STATUS_BAD_JPEG (3)");
  EXPECT_EQ(nvjpeg_status_text(nvjpeg::NVJPEG_STATUS_INCOMPLETE_BITSTREAM),
            "NVJPEG_STATUS_INCOMPLETE_BITSTREAM (10)");
  EXPECT_EQ(nvjpeg_status_text(99), "unknown nvJPEG status (99)");
}

TEST(DecodeMode, ParsesTheThreeNamesAndRefusesOthers) {
  for (DecodeMode mode : {DecodeMode::automatic, DecodeMode::cpu, DecodeMode::gpu})
    EXPECT_EQ(parse_decode_mode(decode_mode_name(mode), "--decode"), mode);
  EXPECT_EQ(user_error_of([] { parse_decode_mode("GPU", "--decode"); }),
            "--decode GPU: unknown; choose auto, cpu or gpu");
}

const std::string kMissing = "nvJPEG not found (libnvjpeg.so.13)";

TEST(DecodeMode, CpuIsCpuEverywhereAndSaysNothing) {
  NvjpegLibrary present{};
  for (DeviceKind device : {DeviceKind::cpu, DeviceKind::cuda})
    for (const NvjpegLibrary* library : std::initializer_list<const NvjpegLibrary*>{nullptr, &present}) {
      std::string note = "unset";
      EXPECT_EQ(resolve_decode(DecodeMode::cpu, device, library, kMissing, &note), DecodeMode::cpu);
      EXPECT_EQ(note, "");
    }
}

TEST(DecodeMode, AutoOnTheCpuDeviceDecodesOnTheCpuSilently) {
  std::string note = "unset";
  EXPECT_EQ(resolve_decode(DecodeMode::automatic, DeviceKind::cpu, nullptr, kMissing, &note),
            DecodeMode::cpu);
  EXPECT_EQ(note, "");
  // Through the process's own lookup too: the CPU device does not even look.
  EXPECT_EQ(resolve_decode(DecodeMode::automatic, DeviceKind::cpu, &note), DecodeMode::cpu);
  EXPECT_EQ(note, "");
}

TEST(DecodeMode, AutoOnAGpuWithoutNvjpegFallsBackWithItsLine) {
  std::string note;
  EXPECT_EQ(resolve_decode(DecodeMode::automatic, DeviceKind::cuda, nullptr, kMissing, &note),
            DecodeMode::cpu);
  EXPECT_EQ(note, "nvJPEG not found (libnvjpeg.so.13): decoding on the CPU");
}

TEST(DecodeMode, AutoOnAGpuWithNvjpegDecodesOnTheGpuQuietly) {
  NvjpegLibrary present{};
  present.major = 13;
  present.minor = 0;
  present.patch = 1;
  std::string note = "unset";
  EXPECT_EQ(resolve_decode(DecodeMode::automatic, DeviceKind::cuda, &present, "", &note), DecodeMode::gpu);
  EXPECT_EQ(note, "");
}

TEST(DecodeMode, GpuIsRefusedOnTheCpuAndWithoutNvjpegAndTakenWithIt) {
  NvjpegLibrary present{};
  present.major = 13;
  std::string note;
  EXPECT_NE(user_error_of([&] {
              resolve_decode(DecodeMode::gpu, DeviceKind::cpu, &present, "", &note);
            }).find("--decode gpu: the device is the CPU"),
            std::string::npos);
  EXPECT_EQ(
      user_error_of([&] { resolve_decode(DecodeMode::gpu, DeviceKind::cuda, nullptr, kMissing, &note); }),
      "--decode gpu: nvJPEG not found (libnvjpeg.so.13); install the CUDA toolkit's nvJPEG or use --decode "
      "cpu");
  EXPECT_EQ(resolve_decode(DecodeMode::gpu, DeviceKind::cuda, &present, "", &note), DecodeMode::gpu);
}

}  // namespace
}  // namespace dlbench
