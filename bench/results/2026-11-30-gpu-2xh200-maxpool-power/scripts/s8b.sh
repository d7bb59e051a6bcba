#!/usr/bin/env bash
# Next session, call 2 (2 GPUs): the table again with clocks in every point — dlbench default and with the
# exchange after backward in the compute dtype (--bench-args), PyTorch DDP, fp16/bf16/tf32 at 1 and 2 GPUs.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; L=$OUT/logs; T0=$SECONDS
MPI="--mpirun-args --allow-run-as-root,--oversubscribe,--bind-to,none,-x,LD_LIBRARY_PATH,-x,NCCL_NVLS_ENABLE"
G1="--results $OUT/r/table.jsonl --device cuda --models resnet50 --batch-sizes 256 --steps 60 --warmup-steps 10"
for P in fp16 bf16 tf32; do
  echo "== dlbench $P ($((SECONDS-T0)) s)"
  timeout 120 $G/dlbench sweep $G1 --precisions $P --gpus 1,2 --launcher threads --point-timeout 60 2>&1 | grep -E "img/s|failed"
  timeout 60 $G/dlbench sweep $G1 --precisions $P --gpus 2 --launcher threads --point-timeout 60 \
    --bench-args=--bucket-mb,0,--allreduce-precision,compute 2>&1 | grep -E "img/s|failed"
  timeout 60 $G/dlbench sweep $G1 --precisions $P --gpus 2 --launcher mpi --point-timeout 60 $MPI \
    --bench-args=--bucket-mb,0,--allreduce-precision,compute 2>&1 | grep -E "img/s|failed"
done
echo "== pytorch ($((SECONDS-T0)) s)"
timeout $((585 - (SECONDS-T0))) $G/dlbench compare $G1 --precisions fp16,bf16,tf32 --gpus 1,2 --frameworks pytorch --point-timeout 120 2>&1 | grep -E "img/s|failed"
$G/dlbench report $OUT/r/table.jsonl -o $OUT/r/report > /dev/null 2>&1
cp -r $OUT/r/table.jsonl.logs $L/ 2>/dev/null; rm -rf $OUT/r/table.jsonl.logs
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
