#!/usr/bin/env bash
# Final round on 2x H200 with this session's defaults (recorded step in every precision, repeated algorithm
# search): dlbench's grid (threads 1,2 GPUs; mpirun 2), the all-reduce ceiling, PyTorch eager fp16 at 1 and
# 2 GPUs, the compiled peer fp16 at 2 GPUs, in one call.
source "$(dirname "$0")/env.sh"
D=$G/dlbench; mkdir -p $OUT/r $OUT/logs; L=$OUT/logs; T0=$SECONDS
G1="--results $OUT/r/study.jsonl --device cuda --models resnet50 --batch-sizes 256 --steps 30 --warmup-steps 10"
MPI="--mpirun-args --allow-run-as-root,--oversubscribe,--bind-to,none,-x,LD_LIBRARY_PATH,-x,NCCL_NVLS_ENABLE"
left() { echo $((555 - (SECONDS-T0))); }
echo "== dlbench threads"; timeout 240 $D sweep $G1 --precisions fp16,tf32,bf16,fp32 --gpus 1,2 --launcher threads --point-timeout 60 2>&1 | grep -E "img/s|failed|done"
echo "== comm-bench ($((SECONDS-T0)) s)"; timeout 30 $D comm-bench --device cuda --gpus 2 --dtype f32 --max-bytes 268435456 --json $OUT/r/comm-bench.json > $L/comm.log 2>&1; tail -3 $L/comm.log | head -1
echo "== pytorch eager ($((SECONDS-T0)) s)"; timeout $(( $(left) < 170 ? $(left) : 170 )) $D compare $G1 --precisions fp16 --gpus 1,2 --frameworks pytorch --point-timeout 115 2>&1 | grep -E "img/s|failed|done|not|interr"
echo "== dlbench mpi ($((SECONDS-T0)) s)"; (( $(left) > 60 )) && timeout $(( $(left) < 70 ? $(left) : 70 )) $D sweep $G1 --precisions fp16,bf16 --gpus 2 --launcher mpi --point-timeout 35 $MPI 2>&1 | grep -E "img/s|failed|done|interr"
echo "== compiled ($((SECONDS-T0)) s)"; (( $(left) > 100 )) && timeout $(left) $D compare $G1 --precisions fp16 --gpus 2 --frameworks pytorch-compiled --point-timeout 115 2>&1 | grep -E "img/s|failed|done|not|interr"
cp -r $OUT/r/study.jsonl.logs $L/ 2>/dev/null; rm -rf $OUT/r/study.jsonl.logs
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
