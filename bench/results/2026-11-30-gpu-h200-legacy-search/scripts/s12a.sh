#!/usr/bin/env bash
# Session 11, call 1 (1 GPU): all CUDA tests and test_gpu_model on the new code (GEMM shapes ranked by
# heuristic + back-to-back timing with give-up); fp32 NHWC start-up without a cache, new vs previous binary;
# fp32 NHWC --per-layer; tf32 with 8 vs all graph-engine candidates, interleaved.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS; D=$G/dlbench
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader
timeout 200 $G/tests/test_backend_cuda > $OUT/r/test_backend_cuda.log 2>&1; echo "test_backend_cuda rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/test_backend_cuda.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED" $OUT/r/test_backend_cuda.log | head
timeout 100 $G/tests/test_gpu_model > $OUT/r/gpu_model.log 2>&1; echo "test_gpu_model rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/gpu_model.log | head -2 | tr '\n' ' ') ($((SECONDS-T0)) s)"
B="--device cuda --model resnet50 --batch-size 256"
for V in new prev; do
  BIN=$D; [ $V = prev ] && BIN=$G/dlbench.prev
  DLBENCH_LOG_LEVEL=debug timeout 100 $BIN bench $B --precision fp32 --steps 20 --warmup-steps 4 --algorithm-cache $OUT/r/alg-fp32-$V.json --json $OUT/r/start-fp32-$V.json > $OUT/r/start-fp32-$V.log 2>&1
  echo "fp32 nhwc start $V rc=$? $(grep -o '"seconds_to_first_timed_step":[0-9.]*' $OUT/r/start-fp32-$V.json) $(grep -o 'step median [0-9.]* ms' $OUT/r/start-fp32-$V.log) $(grep -o 'digest [0-9a-f]*' $OUT/r/start-fp32-$V.log) ($((SECONDS-T0)) s)"
done
grep "conv search" $OUT/r/start-fp32-new.log | sort -t: -k2 -n -r | head -5
timeout 60 $D bench $B --precision fp32 --steps 3 --warmup-steps 1 --algorithm-cache $OUT/r/alg-fp32-new.json --per-layer > $OUT/r/perlayer-fp32-nhwc.txt 2>&1
echo "per-layer fp32 rc=$? $(grep -E '^total' $OUT/r/perlayer-fp32-nhwc.txt | tr -s ' ') ($((SECONDS-T0)) s)"
for N in 8 all 8 all; do
  LEFT=$((560 - (SECONDS-T0))); [ $LEFT -lt 30 ] && { echo "tf32 $N skipped"; continue; }
  DLBENCH_CONV_GRAPH_CANDIDATES=$N timeout $LEFT $D bench $B --precision tf32 --steps 30 --warmup-steps 5 --algorithm-cache $OUT/r/alg-tf32-$N.json --json $OUT/r/tf32-$N-$SECONDS.json > $OUT/r/tf32-$N-$SECONDS.log 2>&1; rc=$?
  F=$(ls -t $OUT/r/tf32-$N-*.log | head -1)
  echo "tf32 engines=$N rc=$rc $(grep -o '"seconds_to_first_timed_step":[0-9.]*' ${F%.log}.json) $(grep -o 'step median [0-9.]* ms' $F) $(grep -o '[0-9.,]* img/s' $F | tail -1) $(grep -o 'SM median [0-9]* MHz' $F) ($((SECONDS-T0)) s)"
done
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
