#!/usr/bin/env python3
"""The input-pipeline peer of `dlbench data-bench`: torchvision's ImageFolder + DataLoader on the same files.

Training transform as the ImageNet reference: RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor +
Normalize (PIL decoding, the torchvision default), `--workers` worker processes, batches of `--batch-size`.
Warm-up batches are dropped (worker start-up), then the timed batches are counted: images per second in
total and per worker. Writes the same JSON keys as data-bench.

  data_pipeline.py --data ROOT [--workers N] [--batch-size 256] [--batches 50] [--warmup-batches 5] [--json F]
"""
import argparse
import json
import os
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--batches", type=int, default=50)
    p.add_argument("--warmup-batches", type=int, default=5)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--json")
    a = p.parse_args()
    try:
        import torch
        import torchvision
        from torchvision import datasets, transforms
    except ImportError as e:
        sys.exit(f"data_pipeline.py: {e}: install torch and torchvision")
    torch.set_num_threads(1)
    transform = transforms.Compose([
        transforms.RandomResizedCrop(a.image_size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ])
    data = datasets.ImageFolder(a.data, transform=transform)
    # Each worker has prefetch_factor (2) batches in flight from the start: until that backlog (made while
    # the warm-up waited) is consumed, batches arrive faster than the steady state, so the warm-up covers it.
    warmup = max(a.warmup_batches, 2 * a.workers + 1)
    sampler = torch.utils.data.RandomSampler(data, replacement=True, num_samples=a.batch_size * (a.batches + warmup))
    loader = torch.utils.data.DataLoader(data, batch_size=a.batch_size, sampler=sampler, num_workers=a.workers,
                                         pin_memory=False, drop_last=True, persistent_workers=False,
                                         prefetch_factor=2 if a.workers > 0 else None)
    it = iter(loader)
    for _ in range(warmup):
        next(it)
    start = time.perf_counter()
    for _ in range(a.batches):
        next(it)
    seconds = time.perf_counter() - start
    rate = a.batches * a.batch_size / seconds
    workers = max(1, a.workers)
    print(f"torchvision {torchvision.__version__} ImageFolder + DataLoader: {rate:.1f} img/s with {workers} workers "
          f"= {rate / workers:.1f} img/s per worker")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"framework": "torchvision", "framework_version": torchvision.__version__, "data": a.data,
                       "images": len(data), "transform": "train", "image_size": a.image_size,
                       "batch_size": a.batch_size, "batches": a.batches, "threads": workers,
                       "images_per_second": rate, "images_per_second_per_thread": rate / workers}, f, indent=2)


if __name__ == "__main__":
    main()
