#!/usr/bin/env bash
# CPU training throughput: dlbench against PyTorch, same machine, same invocation, same protocol.
#
# For every (model, batch) point it runs
#   dlbench bench --device cpu ...                          (once)
#   peers/pytorch/train.py --device cpu ...                 (channels_last off, then on)
# with the same model, batch size, threads, steps and warm-up steps, keeps the peer's faster
# layout, prints a table and appends one JSON line per point to
#   bench/results/cpu-vs-pytorch/<YYYY-MM-DD>-cpu-<tag>.jsonl
#
# Settings (flag, or environment variable; flags win):
#   --points "resnet50:16 resnet20:128"   POINTS     model:batch pairs, space or comma separated
#   --threads 2                           THREADS    CPU threads for both engines
#   --steps 10                            STEPS      timed steps
#   --warmup-steps 2                      WARMUP     untimed steps before them
#   --precision fp32                      PRECISION  fp32 or bf16
#   --tag <hostname>                      TAG        names the results file
#   --out-dir bench/results/cpu-vs-pytorch  OUT_DIR
#   DLBENCH=build/dlbench  PYTHON=<first python3 on PATH, else /usr/bin/python3, that has torch>
# Run it on an otherwise idle machine: each line records the 1-minute load average before its point.
# Relative DLBENCH / OUT_DIR paths are taken from the directory you call the script from;
# the defaults are relative to the repository root.
set -euo pipefail

usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "cpu_vs_pytorch.sh: error: $*" >&2; exit 2; }

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CALLER_DIR="$PWD"

POINTS="${POINTS:-resnet50:16 resnet20:128}"
THREADS="${THREADS:-2}"
STEPS="${STEPS:-10}"
WARMUP="${WARMUP:-2}"
PRECISION="${PRECISION:-fp32}"
TAG="${TAG:-$(hostname -s 2>/dev/null || hostname)}"
OUT_DIR="${OUT_DIR:-}"
DLBENCH="${DLBENCH:-}"
PYTHON="${PYTHON:-}"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --points) POINTS="${2:?}"; shift 2 ;;
    --threads) THREADS="${2:?}"; shift 2 ;;
    --steps) STEPS="${2:?}"; shift 2 ;;
    --warmup-steps) WARMUP="${2:?}"; shift 2 ;;
    --precision) PRECISION="${2:?}"; shift 2 ;;
    --tag) TAG="${2:?}"; shift 2 ;;
    --out-dir) OUT_DIR="${2:?}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

