#!/usr/bin/env bash
# Session 14, call 7 (1 GPU): two binaries in one call: `dlbench-before` (945b65d, the CI clone's build) and
# `dlbench` (the working tree: the fused stem's forward walking strips of output rows separably, each
# input row loaded and normalised once). As call 6 otherwise.
# First the pool, stem and folded-shortcut tests; then before / after interleaved with one
# algorithm cache (fp16 three pairs, bf16 and tf32 one each); --per-layer fp16 with each.
G0=$(cd "$(dirname "$0")" && pwd); [ -f $G0/bins.tar.xz ] && tar xJf $G0/bins.tar.xz -C $G0
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS
timeout 100 $G/tests/test_backend_cuda --gtest_filter='*Pool*:*Stem*:*FoldedShortcut*' > $OUT/r/test_backend_cuda.log 2>&1; rc=$?
echo "test_backend_cuda rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/test_backend_cuda.log | head -3 | tr '\n' ' ') ($((SECONDS-T0)) s)"
grep -E "^\[  FAILED" $OUT/r/test_backend_cuda.log | head -12
timeout 60 $G/tests/test_gpu_model > $OUT/r/test_gpu_model.log 2>&1; echo "test_gpu_model rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/test_gpu_model.log | head -2 | tr '\n' ' ') ($((SECONDS-T0)) s)"
cp $G/alg-stats.json $OUT/r/alg.json
run() {  # binary precision
  local B=$1 P=$2; local F=$OUT/r/$P-$B-$SECONDS
  timeout 60 $G/$B bench --device cuda --model resnet50 --batch-size 256 --precision $P --steps 40 --warmup-steps 8 --algorithm-cache $OUT/r/alg.json --json $F.json > $F.log 2>&1; local rc=$?
  echo "$P $B rc=$rc $(grep -o 'step median [0-9.]* ms' $F.log) $(grep -o '[0-9.]* img/s' $F.log | tail -1) $(grep -o 'SM median [0-9]* MHz' $F.log) ($((SECONDS-T0)) s)"
  [ $rc -ne 0 ] && tail -3 $F.log
}
for rep in 1 2 3; do run dlbench-before fp16; run dlbench fp16; done
for P in bf16 tf32; do run dlbench-before $P; run dlbench $P; done
for B in dlbench-before dlbench; do
  timeout 60 $G/$B bench --device cuda --model resnet50 --batch-size 256 --precision fp16 --steps 3 --warmup-steps 1 --algorithm-cache $OUT/r/alg.json --per-layer > $OUT/r/perlayer-fp16-$B.txt 2>&1
  echo "per-layer $B rc=$? $(grep -E '^total' $OUT/r/perlayer-fp16-$B.txt) | $(grep -E '^avgpool' $OUT/r/perlayer-fp16-$B.txt | awk '{print $3, $4}') | bn1 $(grep -E '^bn1 ' $OUT/r/perlayer-fp16-$B.txt | awk '{print $3, $4}')"
done
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
