#!/usr/bin/env python3
"""PyTorch peer trainer for dlbench.

Trains a ResNet on synthetic data under the same measuring protocol as
`dlbench bench`, so that the two numbers can be compared directly:

  * the images and labels are random tensors made once, on the device, and
    reused at every step (no data loading is measured);
  * one step = forward, softmax cross-entropy, backward, SGD-with-momentum update;
  * `--warmup-steps` steps run first and are not timed;
  * each of the `--steps` timed steps is timed on the host with
    time.perf_counter(), with a device synchronize at the end of every step on CUDA;
  * throughput = images in the timed window / wall time of the window
    (not a mean of per-step rates);
  * on CUDA, the GPU energy of the window is read from NVML's counter
    (peers/common/nvml_energy.py), where the driver has it.

`--batch-size max` searches (on CUDA) for the largest batch per device that
trains, by real training steps at doubling then bisected batch sizes, before
the measured run.

Started by torchrun (or `python -m torch.distributed.run`) or by mpirun, it trains
data parallel: one process per device, DistributedDataParallel, NCCL on CUDA and
gloo on the CPU, and reports the sum over ranks of each rank's own rate.

Works with PyTorch 1.13 (CPU) and PyTorch 2.x (CPU or CUDA). Standard library
plus torch and torchvision only. Exits with status 3 when PyTorch or torchvision
cannot be imported (dlbench compare reports the peer as not installed), 2 on a
bad flag.

    python3 peers/pytorch/train.py --model resnet20 --batch-size 32 --steps 3
    python3 peers/pytorch/train.py --model resnet50 --device cuda --precision bf16 \
        --batch-size 256 --steps 50 --warmup-steps 10 --channels-last --json out.json
    python3 -m torch.distributed.run --nproc_per_node 8 peers/pytorch/train.py \
        --model resnet50 --device cuda --precision bf16 --batch-size 256 --channels-last
"""

import contextlib
import gc
import os
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torchvision
except ImportError as error:
    print(f"pytorch peer: PyTorch is not installed ({error})", file=sys.stderr)
    sys.exit(3)

# The measuring protocol's pieces shared with the other peers: flags, step times, GPU energy through NVML
# (peers/common/protocol.py and nvml_energy.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "common"))
import protocol  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import make_grad_scaler, peak_memory_bytes  # noqa: E402

TORCHVISION_MODELS = ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"]
MODELS = ["resnet20"] + TORCHVISION_MODELS
PRECISIONS = ["fp32", "tf32", "fp16", "bf16"]
MAX_BATCH_START, MAX_BATCH_CAP, MAX_BATCH_MULTIPLE = 64, 65536, 8  # --batch-size max
# Held back during the search, for what its eager single-GPU steps lack and the run has: allocator
# fragmentation in another order of allocations, torch.compile's buffers; under DDP also its gradient
# buckets. The larger of 1 GiB (dlbench's own margin) and 2% of the GPU's memory, plus twice the
# parameters' bytes under DDP. (A 2-GPU ResNet-18 run found its edge without it, then ran out of memory.)
MAX_BATCH_RESERVE_MIN, MAX_BATCH_RESERVE_FRACTION = 2**30, 0.02


# ---------------------------------------------------------------------------
# ResNet-20 (He et al. 2016, section 4.2), with projection shortcuts (option B)
# ---------------------------------------------------------------------------


