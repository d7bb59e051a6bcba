#!/usr/bin/env bash
# Scaling levers at 2 GPUs (one call): NCCL CTAs, stream priority, all-reduce precision, bucket size,
# against the default in the same call; fp16 first, then tf32 and bf16; comm-bench at few CTAs.
source "$(dirname "$0")/env.sh"
D=$G/dlbench; mkdir -p $OUT/r $OUT/logs; L=$OUT/logs; T0=$SECONDS
B="bench --device cuda --model resnet50 --batch-size 256 --steps 50 --warmup-steps 10 --log-every 1000"
pt() { # name, args...
  local name=$1; shift
  (( SECONDS - T0 > 540 )) && { echo "$name skipped (time)"; return; }
  timeout 60 $D $B "$@" --json $OUT/r/$name.json > $L/$name.log 2>&1; local rc=$?
  echo "$name rc=$rc $(grep -oE '"images_per_second": [0-9.]+|"communication_ms": [0-9.]+' $OUT/r/$name.json 2>/dev/null | tr '\n' ' ') t=$((SECONDS-T0))"
}
pt fp16-1 --precision fp16
pt fp16-2 --precision fp16 --gpus 2
pt fp16-2-cta1 --precision fp16 --gpus 2 --nccl-max-ctas 1
pt fp16-2-cta2 --precision fp16 --gpus 2 --nccl-max-ctas 2
pt fp16-2-cta4 --precision fp16 --gpus 2 --nccl-max-ctas 4
pt fp16-2-cta8 --precision fp16 --gpus 2 --nccl-max-ctas 8
pt fp16-2-high --precision fp16 --gpus 2 --comm-priority high
pt fp16-2-high-cta4 --precision fp16 --gpus 2 --comm-priority high --nccl-max-ctas 4
pt fp16-2-arcompute --precision fp16 --gpus 2 --allreduce-precision compute
pt fp16-2-b6 --precision fp16 --gpus 2 --bucket-mb 6
pt fp16-2-b50 --precision fp16 --gpus 2 --bucket-mb 50
pt fp16-2-b0 --precision fp16 --gpus 2 --bucket-mb 0
pt fp16-2-graph --precision fp16 --gpus 2 --cuda-graph true
pt fp16-2-again --precision fp16 --gpus 2
pt tf32-1 --precision tf32
pt tf32-2 --precision tf32 --gpus 2
pt tf32-2-cta4 --precision tf32 --gpus 2 --nccl-max-ctas 4
pt tf32-2-high --precision tf32 --gpus 2 --comm-priority high
pt bf16-1 --precision bf16
pt bf16-2 --precision bf16 --gpus 2
for c in 0 1 2 4; do
  (( SECONDS - T0 > 560 )) && break
  timeout 25 $D comm-bench --device cuda --gpus 2 --dtype f32 --min-bytes 1048576 --max-bytes 268435456 --nccl-max-ctas $c --json $OUT/r/comm-cta$c.json > $L/comm-cta$c.log 2>&1
  echo "comm cta$c rc=$? $(tail -2 $L/comm-cta$c.log | head -1)"
done
cd $L && tar czf ../logs.tgz . && cd .. && rm -rf logs
echo "total $((SECONDS-T0)) s"
