#!/usr/bin/env bash
# Session 13, call 9 (1 GPU): conv_bn_fusion_probe fp16 with the backward pattern (the dgrad with the
# ReLU mask and the batch norm's two sums in its epilogue).
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS
timeout 300 $G/conv_bn_fusion_probe --dtype fp16 --batch 256 --reps 20 > $OUT/r/fusion-fp16.txt 2>&1; echo "probe rc=$? ($((SECONDS-T0)) s)"
sed -n '/^backward/,$p' $OUT/r/fusion-fp16.txt | head -40
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
