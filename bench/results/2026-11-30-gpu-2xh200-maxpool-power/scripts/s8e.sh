#!/usr/bin/env bash
# Session 8, call 5 (1 GPU): does tf32 (and fp32) gain from more convolution workspace or the other layout?
# Each variant searches its own algorithms (no cache), 40 timed steps after 10.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS
b() { local name=$1; shift
  timeout 120 $G/dlbench bench --device cuda --model resnet50 --batch-size 256 --steps 40 --warmup-steps 10 \
    --json $OUT/r/$name.json "$@" > $OUT/r/$name.log 2>&1; echo "$name rc=$? ($((SECONDS-T0)) s)"; }
b tf32-default --precision tf32
b tf32-ws4g --precision tf32 --conv-workspace-mb 4096
b tf32-nchw --precision tf32 --layout nchw
b fp16-ws4g --precision fp16 --conv-workspace-mb 4096
b fp16-default --precision fp16
b fp32-ws4g --precision fp32 --conv-workspace-mb 4096 --steps 15 --warmup-steps 5
python3 - "$OUT/r" <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json"), key=os.path.getmtime):
    try: d = json.load(open(f))
    except Exception as e: print(os.path.basename(f), "unreadable", e); continue
    c = d.get("gpu_clocks") or {}
    print(f"{os.path.basename(f):18s} {d['images_per_second']:8.1f} img/s  step {d['step_ms']['median']:6.2f} ms"
          f"  clk {c.get('sm_clock_median_mhz')} capped {c.get('power_capped_fraction', 0):.2f}  {d.get('average_power_watts') or 0:.0f} W  mem {d['peak_memory_bytes']/2**30:.1f} GiB")
PY
grep -h "memory plan" $OUT/r/*.log
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
