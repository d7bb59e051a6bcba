#!/usr/bin/env bash
# Session 6, call 4 (2 GPUs): overlap against none. The trace showed that layers running beside an
# all-reduce slow down about as much as the overlap hides; here: one bucket per region at the end of
# backward (--bucket-mb 0), summed in FP32 or in the compute dtype, against the default, interleaved.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; L=$OUT/logs; T0=$SECONDS
A=$L/alg.json; cp $G/alg.json $A
sm() { echo "$1 $(grep -o 'step median.*' $L/$1.log | head -1) | $(grep -o 'alone: [0-9.]* ms' $L/$1.log) $(grep -o 'digest [0-9a-f]*' $L/$1.log) t=$((SECONDS-T0))"; }
pt() { local name=$1 prec=$2; shift 2
  (( SECONDS - T0 > 520 )) && { echo "$name skipped (time)"; return; }
  timeout 90 $G/dlbench bench --device cuda --model resnet50 --batch-size 256 --warmup-steps 10 --steps 60 --log-every 1000 --precision $prec --algorithm-cache $A "$@" --json $OUT/r/$name.json > $L/$name.log 2>&1; sm $name; }
for p in fp16 bf16 tf32; do pt warm-$p $p --steps 2 --gpus 2; done
for rep in a b; do
  for p in fp16 bf16; do
    pt $p-one-$rep $p
    pt $p-base-$rep $p --gpus 2
    pt $p-end-$rep $p --gpus 2 --bucket-mb 0
    pt $p-end-half-$rep $p --gpus 2 --bucket-mb 0 --allreduce-precision compute
    pt $p-base-half-$rep $p --gpus 2 --allreduce-precision compute
  done
  pt tf32-one-$rep tf32
  pt tf32-base-$rep tf32 --gpus 2
  pt tf32-end-$rep tf32 --gpus 2 --bucket-mb 0
done
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
