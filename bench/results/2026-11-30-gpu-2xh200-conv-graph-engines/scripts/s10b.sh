#!/usr/bin/env bash
# Session 9, call 3 (2-GPU machine, one GPU used): graph engines timed back to back (hold_stream) — the
# convolution tests and the algorithm ranking, the model test (the step captured with engines in it), then
# ResNet-50 steps with DLBENCH_CONV_GRAPH off and auto interleaved: fp16 twice, bf16 and tf32 once.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS
timeout 150 $G/tests/test_backend_cuda --gtest_filter='*Conv*:*AlgorithmSearch*' > $OUT/r/conv_tests.log 2>&1; echo "conv tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/conv_tests.log | head -5 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "FAILED|graph engines ran" $OUT/r/conv_tests.log | head -10
timeout 100 $G/tests/test_gpu_model > $OUT/r/gpu_model.log 2>&1; echo "test_gpu_model rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/gpu_model.log | tr '\n' ' ') ($((SECONDS-T0)) s)"
for PM in fp16:off fp16:auto fp16:off fp16:auto bf16:off bf16:auto tf32:off tf32:auto; do
  P=${PM%:*}; MODE=${PM#*:}
  [ $((SECONDS-T0)) -gt 330 ] && { echo "skip $P $MODE: time"; continue; }
  DLBENCH_CONV_GRAPH=$MODE timeout 90 $G/dlbench bench --device cuda --model resnet50 --batch-size 256 --precision $P \
    --steps 60 --warmup-steps 10 --algorithm-cache $OUT/r/alg.json --json $OUT/r/$P-$MODE-$SECONDS.json > $OUT/r/$P-$MODE-$SECONDS.log 2>&1; rc=$?
  L=$(ls -t $OUT/r/$P-$MODE-*.log | head -1)
  echo "$P graph=$MODE rc=$rc $(grep -o 'step median [0-9.]* ms' $L) $(grep -o '[0-9.]* img/s' $L | tail -1) $(grep -o 'SM median [0-9]* MHz' $L) ($((SECONDS-T0)) s)"
done
DLBENCH_CONV_GRAPH=auto timeout 40 $G/dlbench bench --device cuda --model resnet50 --batch-size 256 --precision fp16 \
  --steps 3 --warmup-steps 1 --algorithm-cache $OUT/r/alg.json --per-layer > $OUT/r/fp16-perlayer-auto.txt 2>&1
grep -E "^total|^layer3.1.conv" $OUT/r/fp16-perlayer-auto.txt | cut -c1-300
grep -o "graph engine" $OUT/r/fp16-perlayer-auto.txt | wc -l
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
