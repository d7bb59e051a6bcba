#!/usr/bin/env bash
# Session 13, call 3 (2 GPUs): the table's fp32 row, dlbench (1 and 2 GPUs threads, 2 GPUs mpirun) and
# PyTorch DDP (1 and 2 GPUs), one results file.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; T0=$SECONDS; D=$G/dlbench
left() { echo $(( $1 - (SECONDS-T0) )); }
R=$OUT/r/table-fp32.jsonl; cp $G/alg-mixed.json $R.algorithms.json
MPI="--mpirun-args --allow-run-as-root,--oversubscribe,--bind-to,none,-x,LD_LIBRARY_PATH,-x,NCCL_NVLS_ENABLE"
G1="--results $R --device cuda --models resnet50 --batch-sizes 256 --steps 40 --warmup-steps 8"
timeout $(left 120) $D sweep $G1 --precisions fp32 --gpus 1,2 --launcher threads --point-timeout 55 2>&1 | grep -E "img/s|failed"
echo "== mpirun ($((SECONDS-T0)) s)"
timeout $(left 180) $D sweep $G1 --precisions fp32 --gpus 2 --launcher mpi --point-timeout 55 $MPI 2>&1 | grep -E "img/s|failed"
echo "== pytorch ($((SECONDS-T0)) s)"
timeout $(left 585) $D compare $G1 --precisions fp32 --gpus 1,2 --frameworks pytorch --point-timeout 230 2>&1 | grep -E "img/s|failed"
cp -r $R.logs $OUT/logs/ 2>/dev/null; rm -rf $R.logs
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
