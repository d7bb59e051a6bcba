#!/usr/bin/env bash
# Session 10, call 2 (1 GPU): graph engines that add to dx (beta 1) for the accumulating backward data —
# conv tests + model test, then ResNet-50 steps: this binary against the previous one (915ea77), interleaved,
# tf32 / fp16 / fp32, and the tf32 per-layer profile.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS
timeout 200 $G/tests/test_backend_cuda --gtest_filter='*Conv*' > $OUT/r/conv_tests.log 2>&1; echo "conv tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/conv_tests.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED|adding to dx" $OUT/r/conv_tests.log | head
timeout 100 $G/tests/test_gpu_model > $OUT/r/gpu_model.log 2>&1; echo "test_gpu_model rc=$? ($((SECONDS-T0)) s)"
B="--device cuda --model resnet50 --batch-size 256"
cp $G/alg10.json $OUT/r/alg-mixed.json
for P in tf32 fp16 tf32 fp16; do
  for V in prev new; do
    D=$G/dlbench; [ $V = prev ] && D=$G/dlbench-prev
    C=$OUT/r/alg-mixed.json
    timeout 100 $D bench $B --precision $P --steps 40 --warmup-steps 8 --algorithm-cache $C > $OUT/r/$P-$V-$SECONDS.log 2>&1; rc=$?
    F=$(ls -t $OUT/r/$P-$V-*.log | head -1)
    echo "$P $V rc=$rc $(grep -o 'step median [0-9.]* ms' $F) $(grep -o '[0-9.]* img/s' $F | tail -1) $(grep -o 'SM median [0-9]* MHz' $F) ($((SECONDS-T0)) s)"
  done
done
for V in prev new; do
  D=$G/dlbench; [ $V = prev ] && D=$G/dlbench-prev
  timeout 100 $D bench $B --precision fp32 --steps 15 --warmup-steps 3 --algorithm-cache $OUT/r/alg-fp32.json > $OUT/r/fp32-$V.log 2>&1
  echo "fp32 $V rc=$? $(grep -o 'step median [0-9.]* ms' $OUT/r/fp32-$V.log) $(grep -o 'SM median [0-9]* MHz' $OUT/r/fp32-$V.log) ($((SECONDS-T0)) s)"
done
timeout 60 $G/dlbench bench $B --precision tf32 --steps 3 --warmup-steps 1 --algorithm-cache $OUT/r/alg-mixed.json --per-layer > $OUT/r/perlayer-tf32.txt 2>&1
grep -E "^layer1.1.conv1 |^layer2.1.conv1 |^total" $OUT/r/perlayer-tf32.txt | cut -c1-400
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
