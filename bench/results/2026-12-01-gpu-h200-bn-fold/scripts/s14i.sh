#!/usr/bin/env bash
# Session 13, call 8 (1 GPU; two were not lent): statistics from the convolutions (on by default): the
# fixed conv statistics test and the batch-norm-from-sums tests; A/B at 1 GPU fp16
# (DLBENCH_CONV_STATISTICS=off / auto, interleaved three times, each its own cache copy); then fp16
# dlbench and PyTorch at 1 GPU in one results file.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; T0=$SECONDS; D=$G/dlbench
left() { echo $(( $1 - (SECONDS-T0) )); }
timeout 60 $G/tests/test_backend_cuda --gtest_filter='*OutputStatistics*:*StatisticsFromTheInputsSums*:*FoldedShortcut*' > $OUT/r/tests.log 2>&1; rc=$?
echo "tests rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/tests.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED|Failure" -A4 $OUT/r/tests.log | head -20
grep -E "output statistics engines|against the nearer" $OUT/r/tests.log | head -12
cp $G/alg-mixed.json $OUT/r/alg-off.json; cp $G/alg-mixed.json $OUT/r/alg-auto.json
B="--device cuda --model resnet50 --batch-size 256 --precision fp16"
run() {  # mode
  local K=$1; local F=$OUT/r/fp16-$K-$SECONDS
  DLBENCH_CONV_STATISTICS=$K timeout 90 $D bench $B --steps 40 --warmup-steps 8 --algorithm-cache $OUT/r/alg-$K.json --json $F.json > $F.log 2>&1; local rc=$?
  echo "fp16 stats=$K rc=$rc $(grep -o 'step median [0-9.]* ms' $F.log) $(grep -o '[0-9.]* img/s' $F.log | tail -1) $(grep -o 'SM median [0-9]* MHz.*' $F.log) ($((SECONDS-T0)) s)"
}
for R in 1 2 3; do run off; run auto; done
R=$OUT/r/table-fp16-1gpu.jsonl; cp $OUT/r/alg-auto.json $R.algorithms.json
G1="--results $R --device cuda --models resnet50 --batch-sizes 256 --steps 40 --warmup-steps 8"
timeout $(left 300) $D sweep $G1 --precisions fp16 --gpus 1 --launcher threads --point-timeout 40 2>&1 | grep -E "img/s|failed"
timeout $(left 400) $D compare $G1 --precisions fp16 --gpus 1 --frameworks pytorch --point-timeout 80 2>&1 | grep -E "img/s|failed"
cp -r $R.logs $OUT/logs/ 2>/dev/null; rm -rf $R.logs
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
