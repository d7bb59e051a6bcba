#!/usr/bin/env bash
# Data-parallel scaling, ResNet-50, synthetic data: dlbench (--gpus N in one process, and one process per GPU
# under mpirun) against PyTorch DistributedDataParallel (torchrun), on 1..N GPUs of one machine, in one call.
#
# Builds nothing: runs the dlbench binary built elsewhere ($DLBENCH) and peers/pytorch/train.py. First the
# all-reduce ceiling (dlbench comm-bench over every GPU of the run). Then, for each precision and GPU count N:
#   dlbench bench --gpus N --launcher threads                  (one process, one thread per GPU, NCCL)
#   mpirun -np N dlbench bench --launcher mpi                  (one process per GPU, NCCL bootstrapped by MPI)
#   $PYTHON -m torch.distributed.run --nproc_per_node N train.py  (DDP, channels_last, AMP for fp16/bf16)
# N = 1 goes through the same launcher too, so that each speedup is against that launcher's own 1-GPU rate.
# The batch is per GPU (weak scaling). Every run is under `timeout`; a failed or timed-out run is reported,
# leaves its point empty in the table, and the script goes on. Prints one table last and appends one JSON
# line per precision, GPU count and dlbench launcher to $RESULTS.
#
# Settings (environment): DLBENCH (binary), PRECISIONS ("fp32 tf32 fp16 bf16"), GPUS (default 1, 2, 4, ...
# up to the GPUs visible, and that count itself), BATCH (256, per GPU), STEPS (50), WARMUP (15), COMPILE
# (precisions whose peer also runs with torch.compile, the faster run counts; default none: compiling once
# per rank costs minutes), RUN_TIMEOUT (seconds per run; 300), RESULTS (file; default
# $OUT/<date>-gpu-scaling.jsonl, or bench/results/scaling-2-gpus/<date>-gpu-scaling.jsonl), LOGS (per-run logs and JSON; default a temporary folder),
# PYTHON (the interpreter with torch), MPIRUN_FLAGS (extra mpirun flags; default "--bind-to none"),
# SUMMARY_ONLY=1 (run nothing: summarise the JSON already in $LOGS, e.g. after a run was cut short).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DLBENCH="${DLBENCH:-$REPO/build/dlbench}"
PRECISIONS="${PRECISIONS:-fp32 tf32 fp16 bf16}"
BATCH="${BATCH:-256}"; STEPS="${STEPS:-50}"; WARMUP="${WARMUP:-15}"; COMPILE="${COMPILE-}"
RUN_TIMEOUT="${RUN_TIMEOUT:-300}"
PYTHON="${PYTHON:-python3}"
# Open MPI binds each rank to one core when there are two ranks or fewer; dlbench's host thread would then
# share it with NCCL's proxy thread, while torchrun leaves the peer unbound.
MPIRUN_FLAGS="${MPIRUN_FLAGS:---bind-to none}"
RESULTS="${RESULTS:-${OUT:-$REPO/bench/results/scaling-2-gpus}/$(date -u +%Y-%m-%d)-gpu-scaling.jsonl}"
LOGS="${LOGS:-$(mktemp -d)}"
SUMMARY_ONLY="${SUMMARY_ONLY:-0}"
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on shared machines
export BATCH STEPS WARMUP
mkdir -p "$(dirname "$RESULTS")" "$LOGS"

