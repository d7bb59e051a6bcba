#!/usr/bin/env bash
# Session 13, call 13 (1 GPU): every CUDA test binary at HEAD (the fold and the statistics on by default):
# test_backend_cuda, test_backend_cuda_kernels, test_gpu_model.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS
for t in test_backend_cuda_kernels test_gpu_model test_backend_cuda; do
  L=$(( 190 - (SECONDS-T0) )); [ $L -lt 10 ] && { echo "$t skipped"; continue; }
  timeout $L $G/tests/$t > $OUT/r/$t.log 2>&1; rc=$?
  echo "$t rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/$t.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
  grep -E "^\[  FAILED" $OUT/r/$t.log | head -8
done
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
