#!/usr/bin/env python3
"""PyTorch CPU training-step time for the networks of onednn_step_timing.cc (the peer for that program).

ResNet-50 v1.5 (torchvision) batch 16 at 224x224, 1000 classes; resnet20 (3 stages of 3 basic blocks,
16/32/64 channels, 1x1 projection shortcuts) batch 128 at 28x28x1, 10 classes. One step = forward, loss,
backward, SGD with momentum. Prints the min and median step time and images/s.

  /usr/bin/python3 bench/kernels/torch_step_timing.py [--threads 2] [--steps 5] [--net resnet50|resnet20|all]
                                                      [--layout nchw|nhwc|all]
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn
import torchvision


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.short is None else self.short(x)))


def resnet20(in_channels=1, classes=10):
    layers = [nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
    cin = 16
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        for b in range(3):
            layers.append(BasicBlock(cin, cout, stride if b == 0 else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes)]
    return nn.Sequential(*layers)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--net", default="all")
    ap.add_argument("--layout", default="all")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    nets = {"resnet50": (lambda: torchvision.models.resnet50(), 16, 3, 224, 1000),
            "resnet20": (resnet20, 128, 1, 28, 10)}
    print(f"# torch {torch.__version__}, {a.threads} threads, {a.steps} timed steps after 2 warm-up")
    for name, (make, batch, cin, size, classes) in nets.items():
        if a.net not in ("all", name):
            continue
        for layout in ("nchw", "nhwc"):
            if a.layout not in ("all", layout):
                continue
            fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
            model = make().to(memory_format=fmt).train()
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
            x = torch.randn(batch, cin, size, size).to(memory_format=fmt)
            labels = torch.randint(0, classes, (batch,))
            loss_fn = nn.CrossEntropyLoss()
            times, cpu_times = [], []
            for step in range(a.steps + 2):
                t0, c0 = time.perf_counter(), time.process_time()
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(model(x), labels)
                loss.backward()
                opt.step()
                if step >= 2:
                    times.append(time.perf_counter() - t0)
                    cpu_times.append(time.process_time() - c0)
            best, med = min(times), statistics.median(times)
            print(f"{name} {layout} batch {batch}: step min {best * 1e3:.1f} ms, median {med * 1e3:.1f} ms, "
                  f"{batch / best:.1f} img/s (best), {batch / med:.1f} img/s (median)", flush=True)
            print(f"  process CPU time per step: min {min(cpu_times) * 1e3:.1f} ms, "
                  f"median {statistics.median(cpu_times) * 1e3:.1f} ms", flush=True)


if __name__ == "__main__":
    main()
