#!/usr/bin/env bash
# Session 13, call 10 (1 GPU): do bf16 and tf32 have a convolution + statistics engine that pays, among
# more of the heuristics' candidates than the search's 8? conv_bn_fusion_probe, forward only, 32 engines.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS
for D in bf16 tf32; do
  timeout 200 $G/conv_bn_fusion_probe --dtype $D --batch 256 --reps 10 --max-engines 32 --backward 0 > $OUT/r/fusion-$D.txt 2>&1; echo "probe $D rc=$? ($((SECONDS-T0)) s)"
  sed -n '/^ResNet-50 forward/,/fused/p' $OUT/r/fusion-$D.txt
done
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
