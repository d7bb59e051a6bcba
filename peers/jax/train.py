#!/usr/bin/env python3
"""JAX peer trainer for dlbench.

Trains a ResNet on synthetic data under the same measuring protocol as `dlbench bench` and the PyTorch
peer (peers/pytorch/train.py), with the same flags and JSON result where they apply:

  * the images and labels are random arrays made once, on the device, and reused at every step;
  * one step = forward, softmax cross-entropy, backward, SGD-with-momentum update, all one jax.jit
    (parameters, optimizer state and BN statistics donated);
  * `--warmup-steps` steps run first and are not timed; the first of them traces and compiles the step
    (its wall time is reported as compile_seconds);
  * each of the `--steps` timed steps is timed on the host with time.perf_counter(), with
    jax.block_until_ready on the step's outputs at the end of every step;
  * throughput = images in the timed window / wall time of the window (not a mean of per-step rates);
  * on a GPU, the energy of the window is read from NVML's counter (peers/common/nvml_energy.py).

Pure JAX (jax, jax.numpy, jax.lax): the model, batch norm and SGD are written here, so that nothing but
JAX is needed. torchvision's ResNets (v1.5: the stride of a bottleneck on its 3x3 convolution), in NHWC.
One device only. Exits with status 3 when JAX cannot be imported, 2 on a bad flag.

    python3 peers/jax/train.py --model resnet50 --device cuda --precision bf16 --batch-size 256 \\
        --steps 50 --warmup-steps 10 --json out.json
"""

import contextlib
import os
import sys
import time
import warnings

try:
    import jax
    import jax.numpy as jnp
    from jax import lax
except ImportError as error:
    print(f"jax peer: JAX is not installed ({error})", file=sys.stderr)
    sys.exit(3)

# The measuring protocol's pieces shared with the other peers: flags, step times, GPU energy through NVML
# (peers/common/protocol.py and nvml_energy.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "common"))
import protocol  # noqa: E402

# name: (block, blocks per stage), as torchvision builds them
ARCHITECTURES = {
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet34": ("basic", (3, 4, 6, 3)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
    "resnet101": ("bottleneck", (3, 4, 23, 3)),
    "resnet152": ("bottleneck", (3, 8, 36, 3)),
}
# torchvision's parameter counts at 1000 classes: the architecture here must give exactly these.
TORCHVISION_PARAMETERS = {"resnet18": 11689512, "resnet34": 21797672, "resnet50": 25557032,
                          "resnet101": 44549160, "resnet152": 60192808}
MODELS = list(ARCHITECTURES)
PRECISIONS = ["fp32", "tf32", "fp16", "bf16"]
NUM_CLASSES = 1000
BN_MOMENTUM, BN_EPS = 0.9, 1e-5  # running = 0.9 * running + 0.1 * batch (PyTorch's momentum 0.1)
LOSS_SCALE_INIT, LOSS_SCALE_GROWTH_INTERVAL = 2.0**15, 2000  # fp16 dynamic loss scaling
MAX_REFUSED = "max is not supported by the JAX peer; give a number of images"  # --batch-size max


# ---------------------------------------------------------------------------
# ResNet in NHWC: parameters (HWIO kernels), BN running statistics kept apart
# ---------------------------------------------------------------------------


