#!/usr/bin/env bash
# Session 10, call 1 (1 GPU): the code after 6e799d9 on a GPU — all CUDA tests, memcheck on forced graph
# engines; start-up off vs auto without a cache; fp32 NCHW vs NHWC interleaved; --per-layer (hold-queued)
# for fp32 nchw/nhwc, tf32 and fp16 against their steps.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS; D=$G/dlbench
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader
timeout 200 $G/tests/test_backend_cuda > $OUT/r/test_backend_cuda.log 2>&1; echo "test_backend_cuda rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/test_backend_cuda.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED" $OUT/r/test_backend_cuda.log | head
timeout 60 $G/tests/test_backend_cuda_kernels > $OUT/r/kernels.log 2>&1; echo "kernels rc=$? ($((SECONDS-T0)) s)"
timeout 100 $G/tests/test_gpu_model > $OUT/r/gpu_model.log 2>&1; echo "test_gpu_model rc=$? ($((SECONDS-T0)) s)"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 $G/tests/test_backend_cuda --gtest_filter='*GraphEngines*' > $OUT/r/memcheck.log 2>&1; echo "memcheck graph engines rc=$? $(grep -E 'ERROR SUMMARY' $OUT/r/memcheck.log) ($((SECONDS-T0)) s)"
B="--device cuda --model resnet50 --batch-size 256"
for M in off auto; do
  DLBENCH_CONV_GRAPH=$M timeout 90 $D bench $B --precision fp16 --steps 20 --warmup-steps 5 --json $OUT/r/start-$M.json > $OUT/r/start-$M.log 2>&1
  echo "fp16 start graph=$M rc=$? $(grep -o '"seconds_to_first_timed_step":[0-9.]*' $OUT/r/start-$M.json) $(grep -o 'step median [0-9.]* ms' $OUT/r/start-$M.log) ($((SECONDS-T0)) s)"
done
for L in nchw nhwc nchw nhwc; do
  timeout 90 $D bench $B --precision fp32 --layout $L --steps 20 --warmup-steps 4 --algorithm-cache $OUT/r/alg-fp32-$L.json --json $OUT/r/fp32-$L-$SECONDS.json > $OUT/r/fp32-$L-$SECONDS.log 2>&1; rc=$?
  F=$(ls -t $OUT/r/fp32-$L-*.log | head -1)
  echo "fp32 $L rc=$rc $(grep -o 'step median [0-9.]* ms' $F) $(grep -o '[0-9.,]* img/s' $F | tail -1) $(grep -o 'SM median [0-9]* MHz' $F) ($((SECONDS-T0)) s)"
done
cp $G/alg10.json $OUT/r/alg-mixed.json
for PL in fp32:nchw fp32:nhwc tf32:nhwc fp16:nhwc; do
  P=${PL%:*}; L=${PL#*:}; C=$OUT/r/alg-mixed.json; [ $P = fp32 ] && C=$OUT/r/alg-fp32-$L.json
  LEFT=$((570 - (SECONDS-T0))); [ $LEFT -lt 25 ] && { echo "per-layer $P $L skipped"; continue; }
  timeout $LEFT $D bench $B --precision $P --layout $L --steps 3 --warmup-steps 1 --algorithm-cache $C --per-layer > $OUT/r/perlayer-$P-$L.txt 2>&1
  echo "per-layer $P $L rc=$? $(grep -o 'step median [0-9.]* ms' $OUT/r/perlayer-$P-$L.txt) $(grep -E '^total' $OUT/r/perlayer-$P-$L.txt | tr -s ' ') ($((SECONDS-T0)) s)"
done
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
