#!/usr/bin/env bash
# Session 7, call 5 (1 GPU is enough): what the gradient exchange's machinery costs with nothing to send.
# One GPU alone (local) against a one-rank NCCL group (--launcher threads --gpus 1), by bucket plan and
# sum dtype, interleaved on one algorithm cache; traces of both.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; L=$OUT/logs; T0=$SECONDS
A=$L/alg.json; cp $G/alg.json $A
B="bench --device cuda --model resnet50 --batch-size 256 --warmup-steps 10 --log-every 1000 --precision fp16 --algorithm-cache $A"
pt() { # name, args...
  local name=$1; shift
  (( SECONDS - T0 > 200 )) && { echo "$name skipped (time)"; return; }
  timeout 60 $G/dlbench $B "$@" --json $OUT/r/$name.json > $L/$name.log 2>&1; local rc=$?
  echo "$name rc=$rc $(grep -oE '"images_per_second": [0-9.]+' $OUT/r/$name.json 2>/dev/null) $(grep -o 'step median.*' $L/$name.log | head -1) t=$((SECONDS-T0))"
  [[ $rc == 0 ]] || tail -3 $L/$name.log
}
S="--steps 60"
for rep in a b; do
  pt local-$rep $S
  pt nccl1-$rep $S --launcher threads
  pt nccl1-end-$rep $S --launcher threads --bucket-mb 0
  pt nccl1-half-$rep $S --launcher threads --allreduce-precision compute
  pt nccl1-end-half-$rep $S --launcher threads --bucket-mb 0 --allreduce-precision compute
done
pt trace-local --steps 14 --trace $OUT/r/trace-local.json --trace-steps 12:14
pt trace-nccl1 --steps 14 --launcher threads --trace $OUT/r/trace-nccl1.json --trace-steps 12:14
$G/dlbench trace-summary $OUT/r/trace-nccl1.json --against $OUT/r/trace-local.json 2>&1 | head -30
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
