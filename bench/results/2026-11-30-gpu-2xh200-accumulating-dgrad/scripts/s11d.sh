#!/usr/bin/env bash
# Session 10, call 4 (1 GPU): own NCHW batch-norm kernels (DLBENCH_BN_KERNELS=own) and 1x1 convolutions on
# cuBLAS's GEMM (DLBENCH_CONV_GEMM=auto): their tests, then ResNet-50 fp32 NCHW (cuDNN BN / own BN) against
# NHWC with GEMMs, interleaved; tf32/fp16 with GEMMs off/auto; PyTorch fp32 in the same call.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS; D=$G/dlbench
left() { echo $(( $1 - (SECONDS-T0) )); }
timeout 90 $G/tests/test_backend_cuda --gtest_filter='*Gemm*:*OwnNchw*:*UnknownKernel*' > $OUT/r/tests.log 2>&1; echo "gemm + own-bn tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/tests.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED|adding to dx" $OUT/r/tests.log | head -12

B="--device cuda --model resnet50 --batch-size 256"
run() {  # name, env, args...
  local name=$1 envs=$2; shift 2
  [ $(left 360) -lt 20 ] && { echo "$name skipped"; return; }
  env $envs timeout $(left 370) $D bench $B "$@" --json $OUT/r/$name-$SECONDS.json > $OUT/r/$name-$SECONDS.log 2>&1; local rc=$?
  local F=$(ls -t $OUT/r/$name-*.log | head -1)
  echo "$name rc=$rc $(grep -o 'step median [0-9.]* ms' $F) $(grep -o '[0-9.]* img/s' $F | tail -1) $(grep -o 'SM median [0-9]* MHz' $F) $(grep -o '"seconds_to_first_timed_step":[0-9.]*' ${F%.log}.json) ($((SECONDS-T0)) s)"
  grep -m2 -E "error|Error" $F
}
F32="--precision fp32 --steps 15 --warmup-steps 3"
for round in 1 2; do
  run fp32-nchw-cudnnbn "X=1" $F32 --layout nchw --algorithm-cache $OUT/r/alg32-nchw.json
  run fp32-nchw-ownbn "DLBENCH_BN_KERNELS=own" $F32 --layout nchw --algorithm-cache $OUT/r/alg32-nchw.json
  run fp32-nhwc-gemm "DLBENCH_CONV_GEMM=auto" $F32 --layout nhwc --algorithm-cache $OUT/r/alg32-nhwc-gemm.json
done
cp $G/alg10.json $OUT/r/alg-mixed.json
for P in tf32 fp16; do
  run $P-gemm-off "X=1" --precision $P --steps 40 --warmup-steps 8 --algorithm-cache $OUT/r/alg-mixed.json
  run $P-gemm-auto "DLBENCH_CONV_GEMM=auto" --precision $P --steps 40 --warmup-steps 8 --algorithm-cache $OUT/r/alg-mixed.json
done
[ $(left 390) -gt 25 ] && DLBENCH_CONV_GEMM=auto timeout $(left 395) $D bench $B $F32 --layout nhwc --steps 3 --warmup-steps 1 --algorithm-cache $OUT/r/alg32-nhwc-gemm.json --per-layer > $OUT/r/perlayer-fp32-nhwc-gemm.txt 2>&1 && grep -E "^total" $OUT/r/perlayer-fp32-nhwc-gemm.txt
echo "== pytorch fp32 ($((SECONDS-T0)) s)"
[ $(left 440) -gt 50 ] && timeout $(left 445) $D compare --results $OUT/r/pytorch.jsonl --device cuda --models resnet50 --batch-sizes 256 --steps 15 --warmup-steps 3 --precisions fp32 --gpus 1 --frameworks pytorch --point-timeout 90 2>&1 | grep -E "img/s|failed"
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
