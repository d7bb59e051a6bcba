#!/usr/bin/env bash
# The cost of overlapping the gradient exchange with backward, on one machine with 2 or more GPUs, in one
# call: ResNet-50 at 1 GPU and at N GPUs (--gpus N, one process) with each candidate setting, interleaved
# REPS times so that drift hits them all alike, every run on the same kernels (one --algorithm-cache); then
# one traced 1-GPU and N-GPU run each, summarised by `dlbench trace-summary --against` (how much slower the
# layers beside a collective ran). See docs/PERFORMANCE.md, "Where the 2-GPU step loses its 2%".
#
# Candidates (one per line of CANDIDATES, "name|environment|flags"): the default, one bucket after backward,
# sums in the compute dtype, training's stream above the sums' (--comm-priority low), and NCCL's protocols.
#
# Builds nothing: runs $DLBENCH built elsewhere. Settings (environment): DLBENCH (binary), PRECISION (fp16),
# GPUS (2), BATCH (256), STEPS (60), WARMUP (10), REPS (2), OUT_DIR (where results, logs and traces go;
# default a temporary folder), RUN_TIMEOUT (seconds per run; 120). Prints one line per run and the
# trace summary; each run's result is OUT_DIR/NAME.json.
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DLBENCH="${DLBENCH:-$REPO/build/dlbench}"
PRECISION="${PRECISION:-fp16}"; GPUS="${GPUS:-2}"; BATCH="${BATCH:-256}"
STEPS="${STEPS:-60}"; WARMUP="${WARMUP:-10}"; REPS="${REPS:-2}"; RUN_TIMEOUT="${RUN_TIMEOUT:-120}"
OUT_DIR="${OUT_DIR:-$(mktemp -d)}"
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"
CANDIDATES="${CANDIDATES:-default||
end||--bucket-mb 0
end-compute-sums||--bucket-mb 0 --allreduce-precision compute
compute-priority||--comm-priority low
proto-simple|NCCL_PROTO=Simple|
proto-ll128|NCCL_PROTO=LL128|}"
COMMON=(bench --device cuda --model resnet50 --precision "$PRECISION" --batch-size "$BATCH"
        --warmup-steps "$WARMUP" --log-every 1000 --algorithm-cache "$OUT_DIR/algorithms.json")

run() {  # run NAME ENV FLAGS...: one bench run; prints its step and throughput
  local name="$1" env_assign="$2"; shift 2
  # shellcheck disable=SC2086
  env $env_assign timeout "$RUN_TIMEOUT" "$DLBENCH" "${COMMON[@]}" "$@" --json "$OUT_DIR/$name.json" \
    >"$OUT_DIR/$name.log" 2>&1
  local rc=$?
  printf '%-28s rc=%d  %s  %s  %s\n' "$name" "$rc" \
    "$(grep -o 'step median [0-9.]* ms, p5 [0-9.]*, p95 [0-9.]*' "$OUT_DIR/$name.log" | head -1)" \
    "$(grep -o 'alone: [0-9.]* ms' "$OUT_DIR/$name.log")" \
    "$(grep -o 'SM median [0-9]* MHz' "$OUT_DIR/$name.log")"
}

echo "$PRECISION, batch $BATCH per GPU, 1 and $GPUS GPUs, $REPS repetitions; results in $OUT_DIR"
run search "" --steps 2 --gpus "$GPUS"  # fills the algorithm cache: every later run uses its kernels
for rep in $(seq 1 "$REPS"); do
  run "1gpu-$rep" "" --steps "$STEPS"
  while IFS='|' read -r name env_assign flags; do
    [[ -z "$name" ]] && continue
    # shellcheck disable=SC2086
    run "${GPUS}gpu-$name-$rep" "$env_assign" --steps "$STEPS" --gpus "$GPUS" $flags
  done <<<"$CANDIDATES"
done
run trace-1gpu "" --steps 14 --trace "$OUT_DIR/trace-1gpu.json" --trace-steps 12:14
run "trace-${GPUS}gpu" "" --steps 14 --gpus "$GPUS" --trace "$OUT_DIR/trace-${GPUS}gpu.json" --trace-steps 12:14
"$DLBENCH" trace-summary "$OUT_DIR/trace-${GPUS}gpu.json" --against "$OUT_DIR/trace-1gpu.json"
