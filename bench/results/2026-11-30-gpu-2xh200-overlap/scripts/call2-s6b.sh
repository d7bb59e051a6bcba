#!/usr/bin/env bash
# Session 6, call 2 (2 GPUs, fp16): the communication levers again, interleaved, two repetitions each,
# with the algorithm cache (same kernels everywhere); a traced 2-GPU run; mpirun for comparison.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; L=$OUT/logs; T0=$SECONDS
nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 1000 > $L/smi.csv 2>&1 &
SMI=$!
A=$L/alg.json; cp $G/alg.json $A
B="bench --device cuda --model resnet50 --batch-size 256 --warmup-steps 10 --log-every 1000 --precision fp16 --algorithm-cache $A"
pt() { # name, args...
  local name=$1; shift
  (( SECONDS - T0 > 500 )) && { echo "$name skipped (time)"; return; }
  timeout 60 $G/dlbench $B "$@" --json $OUT/r/$name.json > $L/$name.log 2>&1; local rc=$?
  echo "$name rc=$rc $(grep -oE '"images_per_second": [0-9.]+' $OUT/r/$name.json 2>/dev/null) $(grep -o 'step median.*' $L/$name.log | head -1) | $(grep -o 'alone: [0-9.]* ms' $L/$name.log) $(grep -o 'digest [0-9a-f]*' $L/$name.log) t=$((SECONDS-T0))"
}
S="--steps 60"
for rep in a b; do
  pt one-$rep $S
  pt base-$rep $S --gpus 2
  pt half-$rep $S --gpus 2 --allreduce-precision compute
  pt half-c4-$rep $S --gpus 2 --allreduce-precision compute --nccl-max-ctas 4
  pt half-c8-$rep $S --gpus 2 --allreduce-precision compute --nccl-max-ctas 8
  pt half-c16-$rep $S --gpus 2 --allreduce-precision compute --nccl-max-ctas 16
  pt half-hi-$rep $S --gpus 2 --allreduce-precision compute --comm-priority high
  pt half-c8-hi-$rep $S --gpus 2 --allreduce-precision compute --nccl-max-ctas 8 --comm-priority high
  pt base-c8-hi-$rep $S --gpus 2 --nccl-max-ctas 8 --comm-priority high
done
pt trace --steps 12 --gpus 2 --trace $OUT/r/trace.json --trace-steps 8:10
echo "== mpirun ($((SECONDS-T0)) s)"
timeout 90 mpirun --allow-run-as-root -np 2 --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE $G/dlbench $B $S --json $OUT/r/mpi-base.json > $L/mpi-base.log 2>&1; echo "mpi-base rc=$? $(grep -o 'step median.*' $L/mpi-base.log | head -1) $(grep 'in total' $L/mpi-base.log)"
kill $SMI
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
