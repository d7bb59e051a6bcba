#!/usr/bin/env bash
# Session 13, call 11 (1 GPU): the statistics engines chosen against the batch norm's statistics pass timed
# (not its bound at peak bandwidth): the conv statistics tests; fp16 steps off / auto interleaved three
# times, fresh cache copies; how many shapes took an engine.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS; D=$G/dlbench
timeout 60 $G/tests/test_backend_cuda --gtest_filter='*OutputStatistics*:*StatisticsFromTheInputsSums*' > $OUT/r/tests.log 2>&1; rc=$?
echo "tests rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/tests.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED|Failure" -A4 $OUT/r/tests.log | head -12
cp $G/alg-mixed.json $OUT/r/alg-off.json; cp $G/alg-mixed.json $OUT/r/alg-auto.json
B="--device cuda --model resnet50 --batch-size 256 --precision fp16"
run() {
  local K=$1; local F=$OUT/r/fp16-$K-$SECONDS
  DLBENCH_CONV_STATISTICS=$K timeout 90 $D bench $B --steps 40 --warmup-steps 8 --algorithm-cache $OUT/r/alg-$K.json --json $F.json > $F.log 2>&1; local rc=$?
  echo "fp16 stats=$K rc=$rc $(grep -o 'step median [0-9.]* ms' $F.log) $(grep -o '[0-9.]* img/s' $F.log | tail -1) $(grep -o 'SM median [0-9]* MHz' $F.log) ($((SECONDS-T0)) s)"
}
for R in 1 2 3; do run off; run auto; done
python3 -c "
import json; d=json.load(open('$OUT/r/alg-auto.json'))['choices']
s=[(k,v) for k,v in d.items() if 'statistics' in k and ' f16 ' in k]
print('fp16 shapes with a statistics engine:', sum(1 for k,v in s if v[0]>=0), 'of', len(s))"
timeout 60 $D bench $B --steps 3 --warmup-steps 1 --algorithm-cache $OUT/r/alg-auto.json --per-layer > $OUT/r/perlayer-fp16.txt 2>&1
echo "per-layer rc=$? $(grep -E '^total' $OUT/r/perlayer-fp16.txt | tr -s ' ') $(awk '$2=="batchnorm"{f+=$3;b+=$4} $2=="conv"{cf+=$3} END{printf "bn fwd %.3f bwd %.3f conv fwd %.3f ms", f, b, cf}' $OUT/r/perlayer-fp16.txt)"
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
