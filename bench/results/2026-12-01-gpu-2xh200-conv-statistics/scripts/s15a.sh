#!/usr/bin/env bash
# Session 14, call 1 (2x H200): the refactor of 45e26c2 on a GPU (batch-norm, statistics and fold tests),
# then statistics off / auto at 1 and 2 GPUs in fp16 (each its own algorithm-cache copy), and the fp16 row
# of the table with the statistics on (dlbench 1 and 2 GPUs threads, 2 GPUs mpirun, PyTorch DDP 1 and 2)
# in one results file, and its report.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; T0=$SECONDS; D=$G/dlbench
left() { echo $(( $1 - (SECONDS-T0) )); }
F='*OutputStatistics*:*StatisticsFromTheInputsSums*:*FoldedShortcut*:*BatchNorm*'
timeout 150 $G/tests/test_backend_cuda --gtest_filter="$F" > $OUT/r/test_backend_cuda.log 2>&1; rc=$?
echo "test_backend_cuda rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/test_backend_cuda.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED" $OUT/r/test_backend_cuda.log | head -8
cp $G/alg-mixed.json $OUT/r/alg-off.json; cp $G/alg-mixed.json $OUT/r/alg-auto.json
B="--device cuda --model resnet50 --batch-size 256 --precision fp16"
run() {  # mode gpus
  local K=$1 N=$2; local F=$OUT/r/fp16-g$N-$K-$SECONDS
  DLBENCH_CONV_STATISTICS=$K timeout 40 $D bench $B --gpus $N --steps 40 --warmup-steps 8 --algorithm-cache $OUT/r/alg-$K.json --json $F.json > $F.log 2>&1; local rc=$?
  echo "fp16 gpus=$N stats=$K rc=$rc $(grep -o 'step median [0-9.]* ms' $F.log) $(grep -o '[0-9.]* img/s' $F.log | tail -1) $(grep -o 'SM median [0-9]* MHz.*' $F.log) ($((SECONDS-T0)) s)"
}
for K in off auto; do run $K 1; run $K 2; done
R=$OUT/r/table-fp16.jsonl; cp $OUT/r/alg-auto.json $R.algorithms.json
MPI="--mpirun-args --allow-run-as-root,--oversubscribe,--bind-to,none,-x,LD_LIBRARY_PATH,-x,NCCL_NVLS_ENABLE"
G1="--results $R --device cuda --models resnet50 --batch-sizes 256 --steps 40 --warmup-steps 8"
echo "== dlbench ($((SECONDS-T0)) s)"
timeout $(left 290) $D sweep $G1 --precisions fp16 --gpus 1,2 --launcher threads --point-timeout 40 2>&1 | grep -E "img/s|failed"
timeout $(left 315) $D sweep $G1 --precisions fp16 --gpus 2 --launcher mpi --point-timeout 30 $MPI 2>&1 | grep -E "img/s|failed"
echo "== pytorch ($((SECONDS-T0)) s)"
timeout $(left 385) $D compare $G1 --precisions fp16 --gpus 1,2 --frameworks pytorch --point-timeout 80 2>&1 | grep -E "img/s|failed"
$D report $R -o $OUT/r/report > /dev/null 2>&1; echo "report rc=$?"
cp -r $R.logs $OUT/logs/ 2>/dev/null; rm -rf $R.logs
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