def init_resnet(key, model, num_classes=NUM_CLASSES):
    """(params, batch_stats): convolutions He-normal (fan_out, as torchvision), BN scale 1 and bias 0, the
    final layer as nn.Linear's default (uniform within 1/sqrt(fan_in)), running mean 0 and variance 1."""
    kind, depths = ARCHITECTURES[model]
    expansion = 4 if kind == "bottleneck" else 1

    def next_key():
        nonlocal key
        key, sub = jax.random.split(key)
        return sub

    def conv(kh, kw, cin, cout):
        std = (2.0 / (kh * kw * cout)) ** 0.5  # kaiming_normal_(mode="fan_out", nonlinearity="relu")
        return jax.random.normal(next_key(), (kh, kw, cin, cout), jnp.float32) * std

    def bn(channels):
        return ({"scale": jnp.ones((channels,), jnp.float32), "bias": jnp.zeros((channels,), jnp.float32)},
                {"mean": jnp.zeros((channels,), jnp.float32), "var": jnp.ones((channels,), jnp.float32)})

    params, stats = {"conv1": conv(7, 7, 3, 64)}, {}
    params["bn1"], stats["bn1"] = bn(64)
    params["layers"], stats["layers"] = [], []
    inplanes = 64
    for stage, (planes, depth) in enumerate(zip((64, 128, 256, 512), depths)):
        stage_params, stage_stats = [], []
        for index in range(depth):
            stride = 2 if stage > 0 and index == 0 else 1
            p, s = {}, {}
            if kind == "bottleneck":  # 1x1 reduce, 3x3 (strided), 1x1 expand to 4x
                p["conv1"] = conv(1, 1, inplanes, planes)
                p["bn1"], s["bn1"] = bn(planes)
                p["conv2"] = conv(3, 3, planes, planes)
                p["bn2"], s["bn2"] = bn(planes)
                p["conv3"] = conv(1, 1, planes, planes * 4)
                p["bn3"], s["bn3"] = bn(planes * 4)
            else:  # two 3x3, the first strided
                p["conv1"] = conv(3, 3, inplanes, planes)
                p["bn1"], s["bn1"] = bn(planes)
                p["conv2"] = conv(3, 3, planes, planes)
                p["bn2"], s["bn2"] = bn(planes)
            if stride != 1 or inplanes != planes * expansion:  # projection shortcut: 1x1 (strided) + BN
                p["downsample"], s["downsample"] = {"conv": conv(1, 1, inplanes, planes * expansion)}, {}
                p["downsample"]["bn"], s["downsample"]["bn"] = bn(planes * expansion)
            inplanes = planes * expansion
            stage_params.append(p)
            stage_stats.append(s)
        params["layers"].append(stage_params)
        stats["layers"].append(stage_stats)
    bound = 1.0 / inplanes**0.5
    params["fc"] = {
        "kernel": jax.random.uniform(next_key(), (inplanes, num_classes), jnp.float32, -bound, bound),
        "bias": jax.random.uniform(next_key(), (num_classes,), jnp.float32, -bound, bound),
    }
    return params, stats


def conv2d(x, kernel, stride, padding, precision):
    """Symmetric zero padding, as PyTorch's (not XLA's SAME, which pads stride-2 layers asymmetrically)."""
    return lax.conv_general_dilated(x, kernel.astype(x.dtype), window_strides=(stride, stride),
                                    padding=((padding, padding), (padding, padding)),
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=precision)


def batch_norm(x, p, s):
    """Training mode: normalised with the batch's statistics, computed in float32; returns the output (in
    x's dtype) and the updated running statistics (the variance unbiased, as PyTorch keeps it)."""
    xf = x.astype(jnp.float32)
    mean = jnp.mean(xf, axis=(0, 1, 2))
    var = jnp.mean(jnp.square(xf - mean), axis=(0, 1, 2))
    y = (xf - mean) * (lax.rsqrt(var + BN_EPS) * p["scale"]) + p["bias"]
    n = x.shape[0] * x.shape[1] * x.shape[2]
    running = {"mean": BN_MOMENTUM * s["mean"] + (1.0 - BN_MOMENTUM) * mean,
               "var": BN_MOMENTUM * s["var"] + (1.0 - BN_MOMENTUM) * var * (n / max(n - 1, 1))}
    return y.astype(x.dtype), running


def shortcut(x, p, s, stride, precision, new):
    if "downsample" not in p:
        return x
    identity = conv2d(x, p["downsample"]["conv"], stride, 0, precision)
    identity, bn_stats = batch_norm(identity, p["downsample"]["bn"], s["downsample"]["bn"])
    new["downsample"] = {"bn": bn_stats}
    return identity


