#!/usr/bin/env bash
# Session 7, call 6 (1 GPU): the +0.5 ms of a one-rank NCCL group with buckets during backward. NCCL's
# graph-mixing support off, fewer buckets, and without the CUDA graph.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; L=$OUT/logs; T0=$SECONDS
A=$L/alg.json; cp $G/alg.json $A
B="bench --device cuda --model resnet50 --batch-size 256 --warmup-steps 10 --log-every 1000 --precision fp16 --algorithm-cache $A"
pt() { # name, args...
  local name=$1; shift
  (( SECONDS - T0 > 150 )) && { echo "$name skipped (time)"; return; }
  timeout 60 $G/dlbench $B "$@" --json $OUT/r/$name.json > $L/$name.log 2>&1; local rc=$?
  echo "$name rc=$rc $(grep -o 'step median.*' $L/$name.log | head -1) t=$((SECONDS-T0))"
  [[ $rc == 0 ]] || tail -3 $L/$name.log
}
S="--steps 40"
pt local $S
pt nccl1 $S --launcher threads
NCCL_GRAPH_MIXING_SUPPORT=0 pt nccl1-nomix $S --launcher threads
pt nccl1-b100 $S --launcher threads --bucket-mb 100
pt nccl1-b400 $S --launcher threads --bucket-mb 400
pt local-nograph $S --cuda-graph false
pt nccl1-nograph $S --launcher threads --cuda-graph false
NCCL_GRAPH_MIXING_SUPPORT=0 pt nccl1-nomix-b $S --launcher threads
pt local-b $S
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
