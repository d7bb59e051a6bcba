#!/usr/bin/env bash
# Session 12, call 6 (2 GPUs): the finalize folded into the reductions' last block (no finalize kernel):
# the batch-norm tests and test_gpu_model; steps against the previous binary (a587833, the table's),
# interleaved, same algorithm cache: fp16, bf16, tf32 at 1 GPU twice, fp16 at 2 GPUs.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS
left() { echo $(( $1 - (SECONDS-T0) )); }
timeout 100 $G/tests/test_backend_cuda --gtest_filter='*BatchNorm*' > $OUT/r/bn-tests.log 2>&1; rc=$?
echo "bn tests rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/bn-tests.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED" $OUT/r/bn-tests.log | head -5
timeout 100 $G/tests/test_gpu_model > $OUT/r/gpu-model.log 2>&1; echo "test_gpu_model rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/r/gpu-model.log | head -2 | tr "\n" " ") ($((SECONDS-T0)) s)"
B="--device cuda --model resnet50 --batch-size 256"
run() {  # version precision gpus
  local V=$1 P=$2 N=$3 BIN=$G/dlbench; [ $V = prev ] && BIN=$G/dlbench.prev
  [ $(left 330) -lt 15 ] && { echo "$V $P $N skipped"; return; }
  local F=$OUT/r/$P-g$N-$V-$SECONDS
  timeout $(left 340) $BIN bench $B --precision $P --gpus $N --steps 40 --warmup-steps 8 --algorithm-cache $G/alg-mixed.json --json $F.json > $F.log 2>&1; local rc=$?
  echo "$P gpus=$N $V rc=$rc $(grep -o 'step median [0-9.]* ms' $F.log) $(grep -o '[0-9.]* img/s' $F.log | tail -1) $(grep -o 'SM median [0-9]* MHz' $F.log) ($((SECONDS-T0)) s)"
}
for R in 1 2; do for P in fp16 bf16 tf32; do run prev $P 1; run new $P 1; done; done
run prev fp16 2; run new fp16 2
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
