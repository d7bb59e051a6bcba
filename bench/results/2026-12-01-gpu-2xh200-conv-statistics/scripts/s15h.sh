#!/usr/bin/env bash
# Session 14, call 8 (1 GPU): every CUDA test binary at HEAD (the fused stem, the strip forward, the own
# global average pool): test_backend_cuda in two gtest shards side by side, test_backend_cuda_kernels,
# test_gpu_model.
G0=$(cd "$(dirname "$0")" && pwd); [ -f $G0/bins.tar.xz ] && tar xJf $G0/bins.tar.xz -C $G0
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS
for i in 0 1; do
  GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$i timeout 300 $G/tests/test_backend_cuda > $OUT/r/test_backend_cuda-$i.log 2>&1 &
done
wait
for i in 0 1; do
  echo "test_backend_cuda shard $i: $(grep -E '^\[  (PASSED|FAILED)|tests ran' $OUT/r/test_backend_cuda-$i.log | head -3 | tr '\n' ' ')"
  grep -E "^\[  FAILED" $OUT/r/test_backend_cuda-$i.log | head -10
done
echo "($((SECONDS-T0)) s)"
for t in test_backend_cuda_kernels test_gpu_model; do
  timeout 90 $G/tests/$t > $OUT/r/$t.log 2>&1; rc=$?
  echo "$t rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/$t.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
  grep -E "^\[  FAILED" $OUT/r/$t.log | head -8
done
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
