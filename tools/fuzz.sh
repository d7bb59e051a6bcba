#!/usr/bin/env bash
# Builds one libFuzzer target of fuzz/ with clang (AddressSanitizer + UndefinedBehaviorSanitizer) and runs
# it for a bounded time; any crash, leak, sanitizer report or hang fails it. ctest runs each target this
# way (30 s); run longer by hand: tools/fuzz.sh shard_reader_fuzz 600.
#
#   tools/fuzz.sh TARGET SECONDS [BUILD_DIR]
# The target's sources and libraries come from its file's "// fuzz-build:" line.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="${1:?usage: tools/fuzz.sh TARGET SECONDS [BUILD_DIR]}"; seconds="${2:?seconds}"
build="${3:-$REPO/build}/fuzz"
source_file="$REPO/fuzz/$target.cc"
[[ -f "$source_file" ]] || { echo "fuzz.sh: no fuzz target $source_file" >&2; exit 2; }
CXX="${FUZZ_CXX:-$(command -v clang++ || command -v clang++-14 || true)}"
[[ -n "$CXX" ]] || { echo "fuzz.sh: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 2; }
build_line="$(grep -m1 '^// fuzz-build:' "$source_file" | sed 's|^// fuzz-build:||')"
mkdir -p "$build" "$build/$target-corpus"
binary="$build/$target"
# shellcheck disable=SC2086
(cd "$REPO" && "$CXX" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Isrc "$source_file" $build_line -o "$binary")
seeds=()
[[ -d "$REPO/fuzz/corpus/$target" ]] && seeds=("$REPO/fuzz/corpus/$target")
cd "$build"
exec "$binary" "$build/$target-corpus" "${seeds[@]}" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
  -print_final_stats=1
