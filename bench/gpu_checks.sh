#!/usr/bin/env bash
# The GPU half of the test suite, for a machine with a GPU (CI has none): the CUDA backend's op tests, the
# kernels' tests, one ResNet-50 step and one gpt-mini step (fused and not) against oneDNN, compute-sanitizer
# on a short ResNet-50 run and a gpt-mini fp8 one, gpt-mini on the GPL in bf16, fp16 and fp8 beating the text's byte entropy, and
# resnet20 on Fashion-MNIST to >= 90% test accuracy in fp32 and fp16, one
# epoch of it from JPEGs decoded on the GPU (every image there, > 80%; memcheck on the GPU pipeline),
# `--batch-size max` resolving to a batch that runs, the energy of the timed window read from NVML, and two
# processes choosing the same convolution algorithms, and --algorithm-cache reused by a second process, and
# a training run stopped by SIGINT saving first and resuming. Runs binaries built elsewhere.
#
# Environment: BIN (folder with dlbench and the test binaries; default build), DATA (Fashion-MNIST
# folder; default /usr/share/datasets/fashion-mnist), LOGS (where logs go; default a temporary folder),
# ONLY (an extended regular expression: run only the checks whose names match it; default all).
set -uo pipefail
BIN="${BIN:-build}"; DATA="${DATA:-/usr/share/datasets/fashion-mnist}"; LOGS="${LOGS:-$(mktemp -d)}"
ONLY="${ONLY:-.}"
mkdir -p "$LOGS"
failures=0
check() {  # check NAME CMD...: runs CMD, logs it, reports one line
  local name="$1"; shift
  [[ "$name" =~ $ONLY ]] || return 0
  local start=$SECONDS
  if "$@" >"$LOGS/$name.log" 2>&1; then
    echo "PASS $name ($((SECONDS - start)) s)"
  else
    echo "FAIL $name ($((SECONDS - start)) s)"; tail -n 25 "$LOGS/$name.log"; failures=$((failures + 1))
  fi
}
nvidia-smi -L
check cuda_ops "$BIN/test_backend_cuda"
check cuda_kernels "$BIN/test_backend_cuda_kernels"
check resnet50_step_vs_onednn "$BIN/test_gpu_model"
check memcheck_resnet50 compute-sanitizer --tool memcheck --error-exitcode 1 \
  "$BIN/dlbench" bench --device cuda --model resnet50 --batch-size 8 --steps 2 --warmup-steps 1 --cuda-graph false
# FP8's own kernels (quantization with the bias's column sums, the scales' product for alpha) on a GPT step.
check memcheck_gpt_mini_fp8 compute-sanitizer --tool memcheck --error-exitcode 1 \
  "$BIN/dlbench" bench --device cuda --model gpt-mini --precision fp8 --batch-size 4 --steps 2 --warmup-steps 1 \
  --cuda-graph false
for p in fp32 fp16; do
  check "fmnist_resnet20_$p" "$BIN/dlbench" train --device cuda --precision "$p" --model resnet20 --data "$DATA" \
    --epochs 4 --batch-size 128 --lr 0.2 --nesterov --weight-decay 5e-4 --lr-warmup-epochs 0.2 --log-every 200 \
    --json "$LOGS/fmnist_$p.json"
  check "fmnist_resnet20_${p}_reaches_90" python3 -c \
    "import json,sys; a=json.load(open('$LOGS/fmnist_$p.json'))['test_accuracy']; print(a); sys.exit(a < 0.90)"
  [[ -f "$LOGS/fmnist_resnet20_$p.log" ]] && echo "  $p: $(tail -1 "$LOGS/fmnist_resnet20_$p.log")"
done
# --decode gpu (nvJPEG on the JPEG engines, the batched augmentation): Fashion-MNIST exported as JPEG
# folders trains resnet20 with every image decoded on the GPU, evaluation included, and compute-sanitizer
# finds no memory error in the GPU pipeline.
JPEGS="$LOGS/fmnist-jpeg"; rm -rf "$JPEGS"
check export_fmnist_jpeg "$BIN/dlbench" export-images "$JPEGS" --data "$DATA"
check gpu_decode_resnet20_train "$BIN/dlbench" train --device cuda --model resnet20 --data "$JPEGS" --epochs 1 \
  --batch-size 128 --decode gpu --data-threads 4 --json "$LOGS/gpu_decode.json"
