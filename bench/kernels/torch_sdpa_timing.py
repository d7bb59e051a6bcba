#!/usr/bin/env python3
"""PyTorch's causal scaled_dot_product_attention at GPT-2's shapes, per backend (the peer for
sdpa_engine_probe.cc), and beside it the same attention without the mask: how close each backend's causal
pass comes to half the unmasked one's time, the floor its skipped tiles allow.

Q, K and V are views of one [B, T, 3C] tensor, split and transposed to [B, H, T, D] as a nanoGPT-style
model makes them (the layout dlbench's attention reads). For each backend (flash, cuDNN, memory-efficient)
it prints the median forward time and the median backward time (forward and backward timed together,
less the forward) between CUDA events, with TFLOP/s counted as sdpa_engine_probe counts them: the causal
forward 2 B T^2 C, the backward 2.5 times that (without the mask twice as much).

  /opt/torch/.venv/bin/python3 bench/kernels/torch_sdpa_timing.py [--model gpt2-large] [--batch 16]
                                                                   [--reps 20] [--mask causal|none|both]
                                                                   [--seq-len 1024]
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

MODELS = {"gpt2": (768, 12), "gpt2-medium": (1024, 16), "gpt2-large": (1280, 20), "gpt2-xl": (1600, 25)}


def median_us(fn, reps):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return sorted(times)[len(times) // 2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=sorted(MODELS), default="gpt2-large")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--mask", choices=["causal", "none", "both"], default="causal")
    args = parser.parse_args()
    channels, heads = MODELS[args.model]
    B, T, D = args.batch, args.seq_len, channels // heads
    qkv = torch.randn(B, T, 3 * channels, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dout = torch.randn(B, heads, T, D, device="cuda", dtype=torch.bfloat16)
    forward_flops = 2.0 * B * T * T * channels

    def split():
        return [t.view(B, T, heads, D).transpose(1, 2) for t in qkv.split(channels, dim=2)]

    def forward_and_backward(causal):
        q, k, v = split()
        F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(dout)
        qkv.grad = None

    print(f"torch {torch.__version__} cuDNN {torch.backends.cudnn.version()} {args.model} batch {B} x {T}, "
          f"{heads} heads of {D}, bf16; median of {args.reps}")
    masks = {"causal": [True], "none": [False], "both": [True, False]}[args.mask]
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        times = {}
        for causal in masks:
            flops = forward_flops if causal else 2 * forward_flops
            label = f"{backend.name} {'causal' if causal else 'no mask'}"
            try:
                with sdpa_kernel([backend]):
                    q, k, v = split()
                    forward = median_us(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                        args.reps)
                    backward = median_us(lambda: forward_and_backward(causal), args.reps) - forward
            except RuntimeError as e:  # a backend that cannot take the shape says why
                print(f"{label:30s} not run: {str(e)[:160]}")
                continue
            times[causal] = (forward, backward)
            print(f"{label:30s} forward {forward:8.1f} us {flops / forward / 1e6:6.1f} TFLOP/s"
                  f"  backward {backward:8.1f} us {2.5 * flops / backward / 1e6:6.1f} TFLOP/s")
        if len(times) == 2:  # 0.5 would be the masked half skipped at no cost
            print(f"{backend.name:30s} causal / no mask: forward {times[True][0] / times[False][0]:.3f}"
                  f"  backward {times[True][1] / times[False][1]:.3f}")


if __name__ == "__main__":
    main()
