#!/usr/bin/env bash
# Session 10, call 5 (2 GPUs): the fp32 row on the new defaults (NHWC, 1x1 convolutions on cuBLAS's GEMM) at
# 1 and 2 GPUs, PyTorch DDP fp32 at 1 GPU (and 2 if time is left). Results stay in $OUT as they are written.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS; D=$G/dlbench; R=$OUT/r/fp32.jsonl
left() { echo $(( $1 - (SECONDS-T0) )); }
G32="--results $R --device cuda --models resnet50 --batch-sizes 256 --steps 30 --warmup-steps 5"
timeout 150 $D sweep $G32 --precisions fp32 --gpus 1,2 --launcher threads --point-timeout 100 2>&1 | grep -E "img/s|failed"
echo "== pytorch fp32 ($((SECONDS-T0)) s)"
timeout $(left 220) $D compare $G32 --precisions fp32 --gpus 1 --frameworks pytorch --point-timeout 70 2>&1 | grep -E "img/s|failed"
[ $(left 250) -gt 60 ] && timeout $(left 250) $D compare $G32 --precisions fp32 --gpus 2 --frameworks pytorch --point-timeout $(left 252) 2>&1 | grep -E "img/s|failed"
echo "total $((SECONDS-T0)) s"
