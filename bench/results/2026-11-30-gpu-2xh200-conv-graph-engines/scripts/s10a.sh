#!/usr/bin/env bash
# Session 9, call 2 (1 GPU): cuDNN graph-API convolution engines (DLBENCH_CONV_GRAPH, default auto).
# The CUDA backend's tests (conv tests with engines chosen by time, and forced), the model test (the step
# captured as one CUDA graph with engines in it), then ResNet-50 steps with the graph engines off and auto,
# interleaved, fp16 / tf32 / bf16, and the per-layer plan of fp16 with auto.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS
timeout 200 $G/tests/test_backend_cuda > $OUT/r/cuda_tests.log 2>&1; echo "cuda tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/cuda_tests.log | head -5 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "FAILED|graph engines ran" $OUT/r/cuda_tests.log | head -10
timeout 120 $G/tests/test_gpu_model > $OUT/r/gpu_model.log 2>&1; echo "test_gpu_model rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/gpu_model.log | tr '\n' ' ') ($((SECONDS-T0)) s)"
for P in fp16 tf32 bf16; do
  MODES="off auto off auto"; [ $P = bf16 ] && MODES="off auto"
  for MODE in $MODES; do
    [ $((SECONDS-T0)) -gt 480 ] && { echo "skip $P $MODE: time"; continue; }
    DLBENCH_CONV_GRAPH=$MODE timeout 100 $G/dlbench bench --device cuda --model resnet50 --batch-size 256 --precision $P \
      --steps 60 --warmup-steps 10 --algorithm-cache $OUT/r/alg.json --json $OUT/r/$P-$MODE.json > $OUT/r/$P-$MODE.log 2>&1
    echo "$P graph=$MODE rc=$? $(grep -o 'step median [0-9.]* ms' $OUT/r/$P-$MODE.log) $(grep -o '[0-9.]* img/s' $OUT/r/$P-$MODE.log | tail -1) $(grep -o 'SM median [0-9]* MHz' $OUT/r/$P-$MODE.log) ($((SECONDS-T0)) s)"
  done
done
DLBENCH_CONV_GRAPH=auto timeout 60 $G/dlbench bench --device cuda --model resnet50 --batch-size 256 --precision fp16 \
  --steps 3 --warmup-steps 1 --algorithm-cache $OUT/r/alg.json --per-layer > $OUT/r/fp16-perlayer-auto.txt 2>&1
grep -E "^total|^layer3.1.conv|^conv1 " $OUT/r/fp16-perlayer-auto.txt | cut -c1-400
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
