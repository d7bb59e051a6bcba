#!/usr/bin/env bash
# Session 7, call 1 (2 GPUs): why is an all-reduce of 64 MB ~350 us here? NCCL's choices (NCCL_DEBUG), env
# variants through comm-bench, and PyTorch's own NCCL timed the same way.
source "$(dirname "$0")/env.sh"
D=$G/dlbench; mkdir -p $OUT/logs; L=$OUT/logs; T0=$SECONDS
nvidia-smi topo -m > $L/topo.txt 2>&1; nvidia-smi -q -d CLOCK,POWER > $L/smi.txt 2>&1
CB="$D comm-bench --device cuda --gpus 2 --dtype f16 --min-bytes 1048576 --max-bytes 268435456 --iters 20"
echo "== default + NCCL_DEBUG"; NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,TUNING,ENV timeout 60 $CB > $L/cb-debug.txt 2>&1
grep -E "via|channels|nChannels|Ring|Trees|P2P|CUMEM|NVLS|Algo|Proto|busbw|MiB|[0-9]+ +[0-9]+ +[0-9.]+" $L/cb-debug.txt | grep -v "^$" | head -60
for v in "NCCL_MIN_NCHANNELS=32" "NCCL_MIN_NCHANNELS=32 NCCL_MAX_NCHANNELS=32" "NCCL_PROTO=Simple" "NCCL_PROTO=LL128" "NCCL_ALGO=Tree" "NCCL_CUMEM_ENABLE=0" "NCCL_P2P_READ_ENABLE=1"; do
  echo "== $v"; env $v timeout 60 $CB 2>&1 | tail -10
done
echo "== pytorch f16 ($((SECONDS-T0)) s)"; timeout 120 torchrun --nproc_per_node 2 $G/torch_allreduce.py f16 2>&1 | grep -v Warn | tail -12
echo "== pytorch f16 NCCL_DEBUG ($((SECONDS-T0)) s)"; NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,TUNING,ENV timeout 120 torchrun --nproc_per_node 2 $G/torch_allreduce.py f16 > $L/torch-debug.txt 2>&1; grep -E "via|nChannels|channels" $L/torch-debug.txt | head -20
cd $OUT && tar czf all.tgz logs && rm -rf logs
echo "total $((SECONDS-T0)) s"
