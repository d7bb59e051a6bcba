#!/usr/bin/env bash
# Session 7, call 2 (2 GPUs): NCCL symmetric windows (--nccl-symmetric). Exactness (test_dist), comm-bench
# with and without, the fp16 ResNet-50 step with and without (interleaved, one algorithm cache), mpirun,
# and Fashion-MNIST resnet20 fp16 on 2 GPUs with it.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; L=$OUT/logs; T0=$SECONDS
echo "== test_dist NcclThreads"; timeout 120 $G/tests/test_dist --gtest_filter='*NcclThreads*' > $L/test_dist.log 2>&1; echo "rc=$? $(grep -E '^\[  (PASSED|FAILED) ' $L/test_dist.log | tr '\n' ' ')"; grep -E "FAILED|Failure" $L/test_dist.log | head -5
CB="$G/dlbench comm-bench --device cuda --gpus 2 --dtype f16 --min-bytes 1048576 --max-bytes 268435456 --iters 20"
echo "== comm-bench ring"; timeout 60 $CB --json $OUT/r/cb-ring.json 2>&1 | tail -10
echo "== comm-bench symmetric"; timeout 60 $CB --nccl-symmetric --json $OUT/r/cb-sym.json 2>&1 | tail -10
A=$L/alg.json; cp $G/alg.json $A
B="bench --device cuda --model resnet50 --batch-size 256 --warmup-steps 10 --log-every 1000 --precision fp16 --algorithm-cache $A"
pt() { # name, args...
  local name=$1; shift
  (( SECONDS - T0 > 480 )) && { echo "$name skipped (time)"; return; }
  timeout 60 $G/dlbench $B "$@" --json $OUT/r/$name.json > $L/$name.log 2>&1; local rc=$?
  echo "$name rc=$rc $(grep -oE '"images_per_second": [0-9.]+' $OUT/r/$name.json 2>/dev/null) $(grep -o 'step median.*' $L/$name.log | head -1) | $(grep -o 'alone: [0-9.]* ms' $L/$name.log) t=$((SECONDS-T0))"
  [[ $rc == 0 ]] || tail -3 $L/$name.log
}
S="--steps 60"
for rep in a b; do
  pt one-$rep $S
  pt ring-$rep $S --gpus 2
  pt sym-$rep $S --gpus 2 --nccl-symmetric
  pt ring-end-half-$rep $S --gpus 2 --bucket-mb 0 --allreduce-precision compute
  pt sym-end-half-$rep $S --gpus 2 --bucket-mb 0 --allreduce-precision compute --nccl-symmetric
  pt sym-half-$rep $S --gpus 2 --allreduce-precision compute --nccl-symmetric
done
echo "== mpirun symmetric ($((SECONDS-T0)) s)"
timeout 90 mpirun --allow-run-as-root -np 2 --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE $G/dlbench $B $S --nccl-symmetric --json $OUT/r/mpi-sym.json > $L/mpi-sym.log 2>&1; echo "mpi-sym rc=$? $(grep -o 'step median.*' $L/mpi-sym.log | head -1)"
echo "== fmnist resnet20 fp16 2 GPUs symmetric ($((SECONDS-T0)) s)"
timeout 120 $G/dlbench train --device cuda --gpus 2 --nccl-symmetric --precision fp16 --model resnet20 --data $G/data \
  --epochs 2 --batch-size 128 --lr 0.2 --nesterov --weight-decay 5e-4 --lr-warmup-epochs 0.2 --log-every 200 --json $OUT/r/fmnist-sym.json > $L/fmnist-sym.log 2>&1
echo "rc=$? $(tail -2 $L/fmnist-sym.log)"
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
