#!/usr/bin/env bash
# Session 11, call 4 (2 GPUs): the stem as 2x2 blocks (space-to-depth) and the stem pool's block backward:
# their tests; tf32/fp16 A/B on one GPU (b69e588 / new with blocks off / new); then the table at 1 and 2
# GPUs (fp16, tf32, bf16; threads; fp16 also mpirun), PyTorch DDP at the same points, comm-bench.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; T0=$SECONDS; D=$G/dlbench
left() { echo $(( $1 - (SECONDS-T0) )); }
nvidia-smi --query-gpu=index,name,power.limit,clocks.max.sm --format=csv,noheader
timeout 150 $G/tests/test_backend_cuda --gtest_filter='*BlockInput*:*Padded*:*Pool*:*Gemm*:*ConvTest.MatchesReference*' > $OUT/r/tests.log 2>&1; rc=$?
echo "tests rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/tests.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED" $OUT/r/tests.log | head
if [ $rc -ne 0 ]; then export DLBENCH_CONV_SPACE_TO_DEPTH=off; echo "blocks OFF for the rest"; fi
B="--device cuda --model resnet50 --batch-size 256"
ab() {  # name binary env precision
  local N=$1 BIN=$2 E=$3 P=$4; cp -n $G/alg-mixed.json $OUT/r/alg-$N.json
  env $E timeout $(left 200) $BIN bench $B --precision $P --steps 40 --warmup-steps 8 --algorithm-cache $OUT/r/alg-$N.json --json $OUT/r/ab-$P-$N.json > $OUT/r/ab-$P-$N.log 2>&1
  echo "$P $N rc=$? $(grep -o 'step median [0-9.]* ms' $OUT/r/ab-$P-$N.log) $(grep -o '[0-9.]* img/s' $OUT/r/ab-$P-$N.log | tail -1) $(grep -o 'SM median [0-9]* MHz' $OUT/r/ab-$P-$N.log) ($((SECONDS-T0)) s)"
}
for P in tf32 fp16; do
  ab prev $G/dlbench.prev X=1 $P; ab pool $D DLBENCH_CONV_SPACE_TO_DEPTH=off $P; ab blocks $D DLBENCH_LOG_LEVEL=debug $P
done
grep -h "form" $OUT/r/ab-*-blocks.log | head -6
R=$OUT/r/table.jsonl; cp $G/alg-mixed.json $R.algorithms.json
MPI="--mpirun-args --allow-run-as-root,--oversubscribe,--bind-to,none,-x,LD_LIBRARY_PATH,-x,NCCL_NVLS_ENABLE"
G1="--results $R --device cuda --models resnet50 --batch-sizes 256 --steps 40 --warmup-steps 8"
timeout 40 $D comm-bench --device cuda --gpus 2 --dtype f16 --max-bytes 268435456 --json $OUT/r/comm-bench-f16.json > $OUT/r/comm-bench-f16.txt 2>&1; echo "comm-bench rc=$? $(tail -1 $OUT/r/comm-bench-f16.txt)"
echo "== dlbench ($((SECONDS-T0)) s)"
timeout $(left 300) $D sweep $G1 --precisions fp16,tf32,bf16 --gpus 1,2 --launcher threads --point-timeout 60 2>&1 | grep -E "img/s|failed"
echo "== pytorch ($((SECONDS-T0)) s)"
timeout $(left 490) $D compare $G1 --precisions tf32,fp16,bf16 --gpus 1,2 --frameworks pytorch --point-timeout 90 2>&1 | grep -E "img/s|failed"
echo "== mpirun ($((SECONDS-T0)) s)"
[ $(left 525) -gt 25 ] && timeout $(left 525) $D sweep $G1 --precisions fp16 --gpus 2 --launcher mpi --point-timeout 30 $MPI 2>&1 | grep -E "img/s|failed"
$D report $R -o $OUT/r/report > /dev/null 2>&1; echo "report rc=$?"
cp -r $R.logs $OUT/logs/ 2>/dev/null; rm -rf $R.logs
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
