#!/usr/bin/env bash
# bench/ab.sh against a fake dlbench: a shell script that writes a result object whose images_per_second
# comes from its --fake-rate flag (or FAKE_RATE in its environment). Checks the interleaving, the JSON
# lines, the summary's medians and ratio, a failed run, and that every usage error is one line and exit 1.
#
#   ab_test.sh [PATH/TO/ab.sh]
# Exit 0: passed; 1: failed (saying what); 77: no python3 (skipped).
set -u
here=$(cd "$(dirname "$0")" && pwd)
ab=${1:-$here/../../bench/ab.sh}
command -v python3 >/dev/null || { echo "ab_test.sh: no python3, skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The fake binary: `fake bench ... [--fake-rate R] --json FILE`; --fake-fail exits 1 without a result.
cat >"$work/fake" <<'EOF'
#!/usr/bin/env bash
rate=${FAKE_RATE:-1000} json="" model="" precision="" batch=""
[[ "$1" == bench ]] || exit 2
shift
while [[ $# -gt 0 ]]; do
  case "$1" in
    --json) json=$2; shift ;;
    --fake-rate) rate=$2; shift ;;
    --fake-fail) exit 1 ;;
    --model) model=$2; shift ;;
    --precision) precision=$2; shift ;;
    --batch-size) batch=$2; shift ;;
  esac
  shift
done
echo "$(date +%s%N) $model $precision $batch $rate" >>"${FAKE_ORDER:?}"
printf '{"model":"%s","precision":"%s","batch_size":%s,"images_per_second":%s,"step_ms":{"median":1.5},"algorithm_digest":"abc","gpu_clocks":{"sm_clock_median_mhz":1980.0,"power_capped_fraction":0.5},"seconds_to_first_timed_step":2.0,"date":"2026-12-02T00:00:00Z","system":{"hostname":"fakehost"}}\n' \
  "$model" "$precision" "$batch" "$rate" >"$json.tmp" && mv "$json.tmp" "$json"
EOF
chmod +x "$work/fake"
export FAKE_ORDER=$work/order

# 1. Two sides, two precisions, two repetitions: 8 runs, A B A B.
out=$("$ab" --results "$work/r.jsonl" --logs "$work/logs" --reps 2 --precisions fp16,bf16 --steps 3 --warmup 1 \
  --label A="$work/fake --fake-rate 1000" --label B="FAKE_RATE=1100 $work/fake" 2>&1)
rc=$?
[[ $rc -eq 0 ]] || fail "a good run exited $rc: $out"
[[ $(wc -l <"$work/r.jsonl") -eq 8 ]] || fail "expected 8 lines, got $(wc -l <"$work/r.jsonl")"
order=$(awk '{print $5}' "$work/order" | tr '\n' ' ')
[[ "$order" == "1000 1100 1000 1100 1000 1100 1000 1100 " ]] || fail "not interleaved A B A B: $order"
python3 - "$work/r.jsonl" <<'PY' || fail "the JSON lines are not as expected"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert [l["label"] for l in lines] == ["A", "B"] * 4, [l["label"] for l in lines]
assert [l["precision"] for l in lines] == ["fp16", "fp16", "bf16", "bf16"] * 2
for l in lines:
    assert l["model"] == "resnet50" and l["batch"] == 256 and l["rc"] == 0
    assert l["images_per_second"] == (1000 if l["label"] == "A" else 1100), l
    assert l["date"] == "2026-12-02T00:00:00Z" and l["system"] == {"hostname": "fakehost"}
    assert l["step_ms_median"] == 1.5 and l["sm_clock_median_mhz"] == 1980.0
assert lines[0]["flags"] == "--fake-rate 1000" and lines[1]["env"] == "FAKE_RATE=1100", lines[:2]
assert lines[0]["binary"].endswith("/fake")
PY
echo "$out" | grep -Eq '^resnet50 fp16 b256 +1,000\.0 +1,100\.0 +1\.1000$' || fail "summary row missing or wrong: $out"
echo "$out" | grep -Eq '^resnet50 bf16 b256 ' || fail "no bf16 summary row: $out"

# 2. The dry run prints the commands and writes nothing.
out=$("$ab" --dry-run --results "$work/dry.jsonl" --label A="$work/fake" --label B="$work/fake --x" 2>&1)
[[ $? -eq 0 && ! -e "$work/dry.jsonl" && $(echo "$out" | wc -l) -eq 4 ]] || fail "dry run: $out"
echo "$out" | grep -q -- "--precision fp16 --batch-size 256 --steps 40 --warmup-steps 8 --x --json" || fail "dry run command: $out"

# 3. A side whose runs fail: lines with rc and no rate, exit 3.
"$ab" --results "$work/f.jsonl" --logs "$work/logs" --reps 1 --label A="$work/fake" \
  --label B="$work/fake --fake-fail" >/dev/null 2>&1
rc=$?
[[ $rc -eq 3 ]] || fail "a failing side exited $rc, not 3"
python3 -c "import json,sys; l=[json.loads(x) for x in open(sys.argv[1])]; assert l[1]['rc']==1 and l[1]['images_per_second'] is None" \
  "$work/f.jsonl" || fail "the failed run's line"

# 4. Usage errors: one line on stderr, exit 1, nothing run.
usage_error() {
  local err rc
  err=$("$ab" "$@" 2>&1 >/dev/null); rc=$?
  [[ $rc -eq 1 ]] || fail "'$*' exited $rc, not 1"
  [[ $(printf '%s\n' "$err" | wc -l) -eq 1 && "$err" == ab.sh:* ]] || fail "'$*' did not say one line: $err"
}
usage_error --label A="$work/fake" --label B="$work/fake"
usage_error --results "$work/u.jsonl" --label A="$work/fake"
usage_error --results "$work/u.jsonl" --label A="$work/fake" --label A="$work/fake"
usage_error --results "$work/u.jsonl" --label "$work/fake" --label B="$work/fake"
usage_error --results "$work/u.jsonl" --label A="$work/none" --label B="$work/fake"
usage_error --results "$work/u.jsonl" --label A="$work/fake" --label B="$work/fake" --reps 0
usage_error --results "$work/u.jsonl" --label A="$work/fake" --label B="$work/fake" --batches 12x
usage_error --results "$work/u.jsonl" --label A="$work/fake" --label B="$work/fake" --env "$work/none"
usage_error --results "$work/u.jsonl" --label A="$work/fake" --label B="$work/fake" --frobnicate
usage_error --results
[[ ! -e "$work/u.jsonl" ]] || fail "a usage error wrote results"

[[ $failures -eq 0 ]] || { echo "ab_test.sh: $failures failure(s)"; exit 1; }
echo "ab_test.sh: passed"