visible_gpus() {
  if [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
    tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c . || true
  else
    nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true
  fi
}
if [[ -z "${GPUS:-}" ]]; then
  count="$(visible_gpus)"
  (( count >= 1 )) || { echo "gpu_scaling.sh: no GPU visible (nvidia-smi -L); set GPUS to run anyway" >&2; exit 2; }
  GPUS=""
  for ((n = 1; n < count; n *= 2)); do GPUS+="$n "; done
  GPUS+="$count"
fi
NMAX=0; for n in $GPUS; do if (( n > NMAX )); then NMAX=$n; fi; done

run() {  # run NAME CMD...: CMD under the time limit, output in $LOGS/NAME.log; a failure is reported, not fatal
  local name="$1"; shift
  local start=$SECONDS rc=0
  echo "   \$ $*" >"$LOGS/$name.cmd"
  timeout -k 20 "$RUN_TIMEOUT" "$@" </dev/null >"$LOGS/$name.log" 2>&1 || rc=$?
  if (( rc == 0 )); then
    echo "   ok in $((SECONDS - start)) s$(grep 'img/s' "$LOGS/$name.log" | tail -1 | sed 's/^/: /')"
  else
    local why=""; (( rc == 124 || rc == 137 )) && why=" (timed out after ${RUN_TIMEOUT} s)"
    echo "   FAILED: exit status $rc$why; the last lines of $LOGS/$name.log:"
    tail -15 "$LOGS/$name.log" | sed 's/^/     | /'
  fi
}

if [[ "$SUMMARY_ONLY" != 1 ]]; then
  [[ -x "$DLBENCH" ]] || { echo "gpu_scaling.sh: no dlbench binary at $DLBENCH" >&2; exit 2; }
  nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,power.limit,driver_version --format=csv,noheader || true
  nvidia-smi topo -m || true
  "$PYTHON" -c 'import torch; print("pytorch", torch.__version__, "cuda", torch.version.cuda, "cudnn",
    torch.backends.cudnn.version(), "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)' ||
    echo "gpu_scaling.sh: $PYTHON has no working torch; the PyTorch points will be empty" >&2
  have_mpirun=1
  if command -v mpirun >/dev/null; then
    mpirun --version | head -1
  else
    have_mpirun=0; echo "gpu_scaling.sh: no mpirun on PATH; the dlbench mpi points will be empty" >&2
  fi
  echo "GPU counts: $GPUS; precisions: $PRECISIONS; batch $BATCH per GPU, $WARMUP warm-up + $STEPS timed steps"
  mpi_env=(-x NCCL_NVLS_ENABLE)
  if [[ -n "${LD_LIBRARY_PATH:-}" ]]; then mpi_env+=(-x LD_LIBRARY_PATH); fi
  read -r -a mpirun_flags <<<"$MPIRUN_FLAGS"

  if (( NMAX >= 2 )); then
    echo "== all-reduce ceiling: dlbench comm-bench over $NMAX GPUs, f32"
    rm -f "$LOGS/comm-bench.json"
    run comm-bench "$DLBENCH" comm-bench --device cuda --gpus "$NMAX" --dtype f32 --max-bytes 268435456 \
      --json "$LOGS/comm-bench.json"
    grep -v '^result written' "$LOGS/comm-bench.log" || true
  fi

  common=(--device cuda --model resnet50 --batch-size "$BATCH" --steps "$STEPS" --warmup-steps "$WARMUP")
  for p in $PRECISIONS; do
    for n in $GPUS; do
      echo "== $p, $n GPU(s): dlbench, threads"
      rm -f "$LOGS/dlbench-threads-$p-$n.json"
      run "dlbench-threads-$p-$n" "$DLBENCH" bench "${common[@]}" --precision "$p" --gpus "$n" \
        --launcher threads --log-every 20 --json "$LOGS/dlbench-threads-$p-$n.json"
      echo "== $p, $n GPU(s): dlbench, mpirun"
      rm -f "$LOGS/dlbench-mpi-$p-$n.json"
      if (( have_mpirun )); then
        run "dlbench-mpi-$p-$n" mpirun --allow-run-as-root --oversubscribe "${mpirun_flags[@]}" "${mpi_env[@]}" \
          -np "$n" "$DLBENCH" bench "${common[@]}" --precision "$p" --launcher mpi --log-every 20 \
          --json "$LOGS/dlbench-mpi-$p-$n.json"
      fi
      modes=(eager); if [[ " $COMPILE " == *" $p "* ]]; then modes+=(compiled); fi
      for mode in "${modes[@]}"; do
        echo "== $p, $n GPU(s): pytorch DDP, $mode"
        extra=(); [[ $mode == compiled ]] && extra=(--compile)
        rm -f "$LOGS/peer-$mode-$p-$n.json"
        run "peer-$mode-$p-$n" "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node "$n" \
          "$REPO/peers/pytorch/train.py" "${common[@]}" --precision "$p" --channels-last "${extra[@]}" \
          --json "$LOGS/peer-$mode-$p-$n.json"
      done
    done
  done
fi

"$PYTHON" - "$LOGS" "$RESULTS" "$PRECISIONS" "$GPUS" <<'PY'
import datetime, json, os, sys
logs, results, precisions, gpus = sys.argv[1], sys.argv[2], sys.argv[3].split(), [int(n) for n in sys.argv[4].split()]
batch, steps, warmup = (int(os.environ[k]) for k in ("BATCH", "STEPS", "WARMUP"))
notes = []

def load(name, precision=None, ranks=None):
    """A run's JSON result, or None when it failed, is absent, or is not the training run asked for."""
    path = os.path.join(logs, name + ".json")
    try:
        with open(path) as f: r = json.load(f)
    except (OSError, ValueError): return None
    if precision is None: return r
    asked = {"precision": precision, "ranks": ranks, "batch_size": batch, "steps": steps}
    wrong = {k: (r.get(k), v) for k, v in asked.items() if r.get(k) != v}
    if wrong:
        notes.append(f"{path}: left out, it reports {', '.join(f'{k} {a!r} (asked {b!r})' for k, (a, b) in wrong.items())}")
        return None
    return r

def ratio(a, b): return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None
def ips(r): return r and r.get("images_per_second")

ceiling = None
comm = load("comm-bench")
if comm and comm.get("rows"):
    best = max(comm["rows"], key=lambda row: row["busbw_gbps"])
    ceiling = {"ranks": comm.get("ranks"), "dtype": comm.get("dtype"), "communicator": comm.get("communicator"),
               "correct": comm.get("correct"), "max_busbw_gbps": best["busbw_gbps"], "at_bytes": best["bytes"],
               "largest": comm["rows"][-1]}

def peer_at(p, n):
    runs = [r for r in (load(f"peer-eager-{p}-{n}", p, n), load(f"peer-compiled-{p}-{n}", p, n)) if r]
    return max(runs, key=ips) if runs else None, {("compiled" if r.get("compiled") else "eager"): ips(r) for r in runs}

rows, lines = [], []
for p in precisions:
    ours = {(l, n): load(f"dlbench-{l}-{p}-{n}", p, n) for l in ("threads", "mpi") for n in gpus}
    peers = {n: peer_at(p, n) for n in gpus}
    base = {l: ips(ours.get((l, 1))) for l in ("threads", "mpi")}
    peer_base = ips(peers[1][0]) if 1 in peers else None
    for n in gpus:
        peer, peer_by_mode = peers[n]
        peer_speedup = ratio(ips(peer), peer_base)
        row = {"precision": p, "n": n, "peer": ips(peer), "peer_speedup": peer_speedup,
               "peer_eff": ratio(peer_speedup, n)}
        for l in ("threads", "mpi"):
            r = ours[(l, n)]
            speedup = ratio(ips(r), base[l])
            row.update({l: ips(r), f"{l}_speedup": speedup, f"{l}_eff": ratio(speedup, n),
                        f"{l}_ratio": ratio(ips(r), ips(peer)), f"{l}_comm_ms": r and r.get("communication_ms")})
            lines.append({
                "date": (r or peer or {}).get("date")
                        or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "model": "resnet50", "precision": p,
                "device": (r or {}).get("device") or (peer or {}).get("device"),
                "batch_size": batch, "global_batch_size": batch * n, "steps": steps, "warmup_steps": warmup,
                "ranks": n, "launcher": l, "dlbench_launcher": r and r.get("launcher"),
                "images_per_second": ips(r),
                "images_per_second_per_device": r and r.get("images_per_second_per_device"),
                "speedup": speedup, "scaling_efficiency": ratio(speedup, n),
                "peer": peer and (f"pytorch {peer.get('framework_version')} ddp "
                                  f"{'compiled' if peer.get('compiled') else 'eager'} ({peer.get('launcher')})"),
                "peer_images_per_second": ips(peer),
                "peer_images_per_second_per_device": peer and peer.get("images_per_second_per_device"),
                "peer_speedup": peer_speedup, "peer_scaling_efficiency": ratio(peer_speedup, n),
                "peer_by_mode": peer_by_mode,
                "ratio_vs_peer": ratio(ips(r), ips(peer)),
                "communication_ms": r and r.get("communication_ms"),
                "peak_memory_bytes": r and r.get("peak_memory_bytes"),
                "peer_peak_memory_bytes": peer and peer.get("peak_memory_bytes"),
                "allreduce_ceiling": ceiling,
                "dlbench_result": r, "peer_result": peer})
        rows.append(row)

with open(results, "a") as f:
    for line in lines: f.write(json.dumps(line) + "\n")

def f(v, fmt):  # a missing value is "-", right-aligned in the column's width
    return format(v, fmt) if isinstance(v, (int, float)) else format("-", ">" + fmt.split(".")[0])
print()
if ceiling:
    lg = ceiling["largest"]
    print(f"all-reduce ceiling ({ceiling['ranks']} GPU(s), {ceiling['dtype']}, {ceiling['communicator']}): "
          f"bus bandwidth up to {ceiling['max_busbw_gbps']:.1f} GB/s (at {ceiling['at_bytes']:,} bytes); "
          f"{lg['bytes']:,} bytes take {lg['time_us'] / 1e3:.2f} ms; sums {'correct' if ceiling['correct'] else 'WRONG'}")
print(f"ResNet-50, batch {batch} per GPU, {warmup} warm-up + {steps} timed steps; img/s summed over GPUs; speedup "
      f"against the same launcher on 1 GPU; eff = speedup / N; ratio = dlbench / pytorch")
print(f"{'prec':<5} {'N':>2} | {'threads':>8} {'mpi':>8} {'pytorch':>8} | {'x thr':>5} {'x mpi':>5} {'x pt':>5} | "
      f"{'eff thr':>7} {'eff mpi':>7} {'eff pt':>7} | {'thr/pt':>6} {'mpi/pt':>6} | {'comm ms':>7}")
for r in rows:
    print(f"{r['precision']:<5} {r['n']:>2} | {f(r['threads'], '8.0f')} {f(r['mpi'], '8.0f')} {f(r['peer'], '8.0f')} | "
          f"{f(r['threads_speedup'], '5.2f')} {f(r['mpi_speedup'], '5.2f')} {f(r['peer_speedup'], '5.2f')} | "
          f"{f(r['threads_eff'], '7.1%')} {f(r['mpi_eff'], '7.1%')} {f(r['peer_eff'], '7.1%')} | "
          f"{f(r['threads_ratio'], '6.2f')} {f(r['mpi_ratio'], '6.2f')} | {f(r['threads_comm_ms'], '7.2f')}")
for note in notes: print("note:", note)
print(f"{len(lines)} lines appended to {results}")
PY
