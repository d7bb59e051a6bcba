#!/usr/bin/env bash
# Session 6, call 6 (2 GPUs): the fp32 row of the table in one call: dlbench threads 1 and 2 GPUs, PyTorch
# DDP eager fp32 at 1 and 2 GPUs.
source "$(dirname "$0")/env.sh"
D=$G/dlbench; mkdir -p $OUT/r $OUT/logs; L=$OUT/logs; T0=$SECONDS
G1="--results $OUT/r/study-fp32.jsonl --device cuda --models resnet50 --batch-sizes 256 --steps 30 --warmup-steps 10"
echo "== dlbench threads"; timeout 110 $D sweep $G1 --precisions fp32 --gpus 1,2 --launcher threads --point-timeout 50 2>&1 | grep -E "img/s|failed|done"
echo "== pytorch eager ($((SECONDS-T0)) s)"; timeout $((330 - (SECONDS-T0))) $D compare $G1 --precisions fp32 --gpus 1,2 --frameworks pytorch --point-timeout 125 2>&1 | grep -E "img/s|failed|done|not|interr"
cp -r $OUT/r/study-fp32.jsonl.logs $L/ 2>/dev/null; rm -rf $OUT/r/study-fp32.jsonl.logs
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
