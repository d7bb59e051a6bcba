#!/usr/bin/env bash
# Session 8, call 3 (2 GPUs): is the data-parallel clock drop the GPU-to-GPU link's power? Two independent
# 1-GPU runs with and without copy-engine traffic between the GPUs beside them (peer_copy_load), and the
# data-parallel step with NCCL kept off NVLink (NCCL_P2P_DISABLE=1). Idle power with and without the link.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS
b() { local name=$1; shift
  timeout 90 $G/dlbench bench --device cuda --model resnet50 --batch-size 256 --precision fp16 --steps 150 \
    --warmup-steps 15 --algorithm-cache $G/alg.json --json $OUT/r/$name.json "$@" > $OUT/r/$name.log 2>&1; }
pair() { local name=$1
  CUDA_VISIBLE_DEVICES=0 b $name-g0 & local P0=$!
  CUDA_VISIBLE_DEVICES=1 b $name-g1 & local P1=$!
  wait $P0 $P1; }
echo "== idle power, then with a 4 KiB copy each way every ms"
nvidia-smi --query-gpu=index,power.draw,clocks.sm --format=csv,noheader -lms 200 > $OUT/r/idle.csv & S=$!
sleep 3; echo mark >> $OUT/r/idle.csv
timeout 10 $G/peer_copy_load --bytes 4096 --period-us 1000 --seconds 3
sleep 1; kill $S
python3 - $OUT/r/idle.csv <<'PY'
import sys
part = 0; acc = {}
for line in open(sys.argv[1]):
    if line.startswith("mark"): part = 1; continue
    f = [x.strip() for x in line.split(",")]
    try: acc.setdefault((part, f[0]), []).append(float(f[1].split()[0]))
    except Exception: pass
for k, v in sorted(acc.items()): print("idle" if k[0] == 0 else "link", "gpu", k[1], f"{sum(v)/len(v):.1f} W over {len(v)}")
PY
echo "== pair alone ($((SECONDS-T0)) s)"; pair alone1
echo "== pair + 4 KiB every ms ($((SECONDS-T0)) s)"
timeout 60 $G/peer_copy_load --bytes 4096 --period-us 1000 --seconds 22 > $OUT/r/load-small.txt & L=$!
sleep 1; pair small; wait $L; cat $OUT/r/load-small.txt
echo "== pair + 32 MiB every 35 ms ($((SECONDS-T0)) s)"
timeout 60 $G/peer_copy_load --bytes 33554432 --period-us 35000 --seconds 22 > $OUT/r/load-big.txt & L=$!
sleep 1; pair big; wait $L; cat $OUT/r/load-big.txt
echo "== data parallel, NCCL off NVLink ($((SECONDS-T0)) s)"
NCCL_P2P_DISABLE=1 b dp-nop2p --gpus 2 --launcher threads --bucket-mb 0 --allreduce-precision compute
b dp-end16 --gpus 2 --launcher threads --bucket-mb 0 --allreduce-precision compute
echo "== pair alone again ($((SECONDS-T0)) s)"; pair alone2
python3 - "$OUT/r" <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json"), key=os.path.getmtime):
    try: d = json.load(open(f))
    except Exception as e: print(os.path.basename(f), "unreadable", e); continue
    c = d.get("gpu_clocks") or {}
    sm = d.get("step_ms") or {}
    print(f"{os.path.basename(f):18s} {d['images_per_second']:9.1f} img/s  step {sm.get('median', 0):6.2f} ms"
          f"  clk {c.get('sm_clock_median_mhz')} (r0 {c.get('sm_clock_median_mhz_rank0')} min {c.get('sm_clock_min_mhz_rank0')})"
          f"  capped {c.get('power_capped_fraction', 0):.2f}  {d.get('average_power_watts') or 0:.0f} W")
PY
grep -h "exchange" $OUT/r/dp-*.log
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
