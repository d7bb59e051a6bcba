#!/usr/bin/env bash
# Session 14, call 5 (1 GPU): at 64d4a1b (the stem's batch norm + max pool fused by default): the stem,
# batch-norm, pool and statistics tests (the test's tolerance for 16-bit parameter gradients set to the
# data type's rounding, and an f32 anchor against the reference added), test_gpu_model, then the 1-GPU
# table in fp16, bf16 and tf32: dlbench and PyTorch in one results file, and its report.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; T0=$SECONDS; D=$G/dlbench
left() { echo $(( $1 - (SECONDS-T0) )); }
timeout 100 $G/tests/test_backend_cuda --gtest_filter='*Stem*:*BatchNorm*:*Pool*:*Statistics*' > $OUT/r/test_backend_cuda.log 2>&1; rc=$?
echo "test_backend_cuda rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/test_backend_cuda.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED|against the reference" $OUT/r/test_backend_cuda.log | head -12
timeout 90 $G/tests/test_gpu_model > $OUT/r/test_gpu_model.log 2>&1; rc=$?
echo "test_gpu_model rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/test_gpu_model.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
R=$OUT/r/table-1gpu.jsonl; cp $G/alg-stats.json $R.algorithms.json
G1="--results $R --device cuda --models resnet50 --batch-sizes 256 --steps 40 --warmup-steps 8"
echo "== dlbench ($((SECONDS-T0)) s)"
timeout $(left 300) $D sweep $G1 --precisions fp16,bf16,tf32 --gpus 1 --launcher threads --point-timeout 60 2>&1 | grep -E "img/s|failed"
echo "== pytorch ($((SECONDS-T0)) s)"
timeout $(left 560) $D compare $G1 --precisions fp16,bf16,tf32 --gpus 1 --frameworks pytorch --point-timeout 90 2>&1 | grep -E "img/s|failed"
$D report $R -o $OUT/r/report > /dev/null 2>&1; echo "report rc=$?"
cp -r $R.logs $OUT/logs/ 2>/dev/null; rm -rf $R.logs
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
