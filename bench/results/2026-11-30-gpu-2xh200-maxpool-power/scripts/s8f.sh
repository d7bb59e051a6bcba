#!/usr/bin/env bash
# Session 8, call 7 (1 GPU): dlbench's own NHWC max-pool kernels — the CUDA op tests (against the
# reference, with and without saved argmax, ties, NaN), memcheck on them, the ResNet-50 step against
# oneDNN, then the fp16 and tf32 ResNet-50 step and fp16's per-layer times (the stem pool's).
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS
timeout 150 $G/tests/test_backend_cuda > $OUT/r/cuda_ops.log 2>&1; echo "test_backend_cuda rc=$? ($((SECONDS-T0)) s)"; grep -E "FAILED|PASSED" $OUT/r/cuda_ops.log | head -20
if command -v compute-sanitizer > /dev/null; then
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 $G/tests/test_backend_cuda --gtest_filter='*Pool*' > $OUT/r/memcheck.log 2>&1; echo "memcheck pool rc=$? ($((SECONDS-T0)) s)"; tail -3 $OUT/r/memcheck.log
fi
[ -z "$SKIP_MODEL" ] && { timeout 120 $G/tests/test_gpu_model > $OUT/r/gpu_model.log 2>&1; echo "test_gpu_model rc=$? ($((SECONDS-T0)) s)"; grep -E "FAILED|PASSED" $OUT/r/gpu_model.log | head; }
for P in fp16 tf32; do
  timeout 90 $G/dlbench bench --device cuda --model resnet50 --batch-size 256 --precision $P --steps 60 --warmup-steps 10 \
    --algorithm-cache $G/alg.json --json $OUT/r/$P.json > $OUT/r/$P.log 2>&1; echo "$P rc=$? $(grep -o 'img/s | step median.*' $OUT/r/$P.log) $(grep 'GPU clocks' $OUT/r/$P.log)"
done
for P in fp16 tf32; do
timeout 90 $G/dlbench bench --device cuda --model resnet50 --batch-size 256 --precision $P --steps 10 --warmup-steps 3 \
  --algorithm-cache $G/alg.json --per-layer > $OUT/r/$P-perlayer.txt 2>&1; grep -E "^maxpool|^total" $OUT/r/$P-perlayer.txt
done
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
