#!/usr/bin/env bash
# Session 8, call 2 (2 GPUs): where the 2-GPU fp16 step loses its last percent — clocks and power of one GPU,
# two independent GPUs at once, and data parallel (default buckets; one bucket after backward in fp16),
# interleaved twice, 150 timed steps each, every run's gpu_clocks from its own NVML sampler.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS
b() { local name=$1; shift
  timeout 90 $G/dlbench bench --device cuda --model resnet50 --batch-size 256 --precision fp16 --steps 150 \
    --warmup-steps 15 --algorithm-cache $G/alg.json --json $OUT/r/$name.json "$@" > $OUT/r/$name.log 2>&1; }
for rep in 1 2; do
  echo "== round $rep ($((SECONDS-T0)) s)"
  b one0-$rep
  b dp-default-$rep --gpus 2 --launcher threads
  CUDA_VISIBLE_DEVICES=0 b ind0-$rep & P0=$!
  CUDA_VISIBLE_DEVICES=1 b ind1-$rep & P1=$!
  wait $P0 $P1
  b dp-end16-$rep --gpus 2 --launcher threads --bucket-mb 0 --allreduce-precision compute
  CUDA_VISIBLE_DEVICES=1 b one1-$rep
  b dp-b50-16-$rep --gpus 2 --launcher threads --bucket-mb 50 --allreduce-precision compute
done
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
grep -h "exchange" $OUT/r/dp-*.log | head -8
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
