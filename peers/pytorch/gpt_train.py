#!/usr/bin/env python3
"""PyTorch GPT-2 peer of `dlbench train --model gpt2 --data DIR`: the same recipe on the same token files.

The model, optimizer and step are gpt.py's (nanoGPT's GPT-2, AdamW with betas 0.9 / 0.95 and weight decay
0.1 on matrices and embeddings, gradients clipped to norm 1, bf16 or fp16 autocast). What this adds is
dlbench train's recipe around them, so that the two loss curves can be laid side by side:

  * data: DIR/train.bin and DIR/val.bin as `dlbench tokenize` writes them (llm.c's 256-int32 header and
    uint16 tokens) or nanoGPT writes them (uint16 tokens alone);
  * windows as dlbench's TokenWindowSampler cuts them: each epoch, non-overlapping windows of seq_len + 1
    tokens, seq_len apart, starting at a random offset in [0, slack], visited in a random order; a step
    takes the next batch-size of them (full batches only);
  * learning rate: linear warm-up over 5% of the steps (at least 1, at most 700; the first step already at
    lr / W), then cosine to 0 at the last step (dlbench's LearningRateSchedule for GPT models);
  * validation loss at the end: mean cross-entropy in nats per token over every window of the val split
    (offset 0, in order, batches of batch-size; a short last batch filled up from the start, the mean of
    the batches' means).

The random draws (initialisation, window order) are PyTorch's and Python's, not dlbench's: the two runs
see the same data in a different order, so their curves agree within noise, not step by step.

    python3 peers/pytorch/gpt_train.py --model gpt2 --data DIR --device cuda --precision bf16 \\
        --batch-size 16 --steps 300 --json out.json
"""

import math
import os
import random
import sys
import time

try:
    import numpy as np
    import torch
except ImportError as error:
    print(f"pytorch gpt peer: PyTorch or NumPy is not installed ({error})", file=sys.stderr)
    sys.exit(3)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "common"))
import protocol  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt  # noqa: E402
from torch_common import make_grad_scaler, peak_memory_bytes  # noqa: E402

LLMC_MAGIC, LLMC_VERSION, LLMC_HEADER_INTS = 20240520, 1, 256


def read_tokens(path, vocab):
    """The uint16 tokens of one file (llm.c's header or none), checked against the vocabulary."""
    data = np.fromfile(path, dtype=np.uint8)
    if data.size == 0:
        raise SystemExit(f"pytorch gpt peer: {path}: empty")
    header = data[: LLMC_HEADER_INTS * 4].view(np.int32) if data.size >= LLMC_HEADER_INTS * 4 else None
    if header is not None and header[0] == LLMC_MAGIC:
        if header[1] != LLMC_VERSION:
            raise SystemExit(f"pytorch gpt peer: {path}: llm.c version {header[1]}, this peer reads 1")
        tokens = data[LLMC_HEADER_INTS * 4:]
        if tokens.size != 2 * int(header[2]):
            raise SystemExit(f"pytorch gpt peer: {path}: the header says {header[2]} tokens, the file holds "
                             f"{tokens.size / 2:g}")
    else:
        tokens = data
    if tokens.size % 2:
        raise SystemExit(f"pytorch gpt peer: {path}: odd length, not uint16 tokens")
    tokens = tokens.view(np.uint16).astype(np.int64)
    if tokens.max() >= vocab:
        raise SystemExit(f"pytorch gpt peer: {path}: token {tokens.max()} is past the vocabulary ({vocab})")
    return torch.from_numpy(tokens)


class Windows:
    """dlbench's TokenWindowSampler: non-overlapping windows of seq_len + 1 tokens, seq_len apart."""

    def __init__(self, tokens, seq_len):
        self.tokens, self.seq_len = tokens, seq_len
        self.count = (tokens.numel() - 1) // seq_len
        if self.count < 1:
            raise SystemExit(f"pytorch gpt peer: {tokens.numel()} tokens hold no window of {seq_len + 1}")
        self.slack = tokens.numel() - 1 - self.count * seq_len

    def epoch_starts(self, rng):
        offset = rng.randint(0, self.slack)
        order = list(range(self.count))
        rng.shuffle(order)
        return [offset + k * self.seq_len for k in order]

    def batch(self, starts, device):
        rows = torch.stack([self.tokens[s: s + self.seq_len + 1] for s in starts]).to(device, non_blocking=True)
        return rows[:, :-1], rows[:, 1:]


