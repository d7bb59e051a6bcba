#!/usr/bin/env bash
# Round 2 at 2 GPUs: the CUDA graph at 1 and 2 GPUs for fp16/bf16, with bucket 50 / high priority / 8 CTAs,
# two interleaved repetitions; mpirun with and without the graph.
source "$(dirname "$0")/env.sh"
D=$G/dlbench; mkdir -p $OUT/r $OUT/logs; L=$OUT/logs; T0=$SECONDS
nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 1000 > $L/smi.csv 2>&1 &
SMI=$!
B="bench --device cuda --model resnet50 --batch-size 256 --steps 50 --warmup-steps 10 --log-every 1000"
MPI="mpirun -np 2 --allow-run-as-root --oversubscribe --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE"
pt() { # name, [mpi], args...
  local name=$1; shift; local pre=""
  [[ $1 == mpi ]] && { pre=$MPI; shift; }
  (( SECONDS - T0 > 560 )) && { echo "$name skipped (time)"; return; }
  timeout 60 $pre $D $B "$@" --json $OUT/r/$name.json > $L/$name.log 2>&1; local rc=$?
  echo "$name rc=$rc $(grep -oE '"images_per_second": [0-9.]+|"communication_ms": [0-9.]+' $OUT/r/$name.json 2>/dev/null | tr '\n' ' ') $(grep -o 'step median [0-9.]* ms' $L/$name.log | head -1) t=$((SECONDS-T0))"
}
for rep in a b; do
  pt fp16-1-$rep --precision fp16 --cuda-graph false
  pt fp16-1-graph-$rep --precision fp16 --cuda-graph true
  pt fp16-2-$rep --precision fp16 --gpus 2 --cuda-graph false
  pt fp16-2-graph-$rep --precision fp16 --gpus 2 --cuda-graph true
  pt fp16-2-graph-b50-$rep --precision fp16 --gpus 2 --cuda-graph true --bucket-mb 50
  pt fp16-2-graph-high-$rep --precision fp16 --gpus 2 --cuda-graph true --comm-priority high
  pt fp16-2-graph-high-b50-$rep --precision fp16 --gpus 2 --cuda-graph true --comm-priority high --bucket-mb 50
  pt fp16-2-graph-cta8-$rep --precision fp16 --gpus 2 --cuda-graph true --nccl-max-ctas 8
done
pt bf16-1 --precision bf16 --cuda-graph false
pt bf16-1-graph --precision bf16 --cuda-graph true
pt bf16-2-graph --precision bf16 --gpus 2 --cuda-graph true
pt fp16-mpi2 mpi --precision fp16 --cuda-graph false
pt fp16-mpi2-graph mpi --precision fp16 --cuda-graph true
pt tf32-2-b50 --precision tf32 --gpus 2 --bucket-mb 50
kill $SMI; nvidia-smi -q -d POWER,CLOCK,PERFORMANCE > $L/nvidia-smi.txt 2>&1
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
