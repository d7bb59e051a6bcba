#!/usr/bin/env bash
# Session 6, call 3 (2 GPUs, fp16): is the 2-GPU step's extra time communication at all? Two independent
# 1-GPU runs at once (one per GPU, no exchange) against one alone and against --gpus 2; one bucket at the
# end (no overlap); traces of 1 and 2 GPUs.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs $OUT/t; L=$OUT/logs; T0=$SECONDS
A=$L/alg.json; cp $G/alg.json $A
B="bench --device cuda --model resnet50 --batch-size 256 --warmup-steps 10 --log-every 1000 --precision fp16 --algorithm-cache $A"
sm() { echo "$1 $(grep -o 'step median.*' $L/$1.log | head -1) | $(grep -o 'alone: [0-9.]* ms' $L/$1.log) t=$((SECONDS-T0))"; }
pt() { local name=$1; shift; timeout 60 $G/dlbench $B "$@" --json $OUT/r/$name.json > $L/$name.log 2>&1; sm $name; }
pair() { # two independent runs at once, one per GPU
  CUDA_VISIBLE_DEVICES=0 timeout 60 $G/dlbench $B --steps 60 --json $OUT/r/$1-g0.json > $L/$1-g0.log 2>&1 &
  CUDA_VISIBLE_DEVICES=1 timeout 60 $G/dlbench $B --steps 60 --json $OUT/r/$1-g1.json > $L/$1-g1.log 2>&1
  wait; sm $1-g0; sm $1-g1
}
for rep in a b; do
  pt one-$rep --steps 60
  pair pair-$rep
  pt two-$rep --steps 60 --gpus 2
done
pt two-onebucket --steps 60 --gpus 2 --bucket-mb 0
pt trace1 --steps 14 --trace $OUT/t/trace1.json --trace-steps 12:14
pt trace2 --steps 14 --gpus 2 --trace $OUT/t/trace2.json --trace-steps 12:14
cd $OUT && tar czf all.tgz logs r t && rm -rf logs r t
echo "total $((SECONDS-T0)) s"
