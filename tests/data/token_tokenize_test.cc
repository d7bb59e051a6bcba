// `dlbench tokenize` as a function: text -> llm.c token files -> the same bytes back.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "app/tokenize_command.h"
#include "data/token_dataset.h"
#include "data/token_test_util.h"
#include "temp_dir.h"

namespace dlbench::testing {
namespace {

std::string bytes_of(const TokenSource& source) {
  std::vector<int32_t> tokens(static_cast<size_t>(source.size()));
  source.read(0, tokens);
  std::string out;
  for (int32_t t : tokens) out.push_back(static_cast<char>(t));
  return out;
}

TEST(Tokenize, RoundTripGivesTheTextBackSplitByPosition) {
  TempDir dir;
  std::string first = "Hello, world.\n", second;
  for (int i = 0; i < 256; ++i) second.push_back(static_cast<char>(i));  // every byte value, NUL included
  write_file(dir.file("a.txt"), first);
  write_file(dir.file("b.txt"), second);
  const std::string out = dir.file("tokens");
  run_tokenize({{dir.file("a.txt"), dir.file("b.txt")}, out, 0.25, false});
  const std::string text = first + second;  // 270 bytes: val the last round(67.5) = 68
  const TokenData data = open_token_data(out, 256);
  ASSERT_TRUE(data.val.has_value());
  EXPECT_EQ(data.train.size(), 202);
  EXPECT_EQ(data.val->size(), 68);
  EXPECT_EQ(bytes_of(data.train) + bytes_of(*data.val), text);
  // Byte-exact llm.c format: header of 256 int32 (magic, version 1, count), then uint16 tokens.
  EXPECT_EQ(read_file(out + "/val.bin"),
            llmc_bytes(std::vector<uint32_t>(reinterpret_cast<const uint8_t*>(text.data()) + 202,
                                             reinterpret_cast<const uint8_t*>(text.data()) + 270)));
  EXPECT_EQ(temporaries_in(out), 0);
}

TEST(Tokenize, ExistingOutputIsRefusedUnlessForced) {
  TempDir dir;
  write_file(dir.file("a.txt"), "some text to tokenise");
  write_file(dir.file("train.bin"), "mine");
  const TokenizeOptions options{{dir.file("a.txt")}, dir.path().string(), 0.1, false};
  EXPECT_CONTAINS(user_error_message([&] { run_tokenize(options); }), "train.bin exists; pass --force");
  EXPECT_EQ(read_file(dir.file("train.bin")), "mine");
  EXPECT_FALSE(std::filesystem::exists(dir.file("val.bin")));
  TokenizeOptions forced = options;
  forced.force = true;
  run_tokenize(forced);
  EXPECT_EQ(open_token_data(dir.path().string(), 256).train.size(), 19);  // 21 bytes, val round(2.1) = 2
}

TEST(Tokenize, BadInputIsRefusedAndNothingWritten) {
  TempDir dir;
  write_file(dir.file("empty.txt"), "");
  write_file(dir.file("a.txt"), "text");
  const std::string out = dir.file("out");
  const auto refused = [&](TokenizeOptions o) { return user_error_message([&] { run_tokenize(o); }); };
  EXPECT_CONTAINS(refused({{dir.file("none.txt")}, out, 0.1, false}), "none.txt not found");
  EXPECT_CONTAINS(refused({{dir.file("empty.txt")}, out, 0.1, false}), "the input is empty");
  EXPECT_CONTAINS(refused({{dir.path().string()}, out, 0.1, false}), "not a regular file");
  for (double fraction : {0.0, -0.1, 0.51, 1.0})
    EXPECT_CONTAINS(refused({{dir.file("a.txt")}, out, fraction, false}), "--val-fraction");
  EXPECT_CONTAINS(refused({{dir.file("a.txt"), dir.file("none.txt")}, out, 0.1, false}),
                  "none.txt not found");
  EXPECT_FALSE(std::filesystem::exists(out));
  // An input that is also an output.
  write_file(dir.file("train.bin"), "text");
  EXPECT_CONTAINS(refused({{dir.file("train.bin")}, dir.path().string(), 0.1, true}), "same file");
}

}  // namespace
}  // namespace dlbench::testing