check gpu_decode_decoded_on_the_gpu python3 -c "
import json, sys
r = json.load(open('$LOGS/gpu_decode.json'))
print('decode', r['decode'], 'on the engines', r.get('images_decoded_on_gpu_engines'), 'by CUDA',
      r.get('images_decoded_on_gpu_cuda'), 'on the CPU', r['images_decoded_on_cpu'], 'accuracy', r['test_accuracy'])
sys.exit(not (r['decode'] == 'gpu' and r['images_decoded_on_cpu'] == 0 and r['test_accuracy'] > 0.8))"
check memcheck_gpu_decode compute-sanitizer --tool memcheck --error-exitcode 1 "$BIN/dlbench" data-bench \
  --data "$JPEGS/val" --decode gpu --data-threads 2 --batch-size 16 --batches 3 --warmup-batches 1
# GPT-2's kind of model on real text in mixed precision: gpt-mini trained byte-level on the GPL in bf16
# and in fp16 (dynamic loss scaling), its AdamW reading the BF16/FP16 gradients where the backward wrote
# them (one rank keeps no FP32 gradients), and in fp8 (the dense layers' GEMMs on FP8 codes, delayed
# scaling), must learn the byte contexts as the CPU test's fp32 run does: a validation loss 0.6 nats below
# the text's byte-frequency entropy.
GPL=/usr/share/common-licenses/GPL-3
check tokenize_gpl "$BIN/dlbench" tokenize "$GPL" -o "$LOGS/gpl"
for p in bf16 fp16 fp8; do
  check "gpt_mini_gpl_$p" "$BIN/dlbench" train --device cuda --precision "$p" --model gpt-mini --data "$LOGS/gpl" \
    --seq-len 64 --batch-size 16 --steps 600 --lr 3e-3 --log-every 200 --json "$LOGS/gpt_$p.json"
  check "gpt_mini_gpl_${p}_beats_the_unigram_entropy" python3 -c "
import collections, json, math, sys
text = open('$GPL', 'rb').read()
entropy = -sum(n / len(text) * math.log(n / len(text)) for n in collections.Counter(text).values())
v = json.load(open('$LOGS/gpt_$p.json'))['val_loss']
print('val loss', v, 'entropy', entropy)
sys.exit(not v < entropy - 0.6)"
done
# --batch-size max: a multiple of 8 at most the largest batch the plan fits, and the run at it succeeds;
# the result carries the window's energy where the driver has NVML's counter, and its clocks (gpu_clocks:
# a median SM clock within the GPU's range, shares of samples between 0 and 1).
check batch_max_resnet50_fp16 "$BIN/dlbench" bench --device cuda --model resnet50 --precision fp16 \
  --batch-size max --steps 3 --warmup-steps 2 --json "$LOGS/batch_max.json"
check batch_max_is_resolved_and_energy_and_clocks_read python3 -c "
import json, sys
r = json.load(open('$LOGS/batch_max.json'))
b, largest, c = r['batch_size'], r['largest_batch'], r.get('gpu_clocks') or {}
print('batch', b, 'largest', largest, 'J/img', r.get('energy_joules_per_image'), 'clocks', c)
sys.exit(not (r['config'].get('batch_size_max') and b % 8 == 0 and 0 < b <= largest
              and (r.get('energy_joules_per_image') or 0) > 0
              and 100 < (c.get('sm_clock_median_mhz') or 0) < 5000 and c.get('samples_rank0', 0) >= 2
              and 0 <= c.get('power_capped_fraction', -1) <= 1))"
# The algorithm search is repeatable: two processes of the same ResNet-50 fp16 run, each searching afresh
# (no cache), choose the same algorithms (one algorithm_digest), so their speed does not depend on which
# one ran. The close calls (candidates within 5%) are printed.
for run in a b; do
  check "digest_resnet50_fp16_$run" "$BIN/dlbench" bench --device cuda --model resnet50 --precision fp16 \
    --steps 2 --warmup-steps 1 --algorithm-cache none --json "$LOGS/digest_$run.json"