def bottleneck(x, p, s, stride, precision):
    new = {}
    out = conv2d(x, p["conv1"], 1, 0, precision)
    out, new["bn1"] = batch_norm(out, p["bn1"], s["bn1"])
    out = conv2d(jax.nn.relu(out), p["conv2"], stride, 1, precision)
    out, new["bn2"] = batch_norm(out, p["bn2"], s["bn2"])
    out = conv2d(jax.nn.relu(out), p["conv3"], 1, 0, precision)
    out, new["bn3"] = batch_norm(out, p["bn3"], s["bn3"])
    return jax.nn.relu(out + shortcut(x, p, s, stride, precision, new)), new


def basic_block(x, p, s, stride, precision):
    new = {}
    out = conv2d(x, p["conv1"], stride, 1, precision)
    out, new["bn1"] = batch_norm(out, p["bn1"], s["bn1"])
    out = conv2d(jax.nn.relu(out), p["conv2"], 1, 1, precision)
    out, new["bn2"] = batch_norm(out, p["bn2"], s["bn2"])
    return jax.nn.relu(out + shortcut(x, p, s, stride, precision, new)), new


def forward(params, stats, images, kind, dtype, precision):
    """Logits (float32) of NHWC images, computed in `dtype`, and the new BN running statistics (the same
    tree structure as `stats`)."""
    new = {}
    x = conv2d(images.astype(dtype), params["conv1"], 2, 3, precision)  # 7x7/2, padding 3
    x, new["bn1"] = batch_norm(x, params["bn1"], stats["bn1"])
    x = jax.nn.relu(x)
    # max pool 3x3/2, padding 1 (padded with -inf, as PyTorch)
    x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (1, 1), (0, 0)))
    block = bottleneck if kind == "bottleneck" else basic_block
    new["layers"] = []
    for stage, (stage_params, stage_stats) in enumerate(zip(params["layers"], stats["layers"])):
        new_stage = []
        for index, (p, s) in enumerate(zip(stage_params, stage_stats)):
            x, block_stats = block(x, p, s, 2 if stage > 0 and index == 0 else 1, precision)
            new_stage.append(block_stats)
        new["layers"].append(new_stage)
    x = jnp.mean(x.astype(jnp.float32), axis=(1, 2)).astype(dtype)  # global average pool
    logits = jnp.dot(x, params["fc"]["kernel"].astype(dtype), precision=precision)
    logits = logits + params["fc"]["bias"].astype(dtype)
    return logits.astype(jnp.float32), new


def cross_entropy(logits, labels):
    """Softmax cross-entropy, mean over the batch, in float32."""
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32))
    return -jnp.mean(jnp.take_along_axis(log_probs, labels[:, None], axis=1))


# ---------------------------------------------------------------------------
# The training step: one function, jitted with its state donated
# ---------------------------------------------------------------------------


def compute_settings(precision):
    """(compute dtype, lax precision of convolutions and dots, its name for the JSON)."""
    if precision == "fp32":  # full float32 products: no TF32
        return jnp.float32, lax.Precision.HIGHEST, "highest"
    if precision == "tf32":  # JAX's default for float32: XLA uses TF32 on Ampere and later GPUs
        return jnp.float32, lax.Precision.DEFAULT, "default"
    return {"bf16": jnp.bfloat16, "fp16": jnp.float16}[precision], lax.Precision.DEFAULT, "default"


def init_scaler(precision):
    if precision != "fp16":
        return {}
    return {"scale": jnp.array(LOSS_SCALE_INIT, jnp.float32), "good_steps": jnp.array(0, jnp.int32),
            "skipped": jnp.array(0, jnp.int32)}


