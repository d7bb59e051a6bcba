#!/usr/bin/env bash
# Session 12, call 7 (2 GPUs): with the own batch-norm kernels, does any exchange setting move the 2-GPU
# fp16 step: default; sums after backward (--bucket-mb 0); sums in fp16; both; NCCL held to 2 thread
# blocks; the sums' stream below training's. One GPU first and last; same binary (d895600) and cache.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS; D=$G/dlbench
left() { echo $(( $1 - (SECONDS-T0) )); }
B="--device cuda --model resnet50 --batch-size 256 --precision fp16 --steps 40 --warmup-steps 8 --algorithm-cache $G/alg-mixed.json"
run() {  # name gpus extra-args...
  local N=$1 G2=$2; shift 2; [ $(left 280) -lt 12 ] && { echo "$N skipped"; return; }
  local F=$OUT/r/$N-g$G2-$SECONDS
  timeout $(left 290) $D bench $B --gpus $G2 "$@" --json $F.json > $F.log 2>&1; local rc=$?
  echo "$N gpus=$G2 rc=$rc $(grep -o 'step median [0-9.]* ms' $F.log) $(grep -o '[0-9.]* img/s' $F.log | tail -1) $(grep -o 'SM median [0-9]* MHz.*' $F.log) ($((SECONDS-T0)) s)"
}
run one 1
run default 2
run after-backward 2 --bucket-mb 0
run fp16-sums 2 --allreduce-precision compute
run after-backward-fp16-sums 2 --bucket-mb 0 --allreduce-precision compute
run nccl-2-ctas 2 --nccl-max-ctas 2
run comm-low 2 --comm-priority low
run default 2
run one 1
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