def conv3x3(in_ch, out_ch, stride=1):
    return nn.Conv2d(in_ch, out_ch, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    def __init__(self, in_ch, out_ch, stride):
        super().__init__()
        self.conv1 = conv3x3(in_ch, out_ch, stride)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = conv3x3(out_ch, out_ch)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = None
        if stride != 1 or in_ch != out_ch:  # option B: 1x1 projection + BN
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(out_ch),
            )

    def forward(self, x):
        identity = x if self.shortcut is None else self.shortcut(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet20(nn.Module):
    """conv3x3(16)-BN-ReLU, 3 stages x 3 BasicBlocks (16/32/64 channels,
    stride 2 at the first block of stages 2 and 3), global average pool, linear."""

    def __init__(self, in_channels=3, num_classes=10, blocks_per_stage=3):
        super().__init__()
        self.stem = nn.Sequential(conv3x3(in_channels, 16), nn.BatchNorm2d(16), nn.ReLU(inplace=True))
        layers = []
        in_ch = 16
        for stage, out_ch in enumerate([16, 32, 64]):
            for block in range(blocks_per_stage):
                stride = 2 if (stage > 0 and block == 0) else 1
                layers.append(BasicBlock(in_ch, out_ch, stride))
                in_ch = out_ch
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


def build_model(name, image_size):
    """Returns (model, input_channels, num_classes)."""
    if name == "resnet20":
        # 28x28 is the Fashion-MNIST-like single-channel case; anything else is RGB (CIFAR at 32x32).
        in_channels = 1 if image_size == 28 else 3
        return ResNet20(in_channels=in_channels, num_classes=10), in_channels, 10
    constructor = getattr(torchvision.models, name)
    try:
        model = constructor(weights=None)  # torchvision >= 0.13
    except TypeError:
        model = constructor(pretrained=False)  # older torchvision
    return model, 3, 1000


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


def parse_args(argv=None):
    p = protocol.OneLineErrorParser(
        description="PyTorch peer of `dlbench bench`: ResNet training throughput on synthetic data."
    )
    p.add_argument("--model", choices=MODELS, default="resnet50")
    p.add_argument("--batch-size", type=protocol.batch_size_type(), default=32,
                   help="images per step, per device; max: the largest that trains (CUDA only)")
    p.add_argument("--steps", type=protocol.positive_int, default=20, help="timed steps")
    p.add_argument("--warmup-steps", type=protocol.non_negative_int, default=5, help="untimed steps run first")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-5)
    p.add_argument("--precision", choices=PRECISIONS, default="fp32")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--threads", type=protocol.positive_int, default=None,
                   help="intra-op CPU threads (torch.set_num_threads); default: PyTorch's choice")
    p.add_argument("--channels-last", action="store_true", help="NHWC memory format for model and data")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch >= 2.0)")
    p.add_argument("--image-size", type=protocol.positive_int, default=None,
                   help="square input size; default 28 for resnet20, 224 otherwise")
    p.add_argument("--json", metavar="FILE", default=None, help="write the result as one JSON object")
    p.add_argument("--seed", type=protocol.parse_int, default=0)
    args = p.parse_args(argv)

    if args.image_size is None:
        args.image_size = 28 if args.model == "resnet20" else 224
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is available to this PyTorch build")
    if args.device == "cpu" and args.precision in ("tf32", "fp16"):
        p.error(f"--precision {args.precision} is CUDA-only; use fp32 or bf16 on the CPU")
    if args.compile and not hasattr(torch, "compile"):
        p.error(f"--compile needs PyTorch >= 2.0 (this is {torch.__version__})")
    if args.batch_size == "max" and args.device != "cuda":
        p.error("--batch-size max needs --device cuda: on the CPU there is no memory limit to search against "
                "(the operating system swaps or kills the process first)")
    return args


# ---------------------------------------------------------------------------
# Precision settings
# ---------------------------------------------------------------------------


def set_tf32(enabled):
    """TF32 on (tf32) or off (everything else) for both cuBLAS matmuls and cuDNN convolutions."""
    def has_setting(obj, name):
        try:  # torch.backends.cuda.matmul raises AssertionError, not AttributeError, on unknown names
            getattr(obj, name)
            return True
        except (AttributeError, AssertionError):
            return False

    matmul = torch.backends.cuda.matmul
    conv = torch.backends.cudnn.conv if has_setting(torch.backends.cudnn, "conv") else None
    if has_setting(matmul, "fp32_precision") and conv is not None and has_setting(conv, "fp32_precision"):
        # PyTorch >= 2.9: the allow_tf32 flags are deprecated in favour of these.
        mode = "tf32" if enabled else "ieee"
        matmul.fp32_precision = mode
        conv.fp32_precision = mode
    else:
        matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled


# ---------------------------------------------------------------------------
# Data parallel: which launcher started this process, and collectives over the ranks
# ---------------------------------------------------------------------------


class Ranks:
    """This process's place among the data-parallel ranks (one rank, "single", when not launched distributed)."""

    def __init__(self, size=1, rank=0, local_rank=0, launcher="single"):
        self.size, self.rank, self.local_rank, self.launcher = size, rank, local_rank, launcher

    @property
    def distributed(self):
        return self.launcher != "single"


