#!/usr/bin/env bash
# Session 7, call 3 (2 GPUs): the slow steps that come in bursts about 1 s apart on 2 GPUs. Is it the
# watchdog (period min(timeout/10, 1 s)), the clocks/power (nvidia-smi every 50 ms), or the exchange?
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; L=$OUT/logs; T0=$SECONDS
nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 50 > $L/smi.csv 2>&1 &
SMI=$!
A=$L/alg.json; cp $G/alg.json $A
B="bench --device cuda --model resnet50 --batch-size 256 --warmup-steps 10 --log-every 1000 --precision fp16 --algorithm-cache $A"
pt() { # name, args...
  local name=$1; shift
  (( SECONDS - T0 > 480 )) && { echo "$name skipped (time)"; return; }
  echo "$name start $(date +%H:%M:%S.%N)" >> $L/times.txt
  timeout 90 $G/dlbench $B "$@" --json $OUT/r/$name.json > $L/$name.log 2>&1; local rc=$?
  echo "$name end $(date +%H:%M:%S.%N)" >> $L/times.txt
  echo "$name rc=$rc $(grep -oE '"images_per_second": [0-9.]+' $OUT/r/$name.json 2>/dev/null) $(grep -o 'step median.*' $L/$name.log | head -1) t=$((SECONDS-T0))"
  [[ $rc == 0 ]] || tail -3 $L/$name.log
}
S="--steps 150"
pt one $S
pt two $S --gpus 2
pt two-t2 $S --gpus 2 --timeout 2
pt two-t100 $S --gpus 2 --timeout 100
pt two-end-half $S --gpus 2 --bucket-mb 0 --allreduce-precision compute
pt two-end-half-t2 $S --gpus 2 --bucket-mb 0 --allreduce-precision compute --timeout 2
echo "== two independent 1-GPU runs ($((SECONDS-T0)) s)"
echo "pair start $(date +%H:%M:%S.%N)" >> $L/times.txt
CUDA_VISIBLE_DEVICES=0 timeout 90 $G/dlbench $B $S --json $OUT/r/pair0.json > $L/pair0.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 90 $G/dlbench $B $S --json $OUT/r/pair1.json > $L/pair1.log 2>&1; wait
echo "pair end $(date +%H:%M:%S.%N)" >> $L/times.txt
grep -o 'step median.*' $L/pair0.log $L/pair1.log
echo "== mpirun ($((SECONDS-T0)) s)"
timeout 90 mpirun --allow-run-as-root -np 2 --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE $G/dlbench $B $S --json $OUT/r/mpi.json > $L/mpi.log 2>&1; echo "mpi rc=$? $(grep -o 'step median.*' $L/mpi.log | head -1)"
kill $SMI
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
