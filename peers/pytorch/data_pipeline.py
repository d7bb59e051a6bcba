#!/usr/bin/env python3
"""The input-pipeline peer of `dlbench data-bench`: torchvision's ImageFolder + DataLoader on the same files.

Training transform as the ImageNet reference: RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor +
Normalize, `--workers` worker processes, batches of `--batch-size`. Warm-up batches are dropped (worker
start-up), then the timed batches are counted: images per second in total and per worker, and the CPU
seconds the whole process tree spent per 1,000 images. Writes the same JSON keys as data-bench.

--decode cpu (default): PIL decoding in the workers, the torchvision default.
--decode gpu: the best a PyTorch user does without DALI: the workers only read the files' bytes;
torchvision.io.decode_jpeg(list, device="cuda") decodes the batch with nvJPEG, then torchvision's
transforms (v2) crop, resize and flip each image on the GPU (they take one image at a time: the images
differ in size), and the stacked batch is normalised and cast to --precision on the GPU, ready for a model.

  data_pipeline.py --data ROOT [--decode cpu|gpu] [--workers N] [--batch-size 256] [--batches 50]
                   [--warmup-batches 5] [--precision fp32|fp16|bf16] [--json F]
"""
import argparse
import json
import os
import resource
import sys
import time


def cpu_seconds():
    """User + system CPU seconds of this process and its finished children (the loader's workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def workers_cpu_seconds():
    """User + system CPU seconds of this process's live children (DataLoader workers), from /proc."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    try:
        children = open(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read().split()
    except OSError:
        return 0.0
    for pid in children:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return total


class FileBytes:
    """An ImageFolder's files as raw bytes and labels: nothing is decoded on the CPU."""

    def __init__(self, folder):
        self.samples = folder.samples

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        # Plain bytes cross from the workers by pickling; tensors would each take a file descriptor of
        # shared memory, which runs out with 256 of them per batch and several batches in flight.
        path, label = self.samples[i]
        with open(path, "rb") as f:
            return f.read(), label


def gpu_batches(a, torch, torchvision):
    """Yields batches decoded and transformed on the GPU (see --decode gpu)."""
    from torchvision import datasets
    from torchvision.transforms import v2
    folder = datasets.ImageFolder(a.data)
    crop = v2.Compose([v2.RandomResizedCrop(a.image_size, antialias=False), v2.RandomHorizontalFlip()])
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[a.precision]
    mean = torch.tensor([0.485, 0.456, 0.406], device="cuda").view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device="cuda").view(1, 3, 1, 1) * 255
    total = a.batch_size * (a.batches + a.warmup_batches + 2 * a.workers + 1)
    sampler = torch.utils.data.RandomSampler(folder, replacement=True, num_samples=total)
    loader = torch.utils.data.DataLoader(FileBytes(folder), batch_size=a.batch_size, sampler=sampler,
                                         num_workers=a.workers, collate_fn=lambda items: list(zip(*items)),
                                         drop_last=True, prefetch_factor=2 if a.workers > 0 else None)
    for encoded, labels in loader:
        encoded = [torch.frombuffer(bytearray(data), dtype=torch.uint8) for data in encoded]
        images = torchvision.io.decode_jpeg(encoded, mode=torchvision.io.ImageReadMode.RGB, device="cuda")
        batch = torch.stack([crop(image) for image in images]).float()
        batch = ((batch - mean) / std).to(dtype).contiguous(memory_format=torch.channels_last)
        yield batch, torch.tensor(labels, device="cuda")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--batches", type=int, default=50)
    p.add_argument("--warmup-batches", type=int, default=5)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--decode", choices=["cpu", "gpu"], default="cpu")
    p.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default="fp32", help="--decode gpu: the dtype")
    p.add_argument("--json")
    a = p.parse_args()
    try:
        import torch
        import torchvision
        from torchvision import datasets, transforms
    except ImportError as e:
        sys.exit(f"data_pipeline.py: {e}: install torch and torchvision")
    torch.set_num_threads(1)
    if a.decode == "gpu":
        if not torch.cuda.is_available():
            sys.exit("data_pipeline.py: --decode gpu needs a CUDA GPU")
        it = gpu_batches(a, torch, torchvision)
        warmup = max(a.warmup_batches, 2 * a.workers + 1)
        images = None
        finish = torch.cuda.synchronize
    else:
        transform = transforms.Compose([
            transforms.RandomResizedCrop(a.image_size),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ])
        data = datasets.ImageFolder(a.data, transform=transform)
        images = len(data)
        # Each worker has prefetch_factor (2) batches in flight from the start: until that backlog (made
        # while the warm-up waited) is consumed, batches arrive faster than the steady state, so the
        # warm-up covers it.
        warmup = max(a.warmup_batches, 2 * a.workers + 1)
        sampler = torch.utils.data.RandomSampler(data, replacement=True,
                                                 num_samples=a.batch_size * (a.batches + warmup))
        loader = torch.utils.data.DataLoader(data, batch_size=a.batch_size, sampler=sampler,
                                             num_workers=a.workers, pin_memory=False, drop_last=True,
                                             persistent_workers=False,
                                             prefetch_factor=2 if a.workers > 0 else None)
        it = iter(loader)
        finish = lambda: None
    for _ in range(warmup):
        next(it)
    finish()
    # The workers are running children: their CPU time is counted when they end, so the window's CPU time
    # is this process's own plus the workers' read from /proc while they live.
    cpu_before = cpu_seconds() + workers_cpu_seconds()
    start = time.perf_counter()
    for _ in range(a.batches):
        next(it)
    finish()
    seconds = time.perf_counter() - start
    cpu_used = cpu_seconds() + workers_cpu_seconds() - cpu_before
    rate = a.batches * a.batch_size / seconds
    workers = max(1, a.workers)
    per_1000 = 1000 * cpu_used / (a.batches * a.batch_size)
    print(f"torchvision {torchvision.__version__} ImageFolder + DataLoader, decode {a.decode}: {rate:.1f} img/s with "
          f"{workers} workers = {rate / workers:.1f} img/s per worker; {per_1000:.2f} CPU seconds per 1000 images")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"framework": "torchvision", "framework_version": torchvision.__version__, "data": a.data,
                       "decode": a.decode, "images": images, "transform": "train", "image_size": a.image_size,
                       "precision": a.precision if a.decode == "gpu" else "fp32",
                       "cpu_seconds_per_1000_images": per_1000,
                       "batch_size": a.batch_size, "batches": a.batches, "threads": workers,
                       "images_per_second": rate, "images_per_second_per_thread": rate / workers}, f, indent=2)


if __name__ == "__main__":
    main()
