#!/usr/bin/env bash
# Session 10, call 3 (2 GPUs): the table on this binary (graph engines adding to dx): fp16, bf16, tf32 at
# 1 and 2 GPUs (threads; mpirun for fp16), PyTorch DDP at the same points, then the fp32 row, comm-bench.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; T0=$SECONDS
D=$G/dlbench; R=$OUT/r/table.jsonl
left() { echo $(( $1 - (SECONDS-T0) )); }
nvidia-smi --query-gpu=index,name,power.limit,clocks.max.sm --format=csv,noheader
cp $G/alg10.json $R.algorithms.json
MPI="--mpirun-args --allow-run-as-root,--oversubscribe,--bind-to,none,-x,LD_LIBRARY_PATH,-x,NCCL_NVLS_ENABLE"
G1="--results $R --device cuda --models resnet50 --batch-sizes 256 --steps 60 --warmup-steps 10"
G32="--results $R --device cuda --models resnet50 --batch-sizes 256 --steps 30 --warmup-steps 5"
timeout 40 $D comm-bench --device cuda --gpus 2 --dtype f16 --max-bytes 268435456 --json $OUT/r/comm-bench-f16.json > $OUT/r/comm-bench-f16.txt 2>&1; echo "comm-bench rc=$? $(tail -2 $OUT/r/comm-bench-f16.txt | tr '\n' ' ')"
for P in fp16 bf16 tf32; do
  echo "== dlbench $P ($((SECONDS-T0)) s)"
  timeout 120 $D sweep $G1 --precisions $P --gpus 1,2 --launcher threads --point-timeout 60 2>&1 | grep -E "img/s|failed"
  [ $P = fp16 ] && timeout 60 $D sweep $G1 --precisions $P --gpus 2 --launcher mpi --point-timeout 60 $MPI 2>&1 | grep -E "img/s|failed"
done
echo "== pytorch mixed ($((SECONDS-T0)) s)"
timeout $(left 390) $D compare $G1 --precisions fp16,bf16,tf32 --gpus 1,2 --frameworks pytorch --point-timeout 100 2>&1 | grep -E "img/s|failed"
echo "== dlbench fp32 ($((SECONDS-T0)) s)"
timeout $(left 480) $D sweep $G32 --precisions fp32 --gpus 1,2 --launcher threads --point-timeout 70 2>&1 | grep -E "img/s|failed"
echo "== pytorch fp32 ($((SECONDS-T0)) s)"
timeout $(left 575) $D compare $G32 --precisions fp32 --gpus 1,2 --frameworks pytorch --point-timeout 80 2>&1 | grep -E "img/s|failed"
$D report $R -o $OUT/r/report > /dev/null 2>&1; echo "report rc=$?"
cp -r $R.logs $OUT/logs/ 2>/dev/null; rm -rf $R.logs
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
