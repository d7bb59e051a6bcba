#!/usr/bin/env bash
# Session 6, call 5 (2 GPUs): the copy-engine all-reduce (--allreduce-engine copy): exact sums (test_dist),
# then fp16/bf16/tf32 at 2 GPUs against NCCL and 1 GPU, interleaved; a trace; Fashion-MNIST on 2 GPUs.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs $OUT/t; L=$OUT/logs; T0=$SECONDS
A=$L/alg.json; cp $G/alg.json $A
timeout 120 $G/tests/test_dist --gtest_filter='*NcclThreads*' > $L/test_dist.log 2>&1; echo "test_dist rc=$?"; grep -E "OK \]|FAILED|Failure|expected" $L/test_dist.log | head -20
sm() { echo "$1 $(grep -o 'step median.*' $L/$1.log | head -1) | $(grep -o 'alone: [0-9.]* ms' $L/$1.log) $(grep -o 'graph: [a-z]*' $L/$1.log) $(grep -o 'summed in .* by [a-z ]*' $L/$1.log) t=$((SECONDS-T0))"; grep -iE "error|fail" $L/$1.log | head -3; }
pt() { local name=$1 prec=$2; shift 2
  (( SECONDS - T0 > 480 )) && { echo "$name skipped (time)"; return; }
  timeout 90 $G/dlbench bench --device cuda --model resnet50 --batch-size 256 --warmup-steps 10 --log-every 1000 --precision $prec --algorithm-cache $A "$@" --json $OUT/r/$name.json > $L/$name.log 2>&1; sm $name; }
pt first-copy fp16 --steps 30 --gpus 2 --allreduce-engine copy
for rep in a b; do
  for p in fp16 bf16; do
    pt $p-one-$rep $p --steps 60
    pt $p-nccl-$rep $p --steps 60 --gpus 2
    pt $p-copy-$rep $p --steps 60 --gpus 2 --allreduce-engine copy
    pt $p-copy-half-$rep $p --steps 60 --gpus 2 --allreduce-engine copy --allreduce-precision compute
  done
  pt tf32-one-$rep tf32 --steps 40
  pt tf32-copy-$rep tf32 --steps 40 --gpus 2 --allreduce-engine copy
done
pt trace-copy fp16 --steps 14 --gpus 2 --allreduce-engine copy --trace $OUT/t/trace-copy.json --trace-steps 12:14
(( SECONDS - T0 < 500 )) && { timeout 90 $G/dlbench train --device cuda --precision fp16 --model resnet20 --data $G/data --epochs 2 --batch-size 128 --lr 0.2 --nesterov --weight-decay 5e-4 --lr-warmup-epochs 0.2 --log-every 200 --gpus 2 --allreduce-engine copy --json $OUT/r/fmnist-copy.json > $L/fmnist-copy.log 2>&1; echo "fmnist copy rc=$? $(tail -n 2 $L/fmnist-copy.log | head -1)"; grep -o '"test_accuracy": [0-9.]*' $OUT/r/fmnist-copy.json; }
cd $OUT && tar czf all.tgz logs r t && rm -rf logs r t
echo "total $((SECONDS-T0)) s"
