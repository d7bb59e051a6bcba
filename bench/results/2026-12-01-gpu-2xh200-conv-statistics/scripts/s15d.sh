#!/usr/bin/env bash
# Session 14, call 4 (1 GPU): the fused backward without the ReLU recomputation (the forward flags the
# position byte of a window whose maximum the ReLU stopped) and with all four pixels of a block loaded at
# once again. Call 3 was call 2 again after the fused forward became its own kernel (coefficients
# loaded once a thread, a window row of loads at a time: 98-110 registers, no spills, where the
# elementwise op took 156) and the backward loads a block row of x at a time. As call 2: the stem fused (own
# fused kernels), first run: its test against the composed ops, the batch-norm and pool tests (the shared
# partial merge and the pool's shared helpers moved), the kernel tests, test_gpu_model (ResNet-50 step with
# the fused stem against oneDNN), then DLBENCH_STEM_POOL_FUSION=off / on interleaved twice in fp16, bf16
# and tf32 (one algorithm cache with the statistics entries), and --per-layer fp16 with the fusion on.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS; D=$G/dlbench
timeout 100 $G/tests/test_backend_cuda --gtest_filter='*StemBatchNormMaxPool*:*BatchNorm*:*Pool*' > $OUT/r/test_backend_cuda.log 2>&1; rc=$?
echo "test_backend_cuda rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/test_backend_cuda.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED|Failure|Expected|Which is|y$|dx|dgamma" $OUT/r/test_backend_cuda.log | head -30
for t in test_backend_cuda_kernels test_gpu_model; do
  timeout 90 $G/tests/$t > $OUT/r/$t.log 2>&1; rc=$?
  echo "$t rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/$t.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
  grep -E "^\[  FAILED" $OUT/r/$t.log | head -8
done
cp $G/alg-stats.json $OUT/r/alg.json
run() {  # precision fusion
  local P=$1 K=$2; local F=$OUT/r/$P-$K-$SECONDS
  DLBENCH_STEM_POOL_FUSION=$K timeout 60 $D bench --device cuda --model resnet50 --batch-size 256 --precision $P --steps 40 --warmup-steps 8 --algorithm-cache $OUT/r/alg.json --json $F.json > $F.log 2>&1; local rc=$?
  echo "$P fusion=$K rc=$rc $(grep -o 'step median [0-9.]* ms' $F.log) $(grep -o '[0-9.]* img/s' $F.log | tail -1) $(grep -o 'SM median [0-9]* MHz' $F.log) ($((SECONDS-T0)) s)"
  [ $rc -ne 0 ] && tail -3 $F.log
}
for P in fp16 bf16 tf32; do
  [ $((SECONDS-T0)) -gt 480 ] && break
  for rep in 1 2; do run $P off; run $P on; done
done
timeout $(( 580 - (SECONDS-T0) )) $D bench --device cuda --model resnet50 --batch-size 256 --precision fp16 --steps 3 --warmup-steps 1 --algorithm-cache $OUT/r/alg.json --per-layer > $OUT/r/perlayer-fp16.txt 2>&1; echo "per-layer rc=$? ($((SECONDS-T0)) s)"
grep -E "bn1|maxpool|conv1 " $OUT/r/perlayer-fp16.txt | head -6
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
