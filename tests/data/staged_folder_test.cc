#include "data/staged_folder.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "core/file_io.h"
#include "data/image_limits.h"
#include "temp_dir.h"

namespace dlbench {
namespace {

namespace fs = std::filesystem;
using testing::read_file;
using testing::TempDir;
using testing::user_error_message;
using testing::write_file;

int entries(const fs::path& folder) {
  int n = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(folder)) ++n;
  return n;
}

TEST(StagedFolder, BuildsBesideDstAndRenamesIntoPlaceOnlyOnCommit) {
  TempDir dir;
  const std::string dst = dir.file("deep/er/out");
  {
    StagedFolder staged(dst, "test");
    EXPECT_EQ(fs::path(staged.path()).parent_path(), fs::path(dst).parent_path());
    EXPECT_TRUE(is_temporary_name(fs::path(staged.path()).filename().string()));
    staged.write_file("a.txt", "hello");
    EXPECT_FALSE(fs::exists(dst));
    staged.commit();
  }
  EXPECT_EQ(read_file(dst + "/a.txt"), "hello");
  EXPECT_EQ(entries(dir.file("deep/er")), 1);
}

TEST(StagedFolder, UncommittedLeavesNothingNotEvenTheParentsItMade) {
  TempDir dir;
  { StagedFolder(dir.file("new/out"), "test").write_file("a.txt", "x"); }
  EXPECT_EQ(entries(dir.path()), 0);
  fs::create_directories(dir.file("empty"));
  { StagedFolder staged(dir.file("empty"), "test"); }
  EXPECT_TRUE(fs::is_empty(dir.file("empty")));
  EXPECT_EQ(entries(dir.path()), 1);
}

TEST(StagedFolder, ReplacesAnEmptyDstAndRefusesAFullOne) {
  TempDir dir;
  fs::create_directories(dir.file("out"));
  {
    StagedFolder staged(dir.file("out"), "test");
    staged.write_file("a", "1");
    staged.commit();
  }
  EXPECT_EQ(read_file(dir.file("out/a")), "1");
  EXPECT_NE(user_error_message([&] { StagedFolder(dir.file("out"), "test"); }).find("not empty"),
            std::string::npos);
  write_file(dir.file("file"), "x");
  EXPECT_NE(user_error_message([&] { StagedFolder(dir.file("file"), "test"); }).find("not a directory"),
            std::string::npos);
  // DST filled while the folder was built: the commit refuses and removes its temporary.
  StagedFolder late(dir.file("later"), "test");
  fs::create_directories(dir.file("later"));
  write_file(dir.file("later/theirs"), "keep");
  EXPECT_NE(user_error_message([&] { late.commit(); }).find("no longer empty"), std::string::npos);
  EXPECT_EQ(read_file(dir.file("later/theirs")), "keep");
  EXPECT_EQ(entries(dir.path()), 3);  // out, file, later
}

TEST(StagedFolder, RemovesWhatAKilledRunLeftForTheSameDst) {
  TempDir dir;
  const pid_t child = ::fork();
  if (child == 0) {
    StagedFolder staged(dir.file("out"), "test");
    staged.write_file("half", "x");
    ::_exit(0);  // no destructor: as a SIGKILL
  }
  ::waitpid(child, nullptr, 0);
  ASSERT_EQ(entries(dir.path()), 1);
  StagedFolder staged(dir.file("out"), "test");
  EXPECT_EQ(entries(dir.path()), 1);  // the stale one gone, this one made
  staged.commit();
  EXPECT_EQ(entries(dir.file("out")), 0);
}

TEST(ImageLimits, SizeWithinTheBoundsAndItsBatchesWithinMemory) {
  check_image_size(kMinImageSize, 3, 256, DType::f16, 3, "--image-size");
  check_image_size(224, 3, 256, DType::f32, 3, "--image-size");
  for (int size : {0, -1, kMinImageSize - 1, kMaxImageSize + 1, 100000}) {
    const std::string message =
        user_error_message([&] { check_image_size(size, 3, 256, DType::f16, 3, "--image-size"); });
    EXPECT_NE(message.find("--image-size " + std::to_string(size)), std::string::npos) << message;
    EXPECT_NE(message.find("4096"), std::string::npos) << message;
  }
  const std::string memory = user_error_message(
      [&] { check_image_size(kMaxImageSize, 3, int64_t{1} << 40, DType::f32, 3, "--image-size"); });
  EXPECT_NE(memory.find("GiB"), std::string::npos) << memory;
}

}  // namespace
}  // namespace dlbench
