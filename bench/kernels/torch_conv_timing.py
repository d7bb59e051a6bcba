#!/usr/bin/env python3
"""PyTorch's CPU convolutions (mkldnn) on the shapes of onednn_conv_timing.cc, for the comparison.

Same output columns: min over reps of fwd / bwd_data / bwd_weights ms per op, and per-network totals
weighted by layer counts. --clock cpu uses process CPU time (run with OMP_WAIT_POLICY=passive), which
time slicing on a shared machine does not inflate.

  /usr/bin/python3 bench/kernels/torch_conv_timing.py [--threads N] [--reps N] [--net resnet50|resnet20|all]
                                                      [--layout nchw|nhwc|all] [--clock wall|cpu]
"""
import argparse
import time

import torch

RESNET50 = [  # count, n, c, h, w, k, r, stride, pad
    (1, 16, 3, 224, 224, 64, 7, 2, 3),
    (1, 16, 64, 56, 56, 64, 1, 1, 0), (3, 16, 64, 56, 56, 64, 3, 1, 1),
    (4, 16, 64, 56, 56, 256, 1, 1, 0), (2, 16, 256, 56, 56, 64, 1, 1, 0),
    (1, 16, 256, 56, 56, 128, 1, 1, 0), (1, 16, 128, 56, 56, 128, 3, 2, 1),
    (1, 16, 256, 56, 56, 512, 1, 2, 0), (4, 16, 128, 28, 28, 512, 1, 1, 0),
    (3, 16, 512, 28, 28, 128, 1, 1, 0), (3, 16, 128, 28, 28, 128, 3, 1, 1),
    (1, 16, 512, 28, 28, 256, 1, 1, 0), (1, 16, 256, 28, 28, 256, 3, 2, 1),
    (1, 16, 512, 28, 28, 1024, 1, 2, 0), (6, 16, 256, 14, 14, 1024, 1, 1, 0),
    (5, 16, 1024, 14, 14, 256, 1, 1, 0), (5, 16, 256, 14, 14, 256, 3, 1, 1),
    (1, 16, 1024, 14, 14, 512, 1, 1, 0), (1, 16, 512, 14, 14, 512, 3, 2, 1),
    (1, 16, 1024, 14, 14, 2048, 1, 2, 0), (3, 16, 512, 7, 7, 2048, 1, 1, 0),
    (2, 16, 2048, 7, 7, 512, 1, 1, 0), (2, 16, 512, 7, 7, 512, 3, 1, 1),
]
RESNET20 = [
    (1, 128, 1, 28, 28, 16, 3, 1, 1), (6, 128, 16, 28, 28, 16, 3, 1, 1),
    (1, 128, 16, 28, 28, 32, 3, 2, 1), (1, 128, 16, 28, 28, 32, 1, 2, 0),
    (5, 128, 32, 14, 14, 32, 3, 1, 1), (1, 128, 32, 14, 14, 64, 3, 2, 1),
    (1, 128, 32, 14, 14, 64, 1, 2, 0), (5, 128, 64, 7, 7, 64, 3, 1, 1),
]


def min_ms(fn, reps, clock):
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--net", default="all")
    ap.add_argument("--layout", default="all")
    ap.add_argument("--clock", default="wall")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    nets = [("resnet50", RESNET50), ("resnet20", RESNET20)]
    nets = [n for n in nets if a.net in ("all", n[0])]
    layouts = [l for l in ("nchw", "nhwc") if a.layout in ("all", l)]
    print(f"# torch {torch.__version__} conv timing: {a.threads} threads, min of {a.reps}, {a.clock} ms per op")
    for layout in layouts:
        fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
        for name, shapes in nets:
            total = 0.0
            for count, n, c, h, w, k, r, s, p in shapes:
                x = torch.randn(n, c, h, w).to(memory_format=fmt)
                wt = torch.randn(k, c, r, r).to(memory_format=fmt)
                y = torch.nn.functional.conv2d(x, wt, None, s, p)
                dy = torch.randn_like(y).to(memory_format=fmt)
                conv_bwd = torch.ops.aten.convolution_backward
                args = (dy, x, wt, None, [s, s], [p, p], [1, 1], False, [0, 0], 1)
                with torch.no_grad():
                    f = min_ms(lambda: torch.nn.functional.conv2d(x, wt, None, s, p), a.reps, clock)
                    bd = min_ms(lambda: conv_bwd(*args, [True, False, False]), a.reps, clock)
                    bw = min_ms(lambda: conv_bwd(*args, [False, True, False]), a.reps, clock)
                t = f + bw + (0 if c <= 3 else bd)
                total += count * t
                print(f"{name:8s} {layout:4s} {n}x{c} {h}x{w} -> {k} {r}x{r} /{s} (x{count})".ljust(48) +
                      f"torch {f:8.2f} {bd:8.2f} {bw:8.2f} {t:8.2f}", flush=True)
            print(f"TOTAL {name:8s} {layout:4s} torch {total:10.1f} ms per fwd+bwd of all convs", flush=True)


if __name__ == "__main__":
    main()
