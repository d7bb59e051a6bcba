// `dlbench tokenize FILES... -o DIR`: text files into byte-level token files for language-model training.
//
// Each byte of the text is a token (vocabulary 256, the gpt-mini model's). The files are read in the
// order given as one text; its last val_fraction (by position) is the val split, the rest train:
// DIR/train.bin and DIR/val.bin, in llm.c's format (token_file.h: 256-int32 header, uint16 tokens), which
// `--data DIR` reads back and llm.c's own loader reads too. Both files are written through temporaries
// (core/file_io.h) and renamed into place only once both are complete, train.bin then val.bin, so an error
// or a signal while reading or writing leaves DIR's files as they were (DIR itself is created if missing).
#pragma once

#include <string>
#include <vector>

namespace dlbench {

struct TokenizeOptions {
  std::vector<std::string> inputs;
  std::string output_dir;
  double val_fraction = 0.1;  // in (0, 0.5]
  bool force = false;         // replace DIR/train.bin and DIR/val.bin when they exist
};

// UserError (nothing written) for a missing or unreadable input, an input of no bytes at all, a val
// fraction outside (0, 0.5], text too short to give both splits a token, a split past llm.c's 2^31 - 1
// tokens, or an existing output without `force`. Prints one summary line.
void run_tokenize(const TokenizeOptions& options);

}  // namespace dlbench
