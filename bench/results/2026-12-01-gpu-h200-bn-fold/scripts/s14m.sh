#!/usr/bin/env bash
# Session 13, call 12 (1 GPU): the statistics engines the default search takes at ResNet-50's own sizes
# (batch 256, FP16): sums against the written y after three calls, repeatability.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS
timeout 200 $G/tests/test_backend_cuda --gtest_filter='*OutputStatistics*' > $OUT/r/tests.log 2>&1; rc=$?
echo "tests rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/tests.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED|Failure" -A4 $OUT/r/tests.log | head -16
awk '/RUN.*ResNetSizes/,/OK|FAILED/' $OUT/r/tests.log | cut -c1-220
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
