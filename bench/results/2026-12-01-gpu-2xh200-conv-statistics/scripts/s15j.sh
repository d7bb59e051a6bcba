#!/usr/bin/env bash
# Session 14, call 10 (1 GPU): after the review's refactor (one helper makes a side's statistics for the
# folded shortcut and the fused stem): the batch-norm, fold, statistics and stem tests, test_gpu_model.
G0=$(cd "$(dirname "$0")" && pwd); [ -f $G0/bins.tar.xz ] && tar xJf $G0/bins.tar.xz -C $G0
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS
timeout 100 $G/tests/test_backend_cuda --gtest_filter='*BatchNorm*:*Stem*:*Statistics*:*Pool*' > $OUT/r/test_backend_cuda.log 2>&1; rc=$?
echo "test_backend_cuda rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/test_backend_cuda.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED" $OUT/r/test_backend_cuda.log | head -10
timeout 60 $G/tests/test_gpu_model > $OUT/r/test_gpu_model.log 2>&1; echo "test_gpu_model rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/test_gpu_model.log | head -2 | tr '\n' ' ') ($((SECONDS-T0)) s)"
cd $OUT && tar czf all.tgz r && rm -rf r