def launched_ranks():
    """The ranks as torchrun or mpirun describe them in the environment; Ranks() otherwise."""
    env = os.environ
    if all(name in env for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK")):  # torchrun, torch.distributed.run
        return Ranks(int(env["WORLD_SIZE"]), int(env["RANK"]), int(env["LOCAL_RANK"]), "torchrun-ddp")
    if "OMPI_COMM_WORLD_SIZE" in env:  # Open MPI's mpirun
        size, rank = int(env["OMPI_COMM_WORLD_SIZE"]), int(env["OMPI_COMM_WORLD_RANK"])
        local_rank = int(env.get("OMPI_COMM_WORLD_LOCAL_RANK", rank))
        # env:// reads these. The loopback address only reaches ranks of one node: across nodes, export
        # MASTER_ADDR (rank 0's host) to every rank before mpirun (mpirun -x MASTER_ADDR).
        env.setdefault("MASTER_ADDR", "127.0.0.1")
        env.setdefault("MASTER_PORT", "29500")
        env["WORLD_SIZE"], env["RANK"], env["LOCAL_RANK"] = str(size), str(rank), str(local_rank)
        return Ranks(size, rank, local_rank, "mpirun-ddp")
    return Ranks()


def gather_floats(values, device):
    """Every rank's list of floats, as a list per rank (float64, so byte counts stay exact)."""
    mine = torch.tensor(values, dtype=torch.float64, device=device)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    return [t.tolist() for t in everyone]


# ---------------------------------------------------------------------------
# One training step, and the search for the largest batch that trains (--batch-size max)
# ---------------------------------------------------------------------------


def train_step(model, optimizer, scaler, loss_fn, autocast, images, labels):
    """zero grads, forward, loss, backward, SGD update (through the gradient scaler for fp16)."""
    optimizer.zero_grad(set_to_none=True)
    with autocast():
        loss = loss_fn(model(images), labels)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
    return loss


def is_out_of_memory(error):
    oom = getattr(torch.cuda, "OutOfMemoryError", None)  # PyTorch >= 1.13; a RuntimeError before
    if oom is not None and isinstance(error, oom):
        return True
    return isinstance(error, RuntimeError) and "out of memory" in str(error)


def largest_batch(fits, start=MAX_BATCH_START, cap=MAX_BATCH_CAP, multiple=MAX_BATCH_MULTIPLE):
    """The largest batch b (a multiple of `multiple`, at most `cap`) with fits(b), assuming that whatever
    fits, less fits too: doubling from `start` to the first failure, then bisecting between the last batch
    that fitted and the first that did not. 0 when not even `multiple` fits."""
    good, bad, batch = 0, None, start
    while batch <= cap:
        if not fits(batch):
            bad = batch
            break
        good = batch
        if batch == cap:
            return good
        batch = min(batch * 2, cap)
    if bad is None:
        return good
    while bad - good > multiple:
        middle = (good + bad) // 2 // multiple * multiple
        if fits(middle):
            good = middle
        else:
            bad = middle
    return good


def search_max_batch(model, args, device, in_channels, num_classes, memory_format, autocast, say,
                     reserve_bytes):
    """--batch-size max on this rank's GPU: real training steps (eager, the run's precision and memory
    format, SGD with its momentum buffers, the gradient scaler for fp16) at each batch tried, memory freed
    between tries, `reserve_bytes` held back throughout. The model's weights and BN statistics are put back
    afterwards, and the optimizer and scaler used here are dropped, so the measured run starts as it would
    have. Returns (batch, tries)."""
    initial_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    reserve = torch.empty(reserve_bytes, dtype=torch.uint8, device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                                weight_decay=args.weight_decay)
    for p in model.parameters():  # the momentum buffers take their memory from the first try, as in training
        optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p)
    scaler = make_grad_scaler() if args.precision == "fp16" else None
    loss_fn = nn.CrossEntropyLoss()
    tries = []

    def free():
        model.zero_grad(set_to_none=True)
        gc.collect()
        torch.cuda.empty_cache()

    def fits(batch):
        images = labels = loss = None
        ok = True
        try:
            images = torch.randn(batch, in_channels, args.image_size, args.image_size, device=device)
            images = images.contiguous(memory_format=memory_format)
            labels = torch.randint(0, num_classes, (batch,), device=device)
            for _ in range(2):  # the second step runs with every buffer of the first still cached
                loss = train_step(model, optimizer, scaler, loss_fn, autocast, images, labels)
            torch.cuda.synchronize(device)
        except RuntimeError as error:
            if not is_out_of_memory(error):
                raise
            ok = False
        # Out of the except block: the traceback, and the activations its frames held, are gone.
        del images, labels, loss
        free()
        tries.append({"batch": batch, "fits": ok})
        say(f"  batch-size max: batch {batch}: {'ok' if ok else 'out of memory'}")
        return ok

    say(f"batch-size max: searching from {MAX_BATCH_START} (doubling, then bisecting on multiples of "
        f"{MAX_BATCH_MULTIPLE}, at most {MAX_BATCH_CAP}), {reserve_bytes / 2**30:.2f} GiB held back")
    batch = largest_batch(fits)
    model.load_state_dict(initial_state)
    del optimizer, scaler, initial_state, reserve
    free()
    torch.cuda.reset_peak_memory_stats(device)
    return batch, tries


