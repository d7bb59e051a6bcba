#!/usr/bin/env bash
# Next session, call 1 (1 GPU; binaries built at 0ae569f or later): everything written without a GPU in
# session 8 — the max-pool tests (NhwcIndex refactor), the padded-input-channel convolution tests
# (DLBENCH_CONV_PAD_CHANNELS=force) and copy_channels, memcheck on both, the ResNet-50 step against oneDNN;
# fp16/tf32 steps with DLBENCH_CONV_PAD_CHANNELS off and auto in one call (the stem's per-layer plan with
# auto); then conv_bn_fusion_probe (fp16, bf16, tf32, fp32).
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS
F='*Pool*:*Padded*'
timeout 90 $G/tests/test_backend_cuda --gtest_filter="$F" > $OUT/r/cuda_tests.log 2>&1; echo "cuda tests rc=$? $(grep -E 'PASSED|FAILED' $OUT/r/cuda_tests.log | head -3 | tr '\n' ' ')"
timeout 60 $G/tests/test_backend_cuda_kernels --gtest_filter='*CopyChannels*' > $OUT/r/kernel_tests.log 2>&1; echo "kernel tests rc=$? $(grep -E 'PASSED|FAILED' $OUT/r/kernel_tests.log | head -2 | tr '\n' ' ')"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 1 $G/tests/test_backend_cuda --gtest_filter="$F" > $OUT/r/memcheck.log 2>&1; echo "memcheck rc=$? ($((SECONDS-T0)) s)"
timeout 120 $G/tests/test_gpu_model > $OUT/r/gpu_model.log 2>&1; echo "test_gpu_model rc=$? ($((SECONDS-T0)) s)"
for P in fp16 tf32; do
  for MODE in off auto off auto; do
    DLBENCH_CONV_PAD_CHANNELS=$MODE timeout 120 $G/dlbench bench --device cuda --model resnet50 --batch-size 256 --precision $P \
      --steps 60 --warmup-steps 10 --algorithm-cache $OUT/r/alg.json --json $OUT/r/$P-$MODE.json > $OUT/r/$P-$MODE.log 2>&1
    echo "$P pad=$MODE rc=$? $(grep -o 'step median [0-9.]* ms' $OUT/r/$P-$MODE.log) $(grep -o 'SM median [0-9]* MHz' $OUT/r/$P-$MODE.log)"
  done
  DLBENCH_CONV_PAD_CHANNELS=auto timeout 90 $G/dlbench bench --device cuda --model resnet50 --batch-size 256 --precision $P \
    --steps 3 --warmup-steps 1 --algorithm-cache $OUT/r/alg.json --per-layer > $OUT/r/$P-perlayer-auto.txt 2>&1
  grep -E "^conv1 |^maxpool" $OUT/r/$P-perlayer-auto.txt | cut -c1-250
done
for D in fp16 bf16 tf32 fp32; do
  echo "== conv_bn_fusion_probe $D ($((SECONDS-T0)) s)"
  R=20; [ $D = fp32 ] && R=5
  LEFT=$((560 - (SECONDS-T0))); [ $LEFT -lt 30 ] && { echo "skipped: $LEFT s left"; continue; }
  timeout $LEFT $G/conv_bn_fusion_probe --dtype $D --batch 256 --reps $R > $OUT/r/fusion-$D.txt 2>&1; echo "rc=$?"; tail -13 $OUT/r/fusion-$D.txt
done
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
