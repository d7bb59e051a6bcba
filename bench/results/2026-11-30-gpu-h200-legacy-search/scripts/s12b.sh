#!/usr/bin/env bash
# Session 11, call 2 (1 GPU): the legacy search without cudnnFind (heuristic list, back-to-back timing, give
# up after one call at 3x the fastest) for every shape: all CUDA tests, test_gpu_model; start-up without an
# algorithm cache and the step, new vs previous binary, every precision; then with the caches, interleaved.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader
timeout 200 $G/tests/test_backend_cuda > $OUT/r/test_backend_cuda.log 2>&1; echo "test_backend_cuda rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/test_backend_cuda.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED" $OUT/r/test_backend_cuda.log | head
timeout 100 $G/tests/test_gpu_model > $OUT/r/gpu_model.log 2>&1; echo "test_gpu_model rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/gpu_model.log | head -2 | tr '\n' ' ') ($((SECONDS-T0)) s)"
B="--device cuda --model resnet50 --batch-size 256"
run() {  # version precision tag cache-mode
  local V=$1 P=$2 TAG=$3 BIN=$G/dlbench; [ $V = prev ] && BIN=$G/dlbench.prev
  local LEFT=$((585 - (SECONDS-T0))); [ $LEFT -lt 20 ] && { echo "$V $P $TAG skipped"; return; }
  DLBENCH_LOG_LEVEL=debug timeout $LEFT $BIN bench $B --precision $P --steps 20 --warmup-steps 4 --algorithm-cache $OUT/r/alg-$P-$V.json --json $OUT/r/$P-$V-$TAG.json > $OUT/r/$P-$V-$TAG.log 2>&1; local rc=$?
  echo "$P $V $TAG rc=$rc $(grep -o '"seconds_to_first_timed_step":[0-9.]*' $OUT/r/$P-$V-$TAG.json) $(grep -o 'step median [0-9.]* ms' $OUT/r/$P-$V-$TAG.log) $(grep -o 'digest [0-9a-f]*' $OUT/r/$P-$V-$TAG.log) $(grep -o 'SM median [0-9]* MHz' $OUT/r/$P-$V-$TAG.log) ($((SECONDS-T0)) s)"
}
for P in fp16 tf32 fp32 bf16; do run new $P search; run prev $P search; done
for R in 1 2; do for P in fp16 tf32 fp32; do run prev $P cached$R; run new $P cached$R; done; done
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