def learning_rate(step, steps, base_lr):
    warmup = min(max(steps // 20, 1), 700)
    if step < warmup:
        return base_lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def parse_args(argv=None):
    p = protocol.OneLineErrorParser(description="PyTorch GPT-2 peer of `dlbench train`: losses on token files.")
    p.add_argument("--model", choices=sorted(gpt.MODELS), default="gpt2")
    p.add_argument("--data", required=True, metavar="DIR", help="train.bin and val.bin (dlbench tokenize)")
    p.add_argument("--batch-size", type=protocol.positive_int, default=16, help="sequences per step")
    p.add_argument("--seq-len", type=protocol.positive_int, default=None, help="tokens per sequence")
    p.add_argument("--steps", type=protocol.positive_int, default=300, help="training steps")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (dlbench's default)")
    p.add_argument("--precision", choices=gpt.PRECISIONS, default="bf16")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--log-every", type=protocol.positive_int, default=50)
    p.add_argument("--json", metavar="FILE", default=None, help="write the result as one JSON object")
    p.add_argument("--seed", type=protocol.parse_int, default=0)
    args = p.parse_args(argv)
    context = gpt.MODELS[args.model][3]
    args.seq_len = args.seq_len or context
    if args.seq_len > context:
        p.error(f"--seq-len {args.seq_len}: {args.model} takes at most {context} tokens")
    if args.lr is None:
        args.lr = 2e-3 if args.model == "gpt-mini" else 6e-4
    for split in ("train.bin", "val.bin"):
        if not os.path.isfile(os.path.join(args.data, split)):
            p.error(f"--data {args.data}: no {split} (dlbench tokenize writes train.bin and val.bin)")
    return args


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    device = torch.device(args.device)
    layers, heads, width, context, vocab = gpt.MODELS[args.model]
    train = Windows(read_tokens(os.path.join(args.data, "train.bin"), vocab), args.seq_len)
    val = Windows(read_tokens(os.path.join(args.data, "val.bin"), vocab), args.seq_len)
    if train.count < args.batch_size:
        raise SystemExit(f"pytorch gpt peer: the train split holds {train.count} windows, fewer than a batch")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
    model = gpt.GPT(layers, heads, width, context, vocab).to(device).train()
    step_model = torch.compile(model) if args.compile else model
    optimizer = gpt.make_optimizer(model, device)
    scaler = make_grad_scaler() if args.precision == "fp16" else None

    losses, epoch, queue = [], 0, []
    started = time.perf_counter()
    for step in range(args.steps):
        if len(queue) < args.batch_size:
            queue = train.epoch_starts(rng)  # the rest of an epoch short of a batch is skipped, as dlbench
            epoch += 1
        starts, queue = queue[: args.batch_size], queue[args.batch_size:]
        tokens, targets = train.batch(starts, device)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, args.steps, args.lr)
        loss = gpt.train_step(model, step_model, optimizer, scaler, args.precision, device, tokens, targets)
        losses.append(float(loss.item()))
        if (step + 1) % args.log_every == 0 or step + 1 == args.steps:
            print(f"step {step + 1}/{args.steps} epoch {epoch} loss {losses[-1]:.4f}", flush=True)
    train_seconds = time.perf_counter() - started

    model.eval()
    starts = [k * args.seq_len for k in range(val.count)]
    batch_means = []
    with torch.no_grad():
        for first in range(0, val.count, args.batch_size):
            batch = [starts[(first + i) % val.count] for i in range(args.batch_size)]
            tokens, targets = val.batch(batch, device)
            with gpt.autocast_for(device, args.precision):
                batch_means.append(float(model(tokens, targets).item()))
    val_loss = sum(batch_means) / len(batch_means)
    print(f"val loss {val_loss:.4f} nats per token ({val_loss / math.log(2):.3f} bits) over {val.count} windows")
    result = {
        "framework": "pytorch",
        "framework_version": torch.__version__,
        "model": args.model,
        "precision": args.precision,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "steps": args.steps,
        "lr": args.lr,
        "compiled": args.compile,
        "epochs_begun": epoch,
        "train_windows": train.count,
        "val_windows": val.count,
        "losses": losses,
        "final_loss": losses[-1],
        "val_loss": val_loss,
        "train_seconds": train_seconds,
        "peak_memory_bytes": peak_memory_bytes(device),
        "date": protocol.utc_date(),
        "system": protocol.system_info(),
    }
    if args.json:
        protocol.write_json_atomically(args.json, result)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