done
check same_algorithms_in_two_processes python3 -c "
import json, sys
a, b = (json.load(open('$LOGS/digest_%s.json' % r)) for r in 'ab')
print('digests', a['algorithm_digest'], b['algorithm_digest'])
for c in a['algorithm_search']['close_calls']: print('  close:', c)
sys.exit(not (a['algorithm_digest'] and a['algorithm_digest'] == b['algorithm_digest']))"
# With no flag, the cache lives in the user's cache folder: a second run starts in seconds.
rm -rf "$LOGS/xdg"
for run in first second; do
  check "default_cache_$run" env XDG_CACHE_HOME="$LOGS/xdg" "$BIN/dlbench" bench --device cuda \
    --model resnet50 --precision fp16 --steps 2 --warmup-steps 1 --json "$LOGS/default_cache_$run.json"
done
check default_cache_second_start_under_5s python3 -c "
import json, sys
a, b = (json.load(open('$LOGS/default_cache_%s.json' % r)) for r in ('first', 'second'))
ta, tb = a['seconds_to_first_timed_step'], b['seconds_to_first_timed_step']
print('first timed step after', ta, 'and', tb, 's; read', b['algorithm_search']['choices_read'], 'choices')
sys.exit(not (a['algorithm_digest'] == b['algorithm_digest'] and tb < 5 and b['algorithm_search']['choices_read'] > 0))"
# --algorithm-cache: the first run records its choices, the second reads them (the same digest) and skips
# the searches (an earlier first timed step).
rm -f "$LOGS/algorithms.json"
for run in first second; do
  check "algorithm_cache_$run" "$BIN/dlbench" bench --device cuda --model resnet50 --precision fp16 \
    --steps 2 --warmup-steps 1 --algorithm-cache "$LOGS/algorithms.json" --json "$LOGS/cache_$run.json"
done
check algorithm_cache_reused python3 -c "
import json, sys
a, b = (json.load(open('$LOGS/cache_%s.json' % r)) for r in ('first', 'second'))
ta, tb = a['seconds_to_first_timed_step'], b['seconds_to_first_timed_step']
print('digests', a['algorithm_digest'], b['algorithm_digest'], 'first step after', ta, tb, 's')
sys.exit(not (a['algorithm_digest'] == b['algorithm_digest'] and tb < ta))"
# SIGINT during a GPU training run (the whole step as a CUDA graph): it stops after the step under way,
# saves its checkpoint first, says where (exit 130), leaves no temporary, and the checkpoint resumes; a
# resume with another batch is refused naming the flag.
stop_and_resume() {
  local dir="$LOGS/stop"; rm -rf "$dir"; mkdir -p "$dir"
  "$BIN/dlbench" train --device cuda --precision fp16 --model resnet20 --data "$DATA" --batch-size 128 \
    --steps 100000 --log-every 20 --checkpoint "$dir/run.ckpt" >"$dir/out" 2>"$dir/err" &
  local pid=$!
  for _ in $(seq 600); do grep -q "step 40/" "$dir/out" && break; sleep 0.1; done
  kill -INT "$pid"; wait "$pid"; local rc=$?
  cat "$dir/err"
  [[ $rc -eq 130 ]] && grep -q "stopped by SIGINT after step" "$dir/err" && [[ -f "$dir/run.ckpt" ]] &&
    [[ -z "$(ls -A "$dir" | grep dlbench-tmp)" ]] || return 1
  "$BIN/dlbench" train --device cuda --precision fp16 --model resnet20 --data "$DATA" --batch-size 128 \
    --steps 300 --resume "$dir/run.ckpt" --eval-images 1000 | tail -2 || return 1
  local refused
  refused=$("$BIN/dlbench" train --device cuda --precision fp16 --model resnet20 --data "$DATA" \
    --batch-size 64 --steps 300 --resume "$dir/run.ckpt" 2>&1) && return 1
  echo "$refused"
  grep -q "written with --batch-size 128" <<<"$refused"
}
check stop_saves_and_resumes_on_the_gpu stop_and_resume
echo "$failures failed"
exit $((failures > 0))
