#!/usr/bin/env bash
# Round 3 at 2 GPUs: the repeated algorithm search (digest per run) against the graph on/off at 1 and
# 2 GPUs, interleaved; then PyTorch eager bf16 at 1 and 2 GPUs (missing from the study).
source "$(dirname "$0")/env.sh"
D=$G/dlbench; mkdir -p $OUT/r $OUT/logs; L=$OUT/logs; T0=$SECONDS
nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 1000 > $L/smi.csv 2>&1 &
SMI=$!
B="bench --device cuda --model resnet50 --batch-size 256 --steps 50 --warmup-steps 10 --log-every 1000"
pt() { # name, args...
  local name=$1; shift
  (( SECONDS - T0 > 330 )) && { echo "$name skipped (time)"; return; }
  timeout 60 $D $B "$@" --json $OUT/r/$name.json > $L/$name.log 2>&1; local rc=$?
  echo "$name rc=$rc $(grep -oE '"images_per_second": [0-9.]+' $OUT/r/$name.json 2>/dev/null) $(grep -o 'step median [0-9.]* ms' $L/$name.log | head -1) $(grep -o 'digest [0-9a-f]*' $L/$name.log) $(grep -o 'seconds_to_first_timed_step": [0-9.]*' $OUT/r/$name.json) t=$((SECONDS-T0))"
}
for rep in a b c; do
  pt fp16-1-$rep --precision fp16 --cuda-graph false
  pt fp16-1-graph-$rep --precision fp16 --cuda-graph true
  pt fp16-2-$rep --precision fp16 --gpus 2 --cuda-graph false
  pt fp16-2-graph-$rep --precision fp16 --gpus 2 --cuda-graph true
done
pt bf16-1 --precision bf16 --cuda-graph false
pt bf16-1-graph --precision bf16 --cuda-graph true
pt bf16-2 --precision bf16 --gpus 2 --cuda-graph false
pt bf16-2-graph --precision bf16 --gpus 2 --cuda-graph true
kill $SMI
echo "== pytorch bf16 ($((SECONDS-T0)) s)"
timeout $((580 - (SECONDS-T0))) $D compare --results $OUT/r/peers.jsonl --device cuda --models resnet50 --precisions bf16 --batch-sizes 256 --gpus 1,2 --frameworks pytorch --steps 30 --warmup-steps 10 --point-timeout 115 2>&1 | grep -E "img/s|failed|done|not|interrupted"
cp -r $OUT/r/peers.jsonl.logs $L/ 2>/dev/null; rm -rf $OUT/r/peers.jsonl.logs
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
