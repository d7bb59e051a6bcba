#!/usr/bin/env bash
# Session 11, call 3 (1 GPU): the stem pool's backward by 2x2 blocks: pool tests; fp16/tf32 steps, previous
# (b69e588) vs new, interleaved, same algorithm cache; --per-layer; then dlbench and PyTorch DDP at 1 GPU
# (fp16, tf32) through sweep/compare into one results file.
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; T0=$SECONDS
left() { echo $(( $1 - (SECONDS-T0) )); }
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader
timeout 60 $G/tests/test_backend_cuda --gtest_filter='*Pool*' > $OUT/r/pool-tests.log 2>&1; echo "pool tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/pool-tests.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED" $OUT/r/pool-tests.log | head
B="--device cuda --model resnet50 --batch-size 256"
run() {  # version precision
  local V=$1 P=$2 BIN=$G/dlbench; [ $V = prev ] && BIN=$G/dlbench.prev
  [ $(left 300) -lt 15 ] && { echo "$V $P skipped"; return; }
  timeout $(left 310) $BIN bench $B --precision $P --steps 40 --warmup-steps 8 --algorithm-cache $G/alg-mixed.json --json $OUT/r/$P-$V-$SECONDS.json > $OUT/r/$P-$V-$SECONDS.log 2>&1; local rc=$?
  local F=$(ls -t $OUT/r/$P-$V-*.log | head -1)
  echo "$P $V rc=$rc $(grep -o 'step median [0-9.]* ms' $F) $(grep -o '[0-9.]* img/s' $F | tail -1) $(grep -o 'digest [0-9a-f]*' $F) $(grep -o 'SM median [0-9]* MHz' $F) ($((SECONDS-T0)) s)"
}
for R in 1 2; do for P in fp16 tf32; do run prev $P; run new $P; done; done
for P in tf32 fp16; do
  [ $(left 300) -lt 25 ] && continue
  timeout $(left 310) $G/dlbench bench $B --precision $P --steps 3 --warmup-steps 1 --algorithm-cache $G/alg-mixed.json --per-layer > $OUT/r/perlayer-$P.txt 2>&1
  echo "per-layer $P rc=$? $(grep -E '^total' $OUT/r/perlayer-$P.txt | tr -s ' ') $(grep -E '^maxpool' $OUT/r/perlayer-$P.txt | cut -c1-70 | tr -s ' ') ($((SECONDS-T0)) s)"
done
R=$OUT/r/table.jsonl; cp $G/alg-mixed.json $R.algorithms.json
G1="--results $R --device cuda --models resnet50 --batch-sizes 256 --steps 60 --warmup-steps 10"
echo "== dlbench ($((SECONDS-T0)) s)"
timeout $(left 380) $G/dlbench sweep $G1 --precisions fp16,tf32 --gpus 1 --launcher threads --point-timeout 60 2>&1 | grep -E "img/s|failed"
echo "== pytorch ($((SECONDS-T0)) s)"
timeout $(left 560) $G/dlbench compare $G1 --precisions fp16,tf32 --gpus 1 --frameworks pytorch --point-timeout 100 2>&1 | grep -E "img/s|failed"
$G/dlbench report $R -o $OUT/r/report > /dev/null 2>&1; echo "report rc=$?"
cp -r $R.logs $OUT/logs/ 2>/dev/null; rm -rf $R.logs
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
