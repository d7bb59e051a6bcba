#!/usr/bin/env bash
# Session 13, call 7 (1 GPU): the conv statistics test with its fix (call 6: the test read its f32 copy of y
# as doubles), the batch-norm suite and the graph-engine conv tests.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS
timeout 300 $G/tests/test_backend_cuda --gtest_filter='*BatchNorm*:*OutputStatistics*:*GraphEngines*' > $OUT/r/tests.log 2>&1; rc=$?
echo "tests rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/tests.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED|Failure" -A4 $OUT/r/tests.log | head -30
grep -E "output statistics engines|sums and sums" $OUT/r/tests.log | head -20
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