abspath() { case "$1" in /*) echo "$1" ;; *) echo "$CALLER_DIR/$1" ;; esac; }
DLBENCH="$( [[ -n "$DLBENCH" ]] && abspath "$DLBENCH" || echo "$REPO/build/dlbench" )"
OUT_DIR="$( [[ -n "$OUT_DIR" ]] && abspath "$OUT_DIR" || echo "$REPO/bench/results/cpu-vs-pytorch" )"
PEER="$REPO/peers/pytorch/train.py"

for n in THREADS STEPS; do [[ "${!n}" =~ ^[1-9][0-9]*$ ]] || die "$n must be a positive integer, got '${!n}'"; done
[[ "$WARMUP" =~ ^[0-9]+$ ]] || die "WARMUP must be a non-negative integer, got '$WARMUP'"
[[ "$PRECISION" == fp32 || "$PRECISION" == bf16 ]] || die "precision must be fp32 or bf16 on the CPU"
[[ -x "$DLBENCH" ]] || die "no dlbench binary at $DLBENCH (build it, or set DLBENCH=...)"
if [[ -z "$PYTHON" ]]; then  # the first python3 that has torch: PATH's, then the system one
  for candidate in python3 /usr/bin/python3; do
    if "$candidate" -c 'import torch, torchvision' >/dev/null 2>&1; then PYTHON="$candidate"; break; fi
  done
  [[ -n "$PYTHON" ]] || die "no python3 with torch and torchvision found (set PYTHON=...)"
fi
"$PYTHON" -c 'import torch, torchvision' >/dev/null 2>&1 || die "'$PYTHON' cannot import torch and torchvision"
TAG="$(printf '%s' "$TAG" | tr -c 'A-Za-z0-9._-' '_')"
POINTS="${POINTS//,/ }"
for point in $POINTS; do
  [[ "$point" =~ ^[a-z0-9]+:[1-9][0-9]*$ ]] || die "bad point '$point' (want model:batch, e.g. resnet50:16)"
done

mkdir -p "$OUT_DIR"
RESULTS="$OUT_DIR/$(date -u +%Y-%m-%d)-cpu-$TAG.jsonl"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# Both engines get the same thread count through their flag and through the OpenMP/MKL environment.
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"

# run NAME CMD...: runs a command with its output in $WORK/NAME.log; on failure shows the log and stops.
run() {
  local name="$1"; shift
  if ! "$@" >"$WORK/$name.log" 2>&1; then
    echo "cpu_vs_pytorch.sh: '$*' failed; its output:" >&2
    tail -n 20 "$WORK/$name.log" >&2
    exit 1
  fi
}

echo "dlbench: $DLBENCH"
echo "peer:    $PYTHON $PEER"
echo "threads $THREADS, $PRECISION, $STEPS timed steps after $WARMUP warm-up steps; results -> $RESULTS"
echo
printf '%-10s %6s %8s %14s %14s %8s  %s\n' model batch threads dlbench_img/s pytorch_img/s ratio peer_layout

for point in $POINTS; do
  model="${point%%:*}"; batch="${point##*:}"
  common=(--device cpu --model "$model" --batch-size "$batch" --threads "$THREADS"
          --steps "$STEPS" --warmup-steps "$WARMUP" --precision "$PRECISION")
  id="$model-$batch"
  load="$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo null)"  # other work on the machine skews both sides
  run "$id-dlbench" "$DLBENCH" bench "${common[@]}" --json "$WORK/$id-dlbench.json"
  run "$id-peer-nchw" "$PYTHON" "$PEER" "${common[@]}" --json "$WORK/$id-peer-nchw.json"
  run "$id-peer-nhwc" "$PYTHON" "$PEER" "${common[@]}" --channels-last --json "$WORK/$id-peer-nhwc.json"

  # Check both sides ran what was asked, pick the peer's faster layout, print a row, append a line.
  "$PYTHON" - "$WORK/$id" "$RESULTS" "$model" "$batch" "$THREADS" "$STEPS" "$WARMUP" "$PRECISION" "$load" <<'EOF'
import json, sys

prefix, results, model, batch, threads, steps, warmup, precision, load_avg = sys.argv[1:]
expected = {"model": model, "batch_size": int(batch), "threads": int(threads),
            "steps": int(steps), "warmup_steps": int(warmup), "precision": precision}

def load(name):
    path = f"{prefix}-{name}.json"
    try:
        with open(path) as f:
            obj = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"cpu_vs_pytorch.sh: cannot read {name} result {path}: {e}")
    if not isinstance(obj, dict) or not isinstance(obj.get("images_per_second"), (int, float)):
        sys.exit(f"cpu_vs_pytorch.sh: {name} result has no numeric images_per_second")
    wrong = {k: (obj.get(k), v) for k, v in expected.items() if k in obj and obj[k] != v}
    if wrong:
        sys.exit(f"cpu_vs_pytorch.sh: {name} ran something else than asked (got, wanted): {wrong}")
    missing = [k for k in expected if k not in obj]
    if missing:
        print(f"cpu_vs_pytorch.sh: warning: {name} result lacks {missing}", file=sys.stderr)
    return obj

ours = load("dlbench")
nchw, nhwc = load("peer-nchw"), load("peer-nhwc")
peer = nhwc if nhwc["images_per_second"] > nchw["images_per_second"] else nchw
ratio = ours["images_per_second"] / peer["images_per_second"]

line = {
    "date": ours.get("date") or peer["date"],
    "model": model,
    "device": ours.get("device", "cpu"),
    "precision": precision,
    "batch_size": int(batch),
    "threads": int(threads),
    "steps": int(steps),
    "warmup_steps": int(warmup),
    "images_per_second": ours["images_per_second"],
    "peer_images_per_second": peer["images_per_second"],
    "ratio_vs_peer": ratio,
    "peer": f"pytorch {peer['framework_version']}",
    "peer_channels_last": peer["channels_last"],
    "load_average_before": json.loads(load_avg),
    "peer_images_per_second_by_layout": {"nchw": nchw["images_per_second"],
                                         "channels_last": nhwc["images_per_second"]},
    "dlbench_result": ours,
    "peer_result": peer,
}
with open(results, "a") as f:
    f.write(json.dumps(line, sort_keys=False) + "\n")
print(f"{model:<10} {int(batch):>6} {int(threads):>8} {ours['images_per_second']:>14.2f} "
      f"{peer['images_per_second']:>14.2f} {ratio:>8.3f}  {'channels_last' if peer['channels_last'] else 'nchw'}")
EOF
done

echo
echo "ratio = dlbench img/s / pytorch img/s (pytorch in its faster layout); appended to $RESULTS"
