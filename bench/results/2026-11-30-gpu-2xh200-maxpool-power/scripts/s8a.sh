#!/usr/bin/env bash
# Next session, call 1 (1 GPU is enough): what a graph fork costs (graph_fork_cost), and gpu_clocks in a
# dlbench result and in the PyTorch peer's (first run of both on a GPU).
source "$(dirname "$0")/env.sh"
mkdir -p $OUT/r $OUT/logs; L=$OUT/logs; T0=$SECONDS
echo "== graph_fork_cost"; timeout 60 $G/graph_fork_cost 2>&1 | tee $L/fork.txt
timeout 60 $G/graph_fork_cost --side-ctas 8 --side-us 50 2>&1 | tail -6
timeout 60 $G/graph_fork_cost --work-us 50 --forks 18 2>&1 | tail -6
echo "== dlbench gpu_clocks ($((SECONDS-T0)) s)"
timeout 90 $G/dlbench bench --device cuda --model resnet50 --batch-size 256 --precision fp16 --steps 40 --warmup-steps 10 \
  --algorithm-cache $G/alg.json --json $OUT/r/clocks.json 2>&1 | grep -E "step median|GPU clocks|energy"
python3 -c "import json; print(json.load(open('$OUT/r/clocks.json'))['gpu_clocks'])"
echo "== pytorch gpu_clocks ($((SECONDS-T0)) s)"
timeout 150 python3 $G/../../peers/pytorch/train.py --device cuda --model resnet50 --precision fp16 --batch-size 256 \
  --steps 30 --warmup-steps 10 --channels-last --json $OUT/r/torch.json 2>&1 | tail -3
python3 -c "import json; print(json.load(open('$OUT/r/torch.json'))['gpu_clocks'])"
cd $OUT && tar czf all.tgz logs r && rm -rf logs r
echo "total $((SECONDS-T0)) s"
