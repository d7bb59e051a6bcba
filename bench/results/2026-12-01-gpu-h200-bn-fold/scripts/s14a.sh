#!/usr/bin/env bash
# Session 13, call 1 (1 GPU): the projection shortcuts' batch-norm fold (own NHWC kernels) run for the first
# time: the batch-norm tests (single and folded kernels, launch sizing), test_gpu_model (ResNet-50 step
# folded and unfolded against oneDNN), then 1-GPU steps fold off vs on, interleaved, same algorithm cache.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS; D=$G/dlbench
left() { echo $(( $1 - (SECONDS-T0) )); }
nvidia-smi --query-gpu=index,name,power.limit,clocks.max.sm --format=csv,noheader
timeout 150 $G/tests/test_backend_cuda --gtest_filter='*BatchNorm*' > $OUT/r/bn-tests.log 2>&1; rc=$?
echo "bn tests rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/bn-tests.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED|Failure" -A3 $OUT/r/bn-tests.log | head -16
timeout 60 $G/tests/test_backend_cuda_kernels --gtest_filter='*BatchNorm*' > $OUT/r/bn-kernel-tests.log 2>&1; rc=$?
echo "bn kernel tests rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/bn-kernel-tests.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED|Failure" -A4 $OUT/r/bn-kernel-tests.log | head -24
timeout 90 $G/tests/test_gpu_model > $OUT/r/gpu-model.log 2>&1; echo "test_gpu_model rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/r/gpu-model.log | head -2 | tr "\n" " ") ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED|Failure" -A4 $OUT/r/gpu-model.log | head -16
B="--device cuda --model resnet50 --batch-size 256"
run() {  # fold precision
  local K=$1 P=$2; [ $(left 560) -lt 25 ] && { echo "$K $P skipped"; return; }
  local F=$OUT/r/$P-fold$K-$SECONDS
  DLBENCH_BN_FOLD_SHORTCUT=$K timeout $(left 570) $D bench $B --precision $P --steps 40 --warmup-steps 8 --algorithm-cache $G/alg-mixed.json --json $F.json > $F.log 2>&1; local rc=$?
  echo "$P fold=$K rc=$rc $(grep -o 'step median [0-9.]* ms' $F.log) $(grep -o '[0-9.]* img/s' $F.log | tail -1) $(grep -o 'SM median [0-9]* MHz' $F.log) ($((SECONDS-T0)) s)"
  [ $rc -ne 0 ] && tail -3 $F.log
}
for R in 1 2; do for P in fp16 bf16 tf32; do run off $P; run on $P; done; done
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