def make_train_step(model, precision, lr, momentum, weight_decay):
    """step(params, batch_stats, momentum_buffers, scaler, images, labels)
         -> (params, batch_stats, momentum_buffers, scaler, loss).
    SGD as PyTorch's: d = g + wd * w; buf = momentum * buf + d; w -= lr * buf (buffers start at zero, which
    makes the first buf = d, as PyTorch's first step does). Parameters stay float32; with fp16 or bf16 they
    are cast for the forward and backward (mixed precision) and the loss is float32. fp16 scales the loss
    (2^15 at first; halved, and the step skipped, when a gradient is not finite; doubled after 2000 good
    steps in a row), as torch.cuda.amp.GradScaler does."""
    kind = ARCHITECTURES[model][0]
    dtype, conv_precision, _ = compute_settings(precision)
    fp16 = precision == "fp16"

    def loss_fn(params, stats, images, labels, scale):
        logits, new_stats = forward(params, stats, images, kind, dtype, conv_precision)
        loss = cross_entropy(logits, labels)
        return loss * scale if fp16 else loss, (loss, new_stats)

    grad_fn = jax.grad(loss_fn, has_aux=True)
    tree_map = jax.tree_util.tree_map

    def step(params, stats, buffers, scaler, images, labels):
        scale = scaler["scale"] if fp16 else None
        grads, (loss, new_stats) = grad_fn(params, stats, images, labels, scale)
        if fp16:
            grads = tree_map(lambda g: g / scale, grads)
        new_buffers = tree_map(lambda w, g, b: momentum * b + (g + weight_decay * w), params, grads, buffers)
        new_params = tree_map(lambda w, b: w - lr * b, params, new_buffers)
        if fp16:
            finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(g)) for g in jax.tree_util.tree_leaves(grads)]))
            new_params = tree_map(lambda new, old: jnp.where(finite, new, old), new_params, params)
            new_buffers = tree_map(lambda new, old: jnp.where(finite, new, old), new_buffers, buffers)
            good = jnp.where(finite, scaler["good_steps"] + 1, 0)
            grow = good >= LOSS_SCALE_GROWTH_INTERVAL
            scaler = {"scale": jnp.where(finite, jnp.where(grow, scale * 2.0, scale), scale * 0.5),
                      "good_steps": jnp.where(grow, 0, good).astype(jnp.int32),
                      "skipped": scaler["skipped"] + (~finite).astype(jnp.int32)}
        return new_params, new_stats, new_buffers, scaler, loss

    return step


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


def parse_args(argv=None):
    p = protocol.OneLineErrorParser(
        description="JAX peer of `dlbench bench`: ResNet training throughput on synthetic data, one device.")
    p.add_argument("--model", choices=MODELS, default="resnet50")
    p.add_argument("--batch-size", type=protocol.batch_size_type(MAX_REFUSED), default=32,
                   help="images per step (one device)")
    p.add_argument("--steps", type=protocol.positive_int, default=20, help="timed steps")
    p.add_argument("--warmup-steps", type=protocol.non_negative_int, default=5,
                   help="untimed steps run first (the first compiles the step); at least 1")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-5)
    p.add_argument("--precision", choices=PRECISIONS, default="fp32")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--channels-last", action="store_true",
                   help="accepted for the PyTorch peer's command lines; no effect (XLA chooses layouts)")
    p.add_argument("--image-size", type=protocol.positive_int, default=224, help="square input size")
    p.add_argument("--json", metavar="FILE", default=None, help="write the result as one JSON object")
    p.add_argument("--seed", type=protocol.parse_int, default=0)
    args = p.parse_args(argv)

    if args.warmup_steps < 1:
        p.error("--warmup-steps 0: the JAX peer's first step compiles, so it cannot be timed; give 1 or more")
    if args.device == "cpu" and args.precision in ("tf32", "fp16"):
        p.error(f"--precision {args.precision} is CUDA-only; use fp32 or bf16 on the CPU")
    if args.image_size < 32:
        p.error(f"--image-size {args.image_size}: at least 32 (five halvings down to 1x1)")
    return args


