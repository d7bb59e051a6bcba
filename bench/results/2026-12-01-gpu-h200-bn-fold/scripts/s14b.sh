#!/usr/bin/env bash
# Session 13, call 2 (2 GPUs): the shortcut fold on by default: the batch-norm tests (backend folded ops
# against the reference, folded kernels against the composed ones), test_gpu_model; comm-bench; the table
# for fp16, bf16 and tf32: dlbench at 1 and 2 GPUs (threads) and 2 GPUs (mpirun), PyTorch DDP at 1 and 2,
# one results file; the report.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; T0=$SECONDS; D=$G/dlbench
left() { echo $(( $1 - (SECONDS-T0) )); }
nvidia-smi --query-gpu=index,name,power.limit,clocks.max.sm --format=csv,noheader
timeout 60 $G/tests/test_backend_cuda --gtest_filter='*BatchNorm*' > $OUT/r/bn-tests.log 2>&1; rc=$?
echo "bn tests rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/bn-tests.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED|Failure" -A4 $OUT/r/bn-tests.log | head -20
timeout 30 $G/tests/test_backend_cuda_kernels --gtest_filter='*BatchNorm*' > $OUT/r/bn-kernel-tests.log 2>&1; rc=$?
echo "bn kernel tests rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/bn-kernel-tests.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED|Failure" -A4 $OUT/r/bn-kernel-tests.log | head -12
timeout 60 $G/tests/test_gpu_model > $OUT/r/gpu-model.log 2>&1; echo "test_gpu_model rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/r/gpu-model.log | head -2 | tr "\n" " ") ($((SECONDS-T0)) s)"
R=$OUT/r/table.jsonl; cp $G/alg-mixed.json $R.algorithms.json
MPI="--mpirun-args --allow-run-as-root,--oversubscribe,--bind-to,none,-x,LD_LIBRARY_PATH,-x,NCCL_NVLS_ENABLE"
G1="--results $R --device cuda --models resnet50 --batch-sizes 256 --steps 40 --warmup-steps 8"
timeout 40 $D comm-bench --device cuda --gpus 2 --dtype f16 --max-bytes 268435456 --json $OUT/r/comm-bench-f16.json > $OUT/r/comm-bench-f16.txt 2>&1; echo "comm-bench rc=$? $(tail -1 $OUT/r/comm-bench-f16.txt)"
echo "== dlbench ($((SECONDS-T0)) s)"
timeout $(left 300) $D sweep $G1 --precisions fp16,bf16,tf32 --gpus 1,2 --launcher threads --point-timeout 40 2>&1 | grep -E "img/s|failed"
echo "== mpirun ($((SECONDS-T0)) s)"
timeout $(left 340) $D sweep $G1 --precisions fp16,bf16,tf32 --gpus 2 --launcher mpi --point-timeout 30 $MPI 2>&1 | grep -E "img/s|failed"
echo "== pytorch ($((SECONDS-T0)) s)"
timeout $(left 580) $D compare $G1 --precisions fp16,bf16,tf32 --gpus 1,2 --frameworks pytorch --point-timeout 80 2>&1 | grep -E "img/s|failed"
$D report $R -o $OUT/r/report > /dev/null 2>&1; echo "report rc=$?"
cp -r $R.logs $OUT/logs/ 2>/dev/null; rm -rf $R.logs
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
