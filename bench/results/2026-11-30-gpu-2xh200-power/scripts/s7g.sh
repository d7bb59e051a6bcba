#!/usr/bin/env bash
# Session 7, call 7 (2 GPUs): are cuDNN's semi-persistent batch-norm kernels what waits beside a collective?
# The same points with DLBENCH_CUDNN_BN_PERSISTENT=0 (plain spatial batch norm).
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; L=$OUT/logs; T0=$SECONDS
A=$L/alg.json; cp $G/alg.json $A
B="bench --device cuda --model resnet50 --batch-size 256 --warmup-steps 10 --log-every 1000 --precision fp16 --algorithm-cache $A"
pt() { # name, args...
  local name=$1; shift
  (( SECONDS - T0 > 110 )) && { echo "$name skipped (time)"; return; }
  timeout 40 $G/dlbench $B "$@" --json $OUT/r/$name.json > $L/$name.log 2>&1; local rc=$?
  echo "$name rc=$rc $(grep -o 'step median.*' $L/$name.log | head -1) t=$((SECONDS-T0))"
  [[ $rc == 0 ]] || tail -3 $L/$name.log
}
S="--steps 40"
pt local $S
pt nccl1 $S --launcher threads
pt two $S --gpus 2
pt two-end-half $S --gpus 2 --bucket-mb 0 --allreduce-precision compute
export DLBENCH_CUDNN_BN_PERSISTENT=0
pt np-local $S
pt np-nccl1 $S --launcher threads
pt np-two $S --gpus 2
pt np-two-half $S --gpus 2 --allreduce-precision compute
pt np-two-end-half $S --gpus 2 --bucket-mb 0 --allreduce-precision compute
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
