#!/usr/bin/env bash
# Session 9, call 5 (2 GPUs): the fp32 row — dlbench and PyTorch DDP at 1 and 2 GPUs in one call.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; L=$OUT/logs; T0=$SECONDS
D=$G/dlbench
G1="--results $OUT/r/fp32.jsonl --device cuda --models resnet50 --batch-sizes 256 --steps 30 --warmup-steps 5"
timeout 100 $D sweep $G1 --precisions fp32 --gpus 1,2 --launcher threads --point-timeout 75 2>&1 | grep -E "img/s|failed"
echo "== pytorch ($((SECONDS-T0)) s)"
timeout $((170 - (SECONDS-T0))) $D compare $G1 --precisions fp32 --gpus 1,2 --frameworks pytorch --point-timeout 80 2>&1 | grep -E "img/s|failed"
cp -r $OUT/r/fp32.jsonl.logs $L/ 2>/dev/null; rm -rf $OUT/r/fp32.jsonl.logs
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
