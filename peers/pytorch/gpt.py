#!/usr/bin/env python3
"""PyTorch GPT-2 peer for dlbench: nanoGPT's model and step under `dlbench bench`'s protocol.

The model is GPT-2 as nanoGPT builds it (learned token and position embeddings, pre-LayerNorm blocks,
nn.Linear with biases, F.scaled_dot_product_attention with is_causal, GELU in its tanh form, the head
tied to the token embedding, the vocabulary padded to 50,304), initialised as GPT-2 (N(0, 0.02), the
residual projections scaled by 1/sqrt(2 L)). One step: forward under autocast (bf16 or fp16; tf32 and
fp32 without), mean cross-entropy over B x T tokens, backward (through the gradient scaler for fp16),
gradient clipping to a global norm of 1, AdamW (betas 0.9 / 0.95, eps 1e-8, weight decay 0.1 on matrices
and embeddings only; fused on CUDA). The measuring protocol is dlbench's:

  * the tokens and targets are random, made once on the device and reused at every step;
  * `--warmup-steps` steps run first and are not timed (torch.compile compiles there);
  * each timed step ends with a device synchronize; throughput = tokens in the timed window / the
    window's wall time;
  * on CUDA, the GPU energy of the window is read from NVML's counter where the driver has it.

Standard library plus torch only. Exits with status 3 when PyTorch cannot be imported, 2 on a bad flag.

    python3 peers/pytorch/gpt.py --model gpt-mini --batch-size 4 --seq-len 64 --steps 3
    python3 peers/pytorch/gpt.py --model gpt2 --device cuda --precision bf16 --batch-size 16 --compile \\
        --steps 30 --warmup-steps 10 --json out.json
"""

import contextlib
import inspect
import math
import os
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torch.utils.checkpoint
except ImportError as error:
    print(f"pytorch gpt peer: PyTorch is not installed ({error})", file=sys.stderr)
    sys.exit(3)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "common"))
import protocol  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import make_grad_scaler, peak_memory_bytes  # noqa: E402

# name: layers, heads, width, context, vocabulary (dlbench's src/models/gpt.h)
MODELS = {
    "gpt2": (12, 12, 768, 1024, 50257),
    "gpt2-medium": (24, 16, 1024, 1024, 50257),
    "gpt2-large": (36, 20, 1280, 1024, 50257),
    "gpt2-xl": (48, 25, 1600, 1024, 50257),
    "gpt-mini": (4, 4, 128, 256, 256),
}
PRECISIONS = ["fp32", "tf32", "fp16", "bf16"]


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.c_fc = nn.Linear(width, 4 * width)
        self.c_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, heads, width, context, vocab, checkpoint_activations=False):
        super().__init__()
        self.vocab = vocab
        self.checkpoint_activations = checkpoint_activations
        padded = (vocab + 63) // 64 * 64
        self.wte = nn.Embedding(padded, width)
        self.wpe = nn.Embedding(context, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, tokens, targets):
        t = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(t, device=tokens.device))
        for block in self.h:
            if self.checkpoint_activations and torch.is_grad_enabled():
                # dlbench's --recompute: each block's activations are recomputed in its backward.
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)[..., : self.vocab]  # padded rows never predicted
        return F.cross_entropy(logits.float().reshape(-1, self.vocab), targets.reshape(-1))


def trained_parameters(layers, width, context, vocab):
    """GPT-2's published count (124,439,808 for gpt2): the unpadded vocabulary, the tied head once."""
    per_block = 2 * width + 3 * width * width + 3 * width + width * width + width + 2 * width + \
        4 * width * width + 4 * width + 4 * width * width + width
    return vocab * width + context * width + layers * per_block + 2 * width


def make_optimizer(model, device):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    extra = {}
    if device.type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters:
        extra["fused"] = True
    return torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, **extra)


def autocast_for(device, precision):
    """The forward's autocast: bf16 or fp16; tf32 and fp32 run without."""
    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    return torch.autocast(device_type=device.type, dtype=amp_dtype) if amp_dtype else contextlib.nullcontext()


def train_step(model, step_model, optimizer, scaler, precision, device, tokens, targets):
    """One step: forward under autocast, mean cross-entropy, backward (through the gradient scaler for
    fp16), gradients clipped to a global norm of 1, AdamW. `step_model` is `model` or its compiled form."""
    optimizer.zero_grad(set_to_none=True)
    with autocast_for(device, precision):
        loss = step_model(tokens, targets)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return loss