# ---------------------------------------------------------------------------
# GPU energy over the timed window (NVML)
# ---------------------------------------------------------------------------


def open_energy_counter(device):
    """protocol.open_energy_counter for a torch device: on CUDA, the GPU named by the PCI bus id PyTorch gives."""
    if device.type != "cuda":
        return protocol.open_energy_counter(False)
    props = torch.cuda.get_device_properties(device)
    bus = getattr(props, "pci_bus_id", None)  # PyTorch >= 2.x: domain, bus and device numbers
    if isinstance(bus, int):
        bus_id = f"{getattr(props, 'pci_domain_id', 0):04x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
        return protocol.open_energy_counter(True, pci_bus_id=bus_id)
    return protocol.open_energy_counter(True, cuda_ordinal=device.index)


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def main(argv=None):
    args = parse_args(argv)
    ranks = launched_ranks()
    say = print if ranks.rank == 0 else (lambda *a, **k: None)  # one voice: rank 0's
    torch.manual_seed(args.seed)
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    device = torch.device(args.device)
    if device.type == "cuda":
        if ranks.distributed:
            if ranks.local_rank >= torch.cuda.device_count():
                sys.exit(f"train.py: rank {ranks.rank} is local rank {ranks.local_rank} but this node has "
                         f"{torch.cuda.device_count()} CUDA device(s); start at most one process per GPU")
            torch.cuda.set_device(ranks.local_rank)
        device = torch.device("cuda", torch.cuda.current_device())
        set_tf32(args.precision == "tf32")
        torch.backends.cudnn.benchmark = True  # algorithm search happens in the warm-up steps
        device_name = f"cuda:{torch.cuda.get_device_name(device)}"
    else:
        device_name = "cpu"
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def barrier():
        if ranks.distributed:
            if device.type == "cuda":
                dist.barrier(device_ids=[device.index])  # names the GPU so NCCL need not guess it
            else:
                dist.barrier()
            sync()

    if ranks.distributed:
        # NVLink multicast (NVLS) stays off unless asked for: it needs fabric resources a shared machine may
        # not grant, and dlbench's runs leave it off too.
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method="env://",
                                world_size=ranks.size, rank=ranks.rank)

    model, in_channels, num_classes = build_model(args.model, args.image_size)
    parameters = sum(p.numel() for p in model.parameters())
    model = model.to(device=device, memory_format=memory_format).train()
    say(f"{args.model}: {parameters:,} parameters, input {in_channels}x{args.image_size}x{args.image_size}, "
        f"{num_classes} classes")

    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(args.precision)

    def autocast():
        if amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=amp_dtype)

    batch_search = None
    if args.batch_size == "max":
        # Before DDP and compilation, each rank on its own GPU; under DDP, NCCL's communicator (and the
        # memory it takes) is set up first by a barrier, so the search leaves room for it.
        barrier()
        reserve = max(MAX_BATCH_RESERVE_MIN,
                      int(MAX_BATCH_RESERVE_FRACTION * torch.cuda.get_device_properties(device).total_memory))
        if ranks.distributed:
            reserve += 2 * sum(p.numel() * p.element_size() for p in model.parameters())
        found, tries = search_max_batch(model, args, device, in_channels, num_classes, memory_format,
                                        autocast, say, reserve)
        batch_search = {"tries": tries, "largest": found, "reserve_bytes": reserve}
        if ranks.distributed:
            by_rank = [int(r[0]) for r in gather_floats([found], device)]
            batch_search["largest_by_rank"] = by_rank
            batch_size = min(by_rank)  # every rank trains the same batch: the smallest of the largest
        else:
            batch_size = found
        if batch_size < MAX_BATCH_MULTIPLE:
            if ranks.rank == 0:
                print(f"train.py: --batch-size max: not even {MAX_BATCH_MULTIPLE} images per step train on "
                      f"{device_name}", file=sys.stderr)
            if ranks.distributed:
                dist.destroy_process_group()
            return 1
        say(f"batch-size max: {batch_size} images per device"
            + (f" (the smallest of the ranks' {batch_search['largest_by_rank']})" if ranks.distributed else ""))
        torch.manual_seed(args.seed + ranks.rank)  # the run's data does not depend on the search
    else:
        batch_size = args.batch_size

    # Synthetic data, made once on the device and reused by every step; each rank draws its own batch.
    if ranks.distributed:
        torch.manual_seed(args.seed + ranks.rank)
    images = torch.randn(batch_size, in_channels, args.image_size, args.image_size, device=device)
    images = images.contiguous(memory_format=memory_format)
    labels = torch.randint(0, num_classes, (batch_size,), device=device)

    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                                weight_decay=args.weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    ddp = None
    if ranks.distributed:
        # gradient_as_bucket_view: gradients live in the all-reduce buckets, saving a copy and its memory.
        # static_graph: the graph is the same at every step; but torch.compile's DDP graph splitting is
        # known to break with it, so a compiled run leaves it off.
        ddp = {"backend": str(dist.get_backend()), "gradient_as_bucket_view": True, "static_graph": not args.compile}
        wrapped = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None,
            gradient_as_bucket_view=True, static_graph=ddp["static_graph"])
        ddp["bucket_cap_mb"] = getattr(wrapped, "bucket_bytes_cap", 25 * 2**20) / 2**20  # DDP's default
    else:
        wrapped = model
    # DDP first, then compile: dynamo splits the graph at DDP's bucket boundaries so that the all-reduce
    # still overlaps backward.
    step_model = torch.compile(wrapped) if args.compile else wrapped
    scaler = make_grad_scaler() if args.precision == "fp16" else None
    energy_counter, energy_reason = open_energy_counter(device)

    for _ in range(args.warmup_steps):
        train_step(step_model, optimizer, scaler, loss_fn, autocast, images, labels)
    sync()
    barrier()  # every rank starts its window at the same moment

    step_seconds = []
    energy_before = protocol.read_energy(energy_counter)
    clock_sampler = protocol.start_clock_sampler(energy_counter)  # as dlbench's gpu_clocks, every 50 ms
    window_start = time.perf_counter()
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = train_step(step_model, optimizer, scaler, loss_fn, autocast, images, labels)
        sync()
        step_seconds.append(time.perf_counter() - t0)
    window_seconds = time.perf_counter() - window_start
    energy_after = protocol.read_energy(energy_counter)  # this rank's GPU over this rank's window
    clocks = protocol.stop_clock_sampler(clock_sampler)
    barrier()  # after this rank's clock stopped: its rate is its own, and no rank leaves early

    energy, energy_reason = protocol.window_energy(energy_counter, energy_reason, energy_before, energy_after)

    final_loss = float(loss.detach().float().item())
    images_per_second = batch_size * args.steps / window_seconds
    peak_memory = peak_memory_bytes(device)  # before the collectives below allocate anything
    step_ms = protocol.step_ms(step_seconds)

    if ranks.distributed:
        # Every rank's own measured rate, summed: never rank 0's times the ranks.
        nan = float("nan")
        clock_keys = ("sm_clock_median_mhz",) + protocol.CLOCK_FRACTIONS
        by_rank = gather_floats([images_per_second, peak_memory, window_seconds,
                                 nan if energy is None else energy]
                                + [nan if clocks is None else clocks[k] for k in clock_keys], device)
        total_images_per_second = sum(r[0] for r in by_rank)
        peak_memory = int(max(r[1] for r in by_rank))
        energy_by_rank = [None if r[3] != r[3] else r[3] for r in by_rank]  # NaN: not measured there
        # Reasons are printed where they are known: rank 0's, else those of the ranks that lacked it.
        if energy_reason and (energy is None) and (ranks.rank == 0 or energy_by_rank[0] is not None):
            print(f"train.py: rank {ranks.rank}: energy_joules is null: {energy_reason}", file=sys.stderr)
        energy_total = None if any(e is None for e in energy_by_rank) else sum(energy_by_rank)
        power = None if energy_total is None else sum(r[3] / r[2] for r in by_rank)
        # As dlbench: the slowest rank's median clock, the ranks' mean shares; null unless every rank read them.
        everyone_clocked = all(r[4] == r[4] for r in by_rank)  # NaN: not read there
        gpu_clocks = protocol.gpu_clocks_result(
            clocks if everyone_clocked else None, slowest_median=min(r[4] for r in by_rank),
            mean_fractions={k: sum(r[5 + i] for r in by_rank) / len(by_rank)
                            for i, k in enumerate(protocol.CLOCK_FRACTIONS)})
    else:
        by_rank = None
        total_images_per_second = images_per_second
        if energy is None:
            print(f"train.py: energy_joules is null: {energy_reason}", file=sys.stderr)
        energy_total = energy
        power = None if energy is None else energy / window_seconds
        gpu_clocks = protocol.gpu_clocks_result(clocks)
    images_in_window = batch_size * args.steps * ranks.size

    result = {
        "framework": "pytorch",
        "framework_version": torch.__version__,
        "model": args.model,
        "parameters": parameters,
        "device": device_name,
        "precision": args.precision,
        "batch_size": batch_size,
        "batch_size_requested": args.batch_size,
        "global_batch_size": batch_size * ranks.size,
        "ranks": ranks.size,
        "launcher": ranks.launcher,
        "steps": args.steps,
        "warmup_steps": args.warmup_steps,
        "threads": torch.get_num_threads(),
        "channels_last": args.channels_last,
        "compiled": args.compile,
        "final_loss": final_loss,
        "images_per_second": total_images_per_second,
        "images_per_second_per_device": total_images_per_second / ranks.size,
        "step_ms": step_ms,
        "step_times_ms": protocol.step_times_ms(step_seconds),
        "window_seconds": window_seconds,
        "peak_memory_bytes": peak_memory,
        "energy_joules": energy_total,
        "energy_joules_per_image": None if energy_total is None else energy_total / images_in_window,
        "average_power_watts": power,
        "gpu_clocks": gpu_clocks,
        "date": protocol.utc_date(),
        "system": protocol.system_info(),
    }
    if batch_search is not None:
        result["batch_size_search"] = batch_search
    if ranks.distributed:
        result["ddp"] = ddp
        result["images_per_second_by_rank"] = [r[0] for r in by_rank]
        result["peak_memory_bytes_by_rank"] = [int(r[1]) for r in by_rank]
        result["window_seconds_by_rank"] = [r[2] for r in by_rank]
        result["energy_joules_by_rank"] = energy_by_rank

    say(f"pytorch {torch.__version__} on {device_name}, {args.precision}, batch {batch_size}, "
        f"threads {result['threads']}, channels_last {args.channels_last}, compiled {args.compile}")
    who = "rank 0: " if ranks.distributed else ""
    say(f"{who}{args.steps} timed steps after {args.warmup_steps} warm-up: {images_per_second:.2f} img/s, "
        f"step ms median {step_ms['median']:.2f} (p5 {step_ms['p5']:.2f}, p95 {step_ms['p95']:.2f}), "
        f"final loss {final_loss:.4f}, peak memory {result['peak_memory_bytes'] / 2**20:.1f} MiB"
        + (" (the most of any rank)" if ranks.distributed else ""))
    if ranks.distributed:
        say(f"{ranks.size} ranks ({ranks.launcher}, {ddp['backend']}): {total_images_per_second:.2f} img/s "
            f"in total, {total_images_per_second / ranks.size:.2f} per device")
    if energy_total is not None:
        say(f"energy: {energy_total:.1f} J in the window, {result['energy_joules_per_image']:.4f} J per image, "
            f"{power:.0f} W on average" + (f" ({ranks.size} GPUs)" if ranks.distributed else ""))
    if args.json and ranks.rank == 0:
        protocol.write_json_atomically(args.json, result)
        say(f"wrote {args.json}")
    if ranks.distributed:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
