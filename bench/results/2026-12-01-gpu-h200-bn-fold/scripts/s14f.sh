#!/usr/bin/env bash
# Session 13, call 6 (1 GPU): where the conv statistics test crashed (call 5: a segmentation fault in
# CudaConvTest.OutputStatisticsMatchTheOutput before its first plan): the test with each candidate engine
# logged and cuDNN's API log, a backtrace where gdb exists; and ResNet-50 fp16 at batch 8 and 32 (small
# shapes, the product path, auto).
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r; T0=$SECONDS; D=$G/dlbench
which gdb; echo "gdb: $?"
DLBENCH_LOG_LEVEL=debug CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=$OUT/r/cudnn-api.log timeout 120 $G/tests/test_backend_cuda --gtest_filter='*OutputStatistics*' > $OUT/r/test.log 2>&1; echo "test rc=$? ($((SECONDS-T0)) s)"
grep -E "conv statistics|built|\[plan\]|Failure|OK|FAILED|rel err" $OUT/r/test.log | tail -25
tail -c 3000 $OUT/r/cudnn-api.log
if which gdb >/dev/null; then timeout 120 gdb -batch -ex run -ex bt --args $G/tests/test_backend_cuda --gtest_filter='*OutputStatistics*' > $OUT/r/gdb.log 2>&1; grep -A25 "SIGSEGV" $OUT/r/gdb.log | head -40; fi
for B in 8 32; do
  DLBENCH_LOG_LEVEL=debug timeout 100 $D bench --device cuda --model resnet50 --batch-size $B --precision fp16 --steps 10 --warmup-steps 2 > $OUT/r/b$B.log 2>&1
  echo "batch $B rc=$? $(grep -o '[0-9.]* img/s' $OUT/r/b$B.log | tail -1) ($((SECONDS-T0)) s)"; grep -E "conv statistics" $OUT/r/b$B.log | tail -2
done
rm -f $OUT/r/core*
cd $OUT && tar czf all.tgz r && rm -rf r
echo "total $((SECONDS-T0)) s"