def parse_args(argv=None):
    p = protocol.OneLineErrorParser(description="PyTorch GPT-2 peer of `dlbench bench`: tokens/s on synthetic tokens.")
    p.add_argument("--model", choices=sorted(MODELS), default="gpt2")
    p.add_argument("--batch-size", type=protocol.positive_int, default=8, help="sequences per step")
    p.add_argument("--seq-len", type=protocol.positive_int, default=None, help="tokens per sequence (the context)")
    p.add_argument("--steps", type=protocol.positive_int, default=20, help="timed steps")
    p.add_argument("--warmup-steps", type=protocol.non_negative_int, default=5, help="untimed steps run first")
    p.add_argument("--precision", choices=PRECISIONS, default="bf16")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch >= 2.0)")
    p.add_argument("--checkpoint-activations", action="store_true",
                   help="recompute each block's activations in backward (torch.utils.checkpoint; "
                        "dlbench's --recompute)")
    p.add_argument("--threads", type=protocol.positive_int, default=None, help="CPU threads")
    p.add_argument("--json", metavar="FILE", default=None, help="write the result as one JSON object")
    p.add_argument("--seed", type=protocol.parse_int, default=0)
    args = p.parse_args(argv)
    context = MODELS[args.model][3]
    if args.seq_len is None:
        args.seq_len = context
    if args.seq_len > context:
        p.error(f"--seq-len {args.seq_len}: {args.model} takes at most {context} tokens")
    if args.device == "cpu" and args.precision in ("fp16", "tf32"):
        p.error(f"--precision {args.precision} needs --device cuda")
    return args


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
        torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
        device_name = f"cuda:{torch.cuda.get_device_name(device)}"
    else:
        device_name = "cpu"

    layers, heads, width, context, vocab = MODELS[args.model]
    model = GPT(layers, heads, width, context, vocab, args.checkpoint_activations).to(device).train()
    parameters = trained_parameters(layers, width, context, vocab)
    step_model = torch.compile(model) if args.compile else model
    optimizer = make_optimizer(model, device)
    scaler = make_grad_scaler() if args.precision == "fp16" else None

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    b, t = args.batch_size, args.seq_len
    tokens = torch.randint(0, vocab, (b, t), device=device)
    targets = torch.randint(0, vocab, (b, t), device=device)
    print(f"{args.model}: {parameters:,} parameters, batch {b} x {t} tokens, {args.precision} on {device_name}"
          f"{', compiled' if args.compile else ''}")

    def step():
        return train_step(model, step_model, optimizer, scaler, args.precision, device, tokens, targets)

    started = time.perf_counter()
    for _ in range(args.warmup_steps):
        step()
    sync()
    warmup_seconds = time.perf_counter() - started
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    counter, energy_reason = protocol.open_energy_counter(device.type == "cuda", cuda_ordinal=device.index)
    energy_before = protocol.read_energy(counter)
    step_seconds = []
    window_start = time.perf_counter()
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        sync()
        step_seconds.append(time.perf_counter() - t0)
    window_seconds = time.perf_counter() - window_start
    energy_after = protocol.read_energy(counter)
    final_loss = float(loss.item())
    tokens_in_window = args.steps * b * t
    tokens_per_second = tokens_in_window / window_seconds
    energy, energy_reason = protocol.window_energy(counter, energy_reason, energy_before, energy_after)
    peak_memory = peak_memory_bytes(device)
    flops_per_token = 6 * parameters + 12 * layers * width * t
    result = {
        "framework": "pytorch",
        "framework_version": torch.__version__,
        "model": args.model,
        "parameters": parameters,
        "device": device_name,
        "precision": args.precision,
        "batch_size": b,
        "seq_len": t,
        "steps": args.steps,
        "warmup_steps": args.warmup_steps,
        "warmup_seconds": warmup_seconds,
        "compiled": args.compile,
        "checkpoint_activations": args.checkpoint_activations,
        "threads": torch.get_num_threads(),
        "final_loss": final_loss,
        "sequences_per_second": tokens_per_second / t,
        "images_per_second": tokens_per_second / t,
        "tokens_per_second": tokens_per_second,
        "tokens_per_second_per_device": tokens_per_second,
        "model_flops_per_token": flops_per_token,
        "step_ms": protocol.step_ms(step_seconds),
        "step_times_ms": protocol.step_times_ms(step_seconds),
        "window_seconds": window_seconds,
        "peak_memory_bytes": peak_memory,
        "energy_joules": energy,
        "energy_joules_per_token": None if energy is None else energy / tokens_in_window,
        "energy_note": energy_reason,
        "date": protocol.utc_date(),
        "system": protocol.system_info(),
    }
    print(f"{tokens_per_second:.0f} tokens/s ({tokens_per_second / t:.2f} sequences/s), "
          f"{flops_per_token * tokens_per_second / 1e12:.1f} TFLOP/s, final loss {final_loss:.4f}, "
          f"peak memory {peak_memory / 2**20:.1f} MiB")
    if args.json:
        protocol.write_json_atomically(args.json, result)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
