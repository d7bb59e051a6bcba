#!/usr/bin/env bash
# Session 7, call 4 (2 GPUs): the fp16 row again, dlbench (threads) and PyTorch DDP in one call, with the
# GPUs' clocks and power sampled every 50 ms (both GPUs run at their 700 W cap in this workload); plus one
# GPU alone on GPU 1 (the 1-GPU points run on GPU 0).
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; L=$OUT/logs; T0=$SECONDS
nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 50 > $L/smi.csv 2>&1 &
SMI=$!
stamp() { echo "$1 $(date +%H:%M:%S.%N)" >> $L/times.txt; }
G1="--results $OUT/r/study-fp16.jsonl --device cuda --models resnet50 --batch-sizes 256 --steps 60 --warmup-steps 10"
stamp dlbench-start; echo "== dlbench threads"; timeout 120 $G/dlbench sweep $G1 --precisions fp16 --gpus 1,2 --launcher threads --point-timeout 60 2>&1 | grep -E "img/s|failed|done"; stamp dlbench-end
echo "== dlbench on GPU 1 alone ($((SECONDS-T0)) s)"; stamp gpu1-start
CUDA_VISIBLE_DEVICES=1 timeout 60 $G/dlbench bench --device cuda --model resnet50 --batch-size 256 --precision fp16 --steps 60 --warmup-steps 10 --algorithm-cache $OUT/r/study-fp16.jsonl.algorithms.json --json $OUT/r/gpu1.json 2>&1 | grep -E "step median"; stamp gpu1-end
echo "== pytorch ($((SECONDS-T0)) s)"; stamp torch-start
timeout $((420 - (SECONDS-T0))) $G/dlbench compare $G1 --precisions fp16 --gpus 1,2 --frameworks pytorch --point-timeout 120 2>&1 | grep -E "img/s|failed|done|not|interr"; stamp torch-end
kill $SMI
cp -r $OUT/r/study-fp16.jsonl.logs $L/ 2>/dev/null; rm -rf $OUT/r/study-fp16.jsonl.logs
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
