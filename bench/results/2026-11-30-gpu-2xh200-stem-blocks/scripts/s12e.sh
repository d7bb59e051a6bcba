#!/usr/bin/env bash
# Session 11, call 5 (1 GPU): HEAD on a GPU in full: every CUDA test (the stem on 2x2 blocks is the default
# where it times faster), the kernel tests, and test_gpu_model (a whole ResNet-50 step against oneDNN).
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS
timeout 170 $G/tests/test_backend_cuda > $OUT/r/test_backend_cuda.log 2>&1; echo "test_backend_cuda rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/test_backend_cuda.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED" $OUT/r/test_backend_cuda.log | head
timeout 30 $G/tests/test_backend_cuda_kernels > $OUT/r/kernels.log 2>&1; echo "kernels rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/kernels.log | head -2 | tr '\n' ' ') ($((SECONDS-T0)) s)"
DLBENCH_LOG_LEVEL=debug timeout 60 $G/tests/test_gpu_model > $OUT/r/gpu_model.log 2>&1; echo "test_gpu_model rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/gpu_model.log | head -2 | tr '\n' ' ') $(grep -c 'form' $OUT/r/gpu_model.log) form lines ($((SECONDS-T0)) s)"
grep -m3 "form" $OUT/r/gpu_model.log
echo "total $((SECONDS-T0)) s"
