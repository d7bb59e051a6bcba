#!/usr/bin/env bash
# Session 12, call 3 (2 GPUs): own kernels now the default, NHWC add_relu reading the forward's ReLU bit
# mask in y's place, f32 centring with the mean's low part: all batch-norm tests (both kernel choices),
# test_gpu_model, --per-layer fp16 and tf32 (own), steps at 1 and 2 GPUs own vs cudnn (fp16, bf16, tf32).
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS; D=$G/dlbench
left() { echo $(( $1 - (SECONDS-T0) )); }
nvidia-smi --query-gpu=index,name,power.limit,clocks.max.sm --format=csv,noheader
timeout 200 $G/tests/test_backend_cuda --gtest_filter='*BatchNorm*' > $OUT/r/bn-tests.log 2>&1; rc=$?
echo "bn tests rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/bn-tests.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED|Failure" -A3 $OUT/r/bn-tests.log | head -16
timeout 120 $G/tests/test_gpu_model > $OUT/r/gpu-model.log 2>&1; echo "test_gpu_model rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/r/gpu-model.log | head -2 | tr "\n" " ") ($((SECONDS-T0)) s)"
B="--device cuda --model resnet50 --batch-size 256"
bnsum() { awk '$2=="batchnorm"{f+=$3;b+=$4} END{printf "bn fwd %.3f bwd %.3f ms", f, b}' $1; }
for P in fp16 tf32; do
  timeout 60 $D bench $B --precision $P --steps 3 --warmup-steps 1 --algorithm-cache $G/alg-mixed.json --per-layer > $OUT/r/perlayer-$P-own.txt 2>&1
  echo "per-layer $P own rc=$? $(grep -E "^total" $OUT/r/perlayer-$P-own.txt | tr -s " ") | $(bnsum $OUT/r/perlayer-$P-own.txt) ($((SECONDS-T0)) s)"
done
run() {  # kernels precision gpus
  local K=$1 P=$2 N=$3; [ $(left 560) -lt 20 ] && { echo "$K $P $N skipped"; return; }
  local F=$OUT/r/$P-g$N-$K-$SECONDS
  DLBENCH_BN_KERNELS=$K timeout $(left 570) $D bench $B --precision $P --gpus $N --steps 40 --warmup-steps 8 --algorithm-cache $G/alg-mixed.json --json $F.json > $F.log 2>&1; local rc=$?
  echo "$P gpus=$N $K rc=$rc $(grep -o 'step median [0-9.]* ms' $F.log) $(grep -o '[0-9.]* img/s' $F.log | tail -1) $(grep -o 'SM median [0-9]* MHz.*' $F.log) ($((SECONDS-T0)) s)"
}
for P in fp16 bf16 tf32; do for K in cudnn own; do run $K $P 1; run $K $P 2; done; done
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
