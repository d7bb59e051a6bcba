#!/usr/bin/env bash
# Session 14, call 9 (1 GPU): the 1-GPU table at 9a57cf2 (the session's last code: the fused stem with its
# strip forward, the own global average pool) in fp16, bf16 and tf32: dlbench and PyTorch in one results
# file, and its report.
G0=$(cd "$(dirname "$0")" && pwd); [ -f $G0/bins.tar.xz ] && tar xJf $G0/bins.tar.xz -C $G0
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; T0=$SECONDS; D=$G/dlbench
left() { echo $(( $1 - (SECONDS-T0) )); }
R=$OUT/r/table-1gpu-final.jsonl; cp $G/alg-stats.json $R.algorithms.json
G1="--results $R --device cuda --models resnet50 --batch-sizes 256 --steps 40 --warmup-steps 8"
timeout $(left 100) $D sweep $G1 --precisions fp16,bf16,tf32 --gpus 1 --launcher threads --point-timeout 45 2>&1 | grep -E "img/s|failed"
echo "== pytorch ($((SECONDS-T0)) s)"
timeout $(left 230) $D compare $G1 --precisions fp16,bf16,tf32 --gpus 1 --frameworks pytorch --point-timeout 70 2>&1 | grep -E "img/s|failed"
$D report $R -o $OUT/r/report > /dev/null 2>&1; echo "report rc=$?"
cp -r $R.logs $OUT/logs/ 2>/dev/null; rm -rf $R.logs
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
