#!/usr/bin/env bash
# Session 6, call 1 (2 GPUs): the GPU checks not run yet (shared search cache across GPUs, digests across
# processes, --algorithm-cache reuse); then fp16 at 1 GPU on each GPU and at 2 GPUs, the new bucket plan
# (dlbench) against the old one (dlbench-old), interleaved; then one traced 2-GPU run.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; L=$OUT/logs; T0=$SECONDS
nvidia-smi -L; nvidia-smi topo -m | head -4
mkdir -p $G/bin && cp $G/tests/test_backend_cuda $G/dlbench $G/bin/
echo "== checks"
ONLY='cuda_ops|digest|same_algorithms|algorithm_cache' BIN=$G/bin LOGS=$L/checks bash $G/gpu_checks.sh 2>&1 | tail -30
$G/bin/test_backend_cuda --gtest_filter='*Share*' 2>&1 | grep -E "OK|FAIL|SKIP" | head
echo "== scaling ($((SECONDS-T0)) s)"
nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 1000 > $L/smi.csv 2>&1 &
SMI=$!
A=$L/alg.json
B="bench --device cuda --model resnet50 --batch-size 256 --steps 60 --warmup-steps 10 --log-every 1000 --precision fp16 --algorithm-cache $A"
pt() { # name, binary, args...
  local name=$1 bin=$2; shift 2
  (( SECONDS - T0 > 520 )) && { echo "$name skipped (time)"; return; }
  timeout 60 $G/$bin $B "$@" --json $OUT/r/$name.json > $L/$name.log 2>&1; local rc=$?
  echo "$name rc=$rc $(grep -oE '"images_per_second": [0-9.]+' $OUT/r/$name.json 2>/dev/null) $(grep -o 'step median [0-9.]* ms' $L/$name.log | head -1) $(grep -o 'digest [0-9a-f]*' $L/$name.log) $(grep -o 'seconds_to_first_timed_step": [0-9.]*' $OUT/r/$name.json) t=$((SECONDS-T0))"
}
pt warm dlbench --steps 5 --gpus 2
for rep in a b c; do
  pt g0-$rep dlbench
  CUDA_VISIBLE_DEVICES=1 pt g1-$rep dlbench
  pt two-new-$rep dlbench --gpus 2
  pt two-old-$rep dlbench-old --gpus 2
  pt two-new-half-$rep dlbench --gpus 2 --allreduce-precision compute
done
pt trace dlbench --gpus 2 --steps 12 --trace $OUT/r/trace.json --trace-steps 8:10
pt trace-old dlbench-old --gpus 2 --steps 12 --trace $OUT/r/trace-old.json --trace-steps 8:10
kill $SMI
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
