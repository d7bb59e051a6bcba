#!/usr/bin/env python3
"""Generates an ImageNet-like JPEG folder for the input-pipeline benchmark: ROOT/<class>/<n>.JPEG.

Photo-like content, so that the files cost what photos cost to decode: smooth colour fields (a few random
sinusoids per channel), soft-edged blobs and sensor-like noise, 500x375 (or --width x --height; a quarter
of them in portrait), quality 90, 4:2:0 chroma subsampling as cameras write. Seeded: the same files every
time. Needs numpy and Pillow.

  make_photos.py ROOT [--count 4000] [--classes 10] [--width 500] [--height 375] [--quality 90] [--seed 1]
"""
import argparse
import multiprocessing
import os
import sys

import numpy as np
from PIL import Image


def photo(rng, width, height):
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    img = np.zeros((height, width, 3), np.float32)
    for c in range(3):
        base = rng.uniform(60, 190)
        field = np.full((height, width), base, np.float32)
        for _ in range(4):
            fx, fy = rng.uniform(0.002, 0.03, 2)
            phase = rng.uniform(0, 2 * np.pi)
            field += rng.uniform(10, 40) * np.sin(fx * x * 2 * np.pi + fy * y * 2 * np.pi + phase)
        img[..., c] = field
    for _ in range(rng.integers(3, 9)):
        cx, cy = rng.uniform(0, width), rng.uniform(0, height)
        r = rng.uniform(15, min(width, height) / 3)
        mask = np.clip(1.5 - np.hypot(x - cx, y - cy) / r, 0, 1)[..., None]
        img = img * (1 - mask) + rng.uniform(0, 255, 3).astype(np.float32) * mask
    img += rng.normal(0, 6, img.shape).astype(np.float32)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root")
    p.add_argument("--count", type=int, default=4000)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--width", type=int, default=500)
    p.add_argument("--height", type=int, default=375)
    p.add_argument("--quality", type=int, default=90)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if a.count < 1 or a.classes < 1:
        sys.exit("make_photos.py: --count and --classes must be positive")
    jobs = [(a, n) for n in range(a.count)]
    with multiprocessing.Pool() as pool:  # one seeded generator per image: the same files on any core count
        total = sum(pool.map(write_one, jobs, chunksize=16))
    print(f"make_photos: {a.count} images in {a.classes} classes under {a.root}, "
          f"{total / a.count / 1024:.0f} KiB each on average")


def write_one(job):
    a, n = job
    rng = np.random.default_rng([a.seed, n])
    c = n % a.classes
    d = os.path.join(a.root, f"n{c:08d}")
    os.makedirs(d, exist_ok=True)
    w, h = (a.width, a.height) if n % 4 else (a.height, a.width)
    path = os.path.join(d, f"img_{n:06d}.JPEG")
    photo(rng, w, h).save(path, "JPEG", quality=a.quality, subsampling=2)
    return os.path.getsize(path)

if __name__ == "__main__":
    main()
