#!/usr/bin/env bash
# One GPU, ResNet-50, synthetic data: dlbench against PyTorch at its best, in the same call.
#
# Builds nothing: runs the dlbench binary built elsewhere ($DLBENCH) and peers/pytorch/train.py. For each
# precision: dlbench bench --device cuda, then the peer with channels_last (+ AMP/GradScaler for fp16,
# autocast for bf16, cuDNN benchmark mode) in eager mode and, for the precisions listed in COMPILE, with
# torch.compile; the peer's faster run is kept. Prints one table last and appends one JSON line per point to $RESULTS.
#
# Settings (environment): DLBENCH (binary), PRECISIONS ("fp32 tf32 fp16 bf16"), BATCH (256), STEPS (60),
# WARMUP (20), COMPILE (precisions also run compiled; default all of PRECISIONS), RESULTS (file; default $OUT/<date>-gpu-resnet50.jsonl, or bench/results/resnet50-vs-pytorch-1-gpu/<date>-gpu-resnet50.jsonl), PYTHON.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DLBENCH="${DLBENCH:-$REPO/build/dlbench}"
PRECISIONS="${PRECISIONS:-fp32 tf32 fp16 bf16}"
BATCH="${BATCH:-256}"; STEPS="${STEPS:-60}"; WARMUP="${WARMUP:-20}"; COMPILE="${COMPILE-$PRECISIONS}"
PYTHON="${PYTHON:-python3}"
RESULTS="${RESULTS:-${OUT:-$REPO/bench/results/resnet50-vs-pytorch-1-gpu}/$(date -u +%Y-%m-%d)-gpu-resnet50.jsonl}"
LOGS="${LOGS:-$(mktemp -d)}"
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on shared machines
[[ -x "$DLBENCH" ]] || { echo "gpu_resnet50.sh: no dlbench binary at $DLBENCH" >&2; exit 2; }
mkdir -p "$(dirname "$RESULTS")" "$LOGS"

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit,driver_version --format=csv,noheader
"$PYTHON" -c 'import torch; print("pytorch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'

common=(--device cuda --model resnet50 --batch-size "$BATCH" --steps "$STEPS" --warmup-steps "$WARMUP")
for p in $PRECISIONS; do
  echo "== $p: dlbench"
  "$DLBENCH" bench "${common[@]}" --precision "$p" --log-every 20 --json "$LOGS/dlbench-$p.json" \
    >"$LOGS/dlbench-$p.log" 2>&1 || { tail -20 "$LOGS/dlbench-$p.log"; echo "dlbench $p failed" >&2; }
  tail -1 "$LOGS/dlbench-$p.log"
  echo "== $p: pytorch eager"
  "$PYTHON" "$REPO/peers/pytorch/train.py" "${common[@]}" --precision "$p" --channels-last \
    --json "$LOGS/peer-eager-$p.json" >"$LOGS/peer-eager-$p.log" 2>&1 || tail -20 "$LOGS/peer-eager-$p.log"
  if [[ " $COMPILE " == *" $p "* ]]; then
    echo "== $p: pytorch compiled"
    "$PYTHON" "$REPO/peers/pytorch/train.py" "${common[@]}" --precision "$p" --channels-last --compile \
      --json "$LOGS/peer-compiled-$p.json" >"$LOGS/peer-compiled-$p.log" 2>&1 || tail -20 "$LOGS/peer-compiled-$p.log"
  fi
done

"$PYTHON" - "$LOGS" "$RESULTS" $PRECISIONS <<'PY'
import json, os, sys
logs, results, precisions = sys.argv[1], sys.argv[2], sys.argv[3:]
def load(name):
    try:
        with open(os.path.join(logs, name)) as f: return json.load(f)
    except (OSError, ValueError): return None
rows = []
for p in precisions:
    ours = load(f"dlbench-{p}.json")
    peers = [r for r in (load(f"peer-eager-{p}.json"), load(f"peer-compiled-{p}.json")) if r]
    peer = max(peers, key=lambda r: r["images_per_second"]) if peers else None
    line = {"date": (ours or peer or {}).get("date"), "model": "resnet50", "precision": p,
            "device": (ours or {}).get("device") or (peer or {}).get("device"),
            "batch_size": int(os.environ.get("BATCH", 256)),
            "images_per_second": ours and ours["images_per_second"],
            "peer_images_per_second": peer and peer["images_per_second"],
            "ratio_vs_peer": ours and peer and ours["images_per_second"] / peer["images_per_second"],
            "peak_memory_bytes": ours and ours.get("peak_memory_bytes"),
            "peer_peak_memory_bytes": peer and peer.get("peak_memory_bytes"),
            "seconds_to_first_timed_step": ours and ours.get("seconds_to_first_timed_step"),
            "peer": peer and f"pytorch {peer.get('framework_version')} {'compiled' if peer.get('compiled') else 'eager'}",
            "peer_by_mode": {r.get("compiled") and "compiled" or "eager": r["images_per_second"] for r in peers},
            "dlbench_result": ours, "peer_result": peer}
    with open(results, "a") as f: f.write(json.dumps(line) + "\n")
    rows.append(line)
print()
print(f"{'precision':<9} {'dlbench img/s':>13} {'pytorch img/s':>13} {'ratio':>6} {'dlbench GiB':>11} {'pytorch GiB':>11} {'t1st(s)':>7}  peer")
for r in rows:
    f = lambda v, fmt: format(v, fmt) if isinstance(v, (int, float)) else "-"
    gib = lambda b: b / 2**30 if isinstance(b, (int, float)) else None
    print(f"{r['precision']:<9} {f(r['images_per_second'], '13.1f')} {f(r['peer_images_per_second'], '13.1f')} "
          f"{f(r['ratio_vs_peer'], '6.2f')} {f(gib(r['peak_memory_bytes']), '11.1f')} "
          f"{f(gib(r['peer_peak_memory_bytes']), '11.1f')} {f(r['seconds_to_first_timed_step'], '7.1f')}  {r['peer']}")
PY
