#!/usr/bin/env bash
# Session 13, call 4 (1 GPU): conv_bn_fusion_probe in fp16 with its new column (the convolution with the
# statistics of its output in the epilogue, no prologue), and --per-layer fp16 with the fold on.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS; D=$G/dlbench
timeout 240 $G/conv_bn_fusion_probe --dtype fp16 --batch 256 --reps 20 > $OUT/r/fusion-fp16.txt 2>&1; echo "probe rc=$? ($((SECONDS-T0)) s)"; tail -8 $OUT/r/fusion-fp16.txt
timeout 90 $D bench --device cuda --model resnet50 --batch-size 256 --precision fp16 --steps 3 --warmup-steps 1 --algorithm-cache $G/alg-mixed.json --per-layer > $OUT/r/perlayer-fp16.txt 2>&1
echo "per-layer rc=$? $(grep -E '^total' $OUT/r/perlayer-fp16.txt | tr -s ' ') ($((SECONDS-T0)) s)"
awk '$2=="batchnorm"{f+=$3;b+=$4} END{printf "bn fwd %.3f bwd %.3f ms\n", f, b}' $OUT/r/perlayer-fp16.txt
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
