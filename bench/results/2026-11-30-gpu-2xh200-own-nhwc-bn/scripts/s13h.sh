#!/usr/bin/env bash
# Session 12, call 8 (1 GPU): HEAD after the review (one visit_in_flight for both layouts): the batch-norm
# tests, test_gpu_model, and fp16 / tf32 steps to see them unchanged.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS; D=$G/dlbench
timeout 100 $G/tests/test_backend_cuda --gtest_filter='*BatchNorm*' > $OUT/r/bn-tests.log 2>&1; rc=$?
echo "bn tests rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/bn-tests.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED" $OUT/r/bn-tests.log | head -5
timeout 60 $G/tests/test_gpu_model > $OUT/r/gpu-model.log 2>&1; echo "test_gpu_model rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/r/gpu-model.log | head -2 | tr "\n" " ") ($((SECONDS-T0)) s)"
for P in fp16 tf32; do
  timeout 40 $D bench --device cuda --model resnet50 --batch-size 256 --precision $P --steps 40 --warmup-steps 8 --algorithm-cache $G/alg-mixed.json > $OUT/r/$P.log 2>&1
  echo "$P rc=$? $(grep -o 'step median [0-9.]* ms' $OUT/r/$P.log) $(grep -o '[0-9.]* img/s' $OUT/r/$P.log | tail -1) $(grep -o 'SM median [0-9]* MHz' $OUT/r/$P.log) ($((SECONDS-T0)) s)"
done
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
