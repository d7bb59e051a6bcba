#!/usr/bin/env bash
# Session 9, call 4 (2 GPUs): the table on the code with graph engines (DLBENCH_CONV_GRAPH=auto, the default):
# fp16, bf16, tf32 at 1 and 2 GPUs (threads; mpirun for fp16) and PyTorch DDP in one call.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; L=$OUT/logs; T0=$SECONDS
D=$G/dlbench
# The algorithms call 3 chose (same GPU model, cuDNN, shapes, graph:auto): no search in the table's points.
cp $G/alg10.json $OUT/r/table.jsonl.algorithms.json
MPI="--mpirun-args --allow-run-as-root,--oversubscribe,--bind-to,none,-x,LD_LIBRARY_PATH,-x,NCCL_NVLS_ENABLE"
G1="--results $OUT/r/table.jsonl --device cuda --models resnet50 --batch-sizes 256 --steps 60 --warmup-steps 10"
END="--bench-args=--bucket-mb,0,--allreduce-precision,compute"
for P in fp16 bf16 tf32; do
  echo "== dlbench $P ($((SECONDS-T0)) s)"
  timeout 120 $D sweep $G1 --precisions $P --gpus 1,2 --launcher threads --point-timeout 60 2>&1 | grep -E "img/s|failed"
  [ $P = fp16 ] && timeout 60 $D sweep $G1 --precisions $P --gpus 2 --launcher mpi --point-timeout 60 $MPI 2>&1 | grep -E "img/s|failed"
done
echo "== pytorch ($((SECONDS-T0)) s)"
timeout $((330 - (SECONDS-T0))) $D compare $G1 --precisions fp16,bf16,tf32 --gpus 1,2 --frameworks pytorch --point-timeout 120 2>&1 | grep -E "img/s|failed"
$D report $OUT/r/table.jsonl -o $OUT/r/report > /dev/null 2>&1
cp -r $OUT/r/table.jsonl.logs $L/ 2>/dev/null; rm -rf $OUT/r/table.jsonl.logs
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