# ---------------------------------------------------------------------------
# Peak memory and GPU energy
# ---------------------------------------------------------------------------


def peak_memory_bytes(device):
    try:
        stats = device.memory_stats()  # None, or unimplemented, on the CPU
    except Exception:  # noqa: BLE001 - not every backend has it
        return None
    if not stats or "peak_bytes_in_use" not in stats:
        return None
    return int(stats["peak_bytes_in_use"])


def open_energy_counter(device):
    """protocol.open_energy_counter for a JAX device: on a GPU, by its CUDA ordinal."""
    if device.platform == "cpu":
        return protocol.open_energy_counter(False)
    ordinal = getattr(device, "local_hardware_id", None)  # the CUDA device ordinal in this process
    return protocol.open_energy_counter(True, cuda_ordinal=device.id if ordinal is None else ordinal)


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def main(argv=None):
    args = parse_args(argv)
    if args.device == "cpu":
        with contextlib.suppress(Exception):  # keep JAX off the GPUs (and their memory) altogether
            jax.config.update("jax_platforms", "cpu")
    device, problem = None, None
    for platform_name in (("cuda", "gpu") if args.device == "cuda" else ("cpu",)):
        try:
            device = jax.devices(platform_name)[0]
            break
        except (RuntimeError, ValueError) as error:
            problem = (str(error).strip().splitlines() or [type(error).__name__])[0]
    if device is None:
        print(f"train.py: error: --device {args.device}: JAX has no such device ({problem})", file=sys.stderr)
        return 2
    device_name = f"cuda:{device.device_kind}" if args.device == "cuda" else "cpu"
    # Donation is a no-op on some backends (the CPU's, in some versions): nothing to warn about.
    warnings.filterwarnings("ignore", message="Some donated buffers were not usable")

    key = (getattr(jax.random, "key", None) or jax.random.PRNGKey)(args.seed)
    init_key, images_key, labels_key = jax.random.split(key, 3)
    params, stats = init_resnet(init_key, args.model)
    parameters = sum(int(x.size) for x in jax.tree_util.tree_leaves(params))
    print(f"{args.model}: {parameters:,} parameters, input {args.image_size}x{args.image_size}x3 (NHWC), "
          f"{NUM_CLASSES} classes")
    assert parameters == TORCHVISION_PARAMETERS[args.model], \
        f"{args.model}: {parameters} parameters, torchvision's has {TORCHVISION_PARAMETERS[args.model]}"
    buffers = jax.tree_util.tree_map(jnp.zeros_like, params)
    scaler = init_scaler(args.precision)
    params, stats, buffers, scaler = jax.device_put((params, stats, buffers, scaler), device)

    # Synthetic data, made once on the device and reused by every step.
    images = jax.device_put(jax.random.normal(
        images_key, (args.batch_size, args.image_size, args.image_size, 3), jnp.float32), device)
    labels = jax.device_put(jax.random.randint(labels_key, (args.batch_size,), 0, NUM_CLASSES, jnp.int32), device)

    train_step = make_train_step(args.model, args.precision, args.lr, args.momentum, args.weight_decay)
    traces = []  # one entry per trace of the step: more than one means it was compiled again

    def counted_step(*state):
        traces.append(1)
        return train_step(*state)

    step = jax.jit(counted_step, donate_argnums=(0, 1, 2, 3))
    _, _, precision_name = compute_settings(args.precision)
    energy_counter, energy_reason = open_energy_counter(device)

    start = time.perf_counter()
    for index in range(args.warmup_steps):
        params, stats, buffers, scaler, loss = step(params, stats, buffers, scaler, images, labels)
        if index == 0:  # tracing, compilation (XLA's autotuning included) and the first run
            jax.block_until_ready((params, stats, buffers, scaler, loss))
            compile_seconds = time.perf_counter() - start
    jax.block_until_ready((params, stats, buffers, scaler, loss))

    step_seconds = []
    energy_before = protocol.read_energy(energy_counter)
    clock_sampler = protocol.start_clock_sampler(energy_counter)  # as dlbench's gpu_clocks, every 50 ms
    window_start = time.perf_counter()
    for _ in range(args.steps):
        t0 = time.perf_counter()
        params, stats, buffers, scaler, loss = step(params, stats, buffers, scaler, images, labels)
        jax.block_until_ready((params, stats, buffers, scaler, loss))
        step_seconds.append(time.perf_counter() - t0)
    window_seconds = time.perf_counter() - window_start
    energy_after = protocol.read_energy(energy_counter)
    clocks = protocol.stop_clock_sampler(clock_sampler)

    energy, energy_reason = protocol.window_energy(energy_counter, energy_reason, energy_before, energy_after)
    if energy is None:
        print(f"train.py: energy_joules is null: {energy_reason}", file=sys.stderr)
    if len(traces) > 1:
        print(f"train.py: warning: the step was traced {len(traces)} times (compiled again)", file=sys.stderr)

    final_loss = float(loss)
    images_per_second = args.batch_size * args.steps / window_seconds
    step_ms = protocol.step_ms(step_seconds)
    try:
        import jaxlib
        jaxlib_version = jaxlib.__version__
    except (ImportError, AttributeError):
        jaxlib_version = None

    result = {
        "framework": "jax",
        "framework_version": jax.__version__,
        "jaxlib_version": jaxlib_version,
        "model": args.model,
        "parameters": parameters,
        "device": device_name,
        "precision": args.precision,
        "matmul_precision": precision_name,
        "batch_size": args.batch_size,
        "batch_size_requested": args.batch_size,
        "global_batch_size": args.batch_size,
        "ranks": 1,
        "launcher": "single",
        "steps": args.steps,
        "warmup_steps": args.warmup_steps,
        "threads": None,
        "channels_last": args.channels_last,
        "layout": "NHWC (XLA)",
        "compiled": True,
        "compile_seconds": compile_seconds,
        "traces": len(traces),
        "final_loss": final_loss,
        "images_per_second": images_per_second,
        "images_per_second_per_device": images_per_second,
        "step_ms": step_ms,
        "step_times_ms": protocol.step_times_ms(step_seconds),
        "window_seconds": window_seconds,
        "peak_memory_bytes": peak_memory_bytes(device),
        "energy_joules": energy,
        "energy_joules_per_image": None if energy is None else energy / (args.batch_size * args.steps),
        "average_power_watts": None if energy is None else energy / window_seconds,
        "gpu_clocks": protocol.gpu_clocks_result(clocks),
        "date": protocol.utc_date(),
        "system": protocol.system_info(),
    }
    if args.precision == "fp16":
        result["loss_scale"] = {"final": float(scaler["scale"]), "skipped_steps": int(scaler["skipped"])}

    print(f"jax {jax.__version__} on {device_name}, {args.precision} (matmul precision {precision_name}), "
          f"batch {args.batch_size}, layout chosen by XLA")
    print(f"first step (trace + compile + run): {compile_seconds:.1f} s")
    peak = result["peak_memory_bytes"]
    print(f"{args.steps} timed steps after {args.warmup_steps} warm-up: {images_per_second:.2f} img/s, "
          f"step ms median {step_ms['median']:.2f} (p5 {step_ms['p5']:.2f}, p95 {step_ms['p95']:.2f}), "
          f"final loss {final_loss:.4f}, peak memory "
          + ("unknown" if peak is None else f"{peak / 2**20:.1f} MiB"))
    if energy is not None:
        print(f"energy: {energy:.1f} J in the window, {result['energy_joules_per_image']:.4f} J per image, "
              f"{result['average_power_watts']:.0f} W on average")
    if args.precision == "fp16":
        print(f"loss scale {result['loss_scale']['final']:g}, {result['loss_scale']['skipped_steps']} steps skipped")
    if args.json:
        protocol.write_json_atomically(args.json, result)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
