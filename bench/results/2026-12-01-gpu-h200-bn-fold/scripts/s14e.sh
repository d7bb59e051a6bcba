#!/usr/bin/env bash
# Session 13, call 5 (1 GPU): batch norms' statistics from the convolutions before them (cuDNN genstats in
# the forward's epilogue), first run: the new tests (conv statistics, batch norm from sums, the folded op
# from sums) and the batch-norm suite, test_gpu_model, then 1-GPU steps DLBENCH_CONV_STATISTICS=off vs
# auto, interleaved (each its own algorithm cache copy: the statistics engines are searched once), and
# --per-layer fp16 with them.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS; D=$G/dlbench
left() { echo $(( $1 - (SECONDS-T0) )); }
timeout 120 $G/tests/test_backend_cuda --gtest_filter='*BatchNorm*:*OutputStatistics*' > $OUT/r/tests.log 2>&1; rc=$?
echo "tests rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/tests.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED|Failure" -A4 $OUT/r/tests.log | head -30
grep -E "output statistics engines" $OUT/r/tests.log
timeout 90 $G/tests/test_gpu_model > $OUT/r/gpu-model.log 2>&1; echo "test_gpu_model rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/r/gpu-model.log | head -2 | tr "\n" " ") ($((SECONDS-T0)) s)"
grep -E "Failure" -A4 $OUT/r/gpu-model.log | head -12
cp $G/alg-mixed.json $OUT/r/alg-stats.json
B="--device cuda --model resnet50 --batch-size 256"
run() {  # mode precision
  local K=$1 P=$2; [ $(left 560) -lt 30 ] && { echo "$K $P skipped"; return; }
  local F=$OUT/r/$P-stats$K-$SECONDS A=$G/alg-mixed.json
  [ $K = auto ] && A=$OUT/r/alg-stats.json
  DLBENCH_CONV_STATISTICS=$K timeout $(left 570) $D bench $B --precision $P --steps 40 --warmup-steps 8 --algorithm-cache $A --json $F.json > $F.log 2>&1; local rc=$?
  echo "$P stats=$K rc=$rc $(grep -o 'step median [0-9.]* ms' $F.log) $(grep -o '[0-9.]* img/s' $F.log | tail -1) $(grep -o 'SM median [0-9]* MHz' $F.log) ($((SECONDS-T0)) s)"
  [ $rc -ne 0 ] && tail -3 $F.log
}
for R in 1 2; do for P in fp16 bf16 tf32; do run off $P; run auto $P; done; done
timeout $(left 590) $D bench $B --precision fp16 --steps 3 --warmup-steps 1 --algorithm-cache $OUT/r/alg-stats.json --per-layer > $OUT/r/perlayer-fp16.txt 2>&1
echo "per-layer rc=$? $(grep -E '^total' $OUT/r/perlayer-fp16.txt | tr -s ' ') $(awk '$2=="batchnorm"{f+=$3;b+=$4} $2=="conv"{cf+=$3} END{printf "bn fwd %.3f bwd %.3f conv fwd %.3f ms", f, b, cf}' $OUT/r/perlayer-fp16.txt) ($((SECONDS-T0)) s)"
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
