"""What the PyTorch peers (train.py, gpt.py) do alike: the fp16 gradient scaler and the peak memory."""

import resource
import sys

import torch


def make_grad_scaler():
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        try:
            return torch.amp.GradScaler("cuda")  # PyTorch >= 2.3
        except TypeError:
            pass
    return torch.cuda.amp.GradScaler()


def peak_memory_bytes(device):
    """The device's peak allocated bytes since the last reset on CUDA; the process's peak RSS on the CPU."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)  # bytes on macOS, KiB on Linux
