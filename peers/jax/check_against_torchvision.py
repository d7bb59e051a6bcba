#!/usr/bin/env python3
"""Checks the JAX peer's ResNets against torchvision's: same weights, same batch, same training steps.

Loads torchvision's randomly initialised model into the JAX peer's parameter tree (every tensor by name,
its shape checked), then trains both for a few SGD steps (lr 0.1, momentum 0.9, weight decay 5e-5) on one
random batch, comparing the logits, the losses, every parameter's update and the BN running statistics.
Needs torch, torchvision and JAX together (e.g. the GPU machine's python3).

By default both run in float64 on the CPU, where only a real difference of the computation shows: on an
H200 (JAX 0.11.2, PyTorch 2.11) the worst relative error over 3 steps was 1.3e-13 (resnet18) and 1.8e-10
(resnet50). `--dtype float32 --device cuda` compares fp32 without TF32 instead (PyTorch: TF32 off; JAX:
Precision.HIGHEST): the logits and first loss agree to about 1e-5, but updates of BN parameters whose
gradients nearly cancel differ by up to a few percent, and from the second step on the two runs drift
apart as any two fp32 runs of different summation orders do at lr 0.1 and batch 8: that mode judges the
logits and the first loss only, and prints the rest.

    python3 peers/jax/check_against_torchvision.py --models resnet18,resnet50
    python3 peers/jax/check_against_torchvision.py --models resnet50 --dtype float32 --device cuda
"""

import argparse
import importlib.util
import os
import sys
import types

import numpy as np


def load_peer():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.py")
    spec = importlib.util.spec_from_file_location("jax_peer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def map_tree(tree, fn, path=()):
    if isinstance(tree, dict):
        return {k: map_tree(v, fn, path + (k,)) for k, v in tree.items()}
    if isinstance(tree, list):
        return [map_tree(v, fn, path + (i,)) for i, v in enumerate(tree)]
    return fn(path, tree)


LEAVES = {"scale": "weight", "bias": "bias", "mean": "running_mean", "var": "running_var", "kernel": "weight"}


def torch_name(path):
    """The torchvision state_dict key of a leaf of the JAX peer's params or batch_stats tree."""
    prefix = []
    if path[0] == "layers":  # ("layers", stage, block, ...) -> "layer<stage+1>.<block>"
        prefix, path = [f"layer{path[1] + 1}.{path[2]}"], path[3:]
    modules = list(path)
    leaf = LEAVES.get(modules[-1])
    if leaf is None:
        leaf = "weight"  # a convolution's kernel
    else:
        modules = modules[:-1]
    if modules[0] == "downsample":  # torchvision's downsample is Sequential(conv, bn)
        modules = ["downsample", "0" if modules[1] == "conv" else "1"]
    return ".".join(prefix + modules + [leaf])


def torch_to_jax_layout(array):
    if array.ndim == 4:
        return array.transpose(2, 3, 1, 0)  # OIHW -> HWIO
    if array.ndim == 2:
        return array.T  # (out, in) -> (in, out)
    return array


def from_torchvision(state_dict, params, stats, to_array):
    """params and stats with every leaf replaced by torchvision's tensor of the same name (shapes checked,
    every torchvision tensor used)."""
    tensors = {k: v.detach().cpu().numpy() for k, v in state_dict.items() if not k.endswith("num_batches_tracked")}
    used = set()

    def take(path, leaf):
        name = torch_name(path)
        assert name in tensors, f"{path}: no {name} in torchvision's model"
        value = torch_to_jax_layout(tensors[name])
        assert tuple(value.shape) == tuple(leaf.shape), f"{name}: torchvision {value.shape}, JAX {leaf.shape}"
        assert name not in used, f"{name} used twice"
        used.add(name)
        return to_array(np.ascontiguousarray(value))

    params, stats = map_tree(params, take), map_tree(stats, take)
    missing = sorted(set(tensors) - used)
    assert not missing, f"torchvision tensors with no JAX counterpart: {missing[:5]}"
    return params, stats


def relative_error(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet18,resnet50")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="float32 only (float64 runs on the CPU)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dtype", choices=["float32", "float64"], default="float64",
                   help="float64: both in double precision on the CPU, so that only a real difference shows")
    p.add_argument("--tolerance", type=float, default=None,
                   help="largest relative error accepted (default 2e-3 in float32, 1e-8 in float64)")
    a = p.parse_args()
    double = a.dtype == "float64"
    if double:
        a.device = "cpu"
    if a.tolerance is None:
        a.tolerance = 1e-8 if double else 2e-3

    import jax
    import jax.numpy as jnp
    import torch
    import torchvision

    peer = load_peer()
    if a.device == "cpu":
        jax.config.update("jax_platforms", "cpu")
    if double:
        # The peer's float32 becomes float64 everywhere: parameters, BN statistics, the loss.
        jax.config.update("jax_enable_x64", True)
        peer.jnp = types.SimpleNamespace(**{k: getattr(jnp, k) for k in dir(jnp) if not k.startswith("__")})
        peer.jnp.float32 = jnp.float64
        jnp = peer.jnp
    torch_dtype = torch.float64 if double else torch.float32
    device = torch.device(a.device)
    try:  # PyTorch >= 2.9
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        torch.backends.cudnn.conv.fp32_precision = "ieee"
    except (AttributeError, AssertionError):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    worst_overall = 0.0
    for model_name in a.models.split(","):
        torch.manual_seed(0)
        model = getattr(torchvision.models, model_name)(weights=None).to(device, torch_dtype).train()
        n_torch = sum(t.numel() for t in model.parameters())
        params, stats = peer.init_resnet(jax.random.PRNGKey(0), model_name)
        n_jax = sum(int(x.size) for x in jax.tree_util.tree_leaves(params))
        assert n_torch == n_jax == peer.TORCHVISION_PARAMETERS[model_name], (n_torch, n_jax)
        params, stats = from_torchvision(model.state_dict(), params, stats, jnp.asarray)
        buffers = jax.tree_util.tree_map(jnp.zeros_like, params)

        images = torch.randn(a.batch_size, 3, a.image_size, a.image_size, device=device, dtype=torch_dtype)
        labels = torch.randint(0, 1000, (a.batch_size,), device=device)
        images_j = jnp.asarray(images.permute(0, 2, 3, 1).cpu().numpy())
        labels_j = jnp.asarray(labels.cpu().numpy().astype(np.int32))

        kind = peer.ARCHITECTURES[model_name][0]
        logits_j, _ = jax.jit(lambda p_, s_, x_: peer.forward(p_, s_, x_, kind, jnp.float32,
                                                              jax.lax.Precision.HIGHEST))(params, stats, images_j)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
        step = jax.jit(peer.make_train_step(model_name, "fp32", 0.1, 0.9, 5e-5))
        errors = {}
        for index in range(a.steps):
            before_t = {k: v.detach().clone() for k, v in model.state_dict().items()}
            optimizer.zero_grad(set_to_none=True)
            logits_t = model(images)
            loss_t = torch.nn.functional.cross_entropy(logits_t, labels)
            loss_t.backward()
            optimizer.step()
            if index == 0:
                errors["logits"] = relative_error(logits_j, logits_t.detach().cpu().numpy())
            params_before = params
            params, stats, buffers, _, loss_j = step(params, stats, buffers, {}, images_j, labels_j)
            errors[f"loss {index + 1}"] = abs(float(loss_j) - loss_t.item()) / abs(loss_t.item())
            # Every parameter's update (new - old), and every running statistic, against torchvision's.
            after_t = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}

            def update_error(path, new, old):
                name = torch_name(path)
                want = torch_to_jax_layout(after_t[name] - before_t[name].cpu().numpy())
                return relative_error(np.asarray(new) - np.asarray(old), want)

            flat_new, flat_old = [], {}  # by path: jit returns dicts with their keys sorted
            map_tree(params, lambda path, leaf: flat_new.append((path, leaf)))
            map_tree(params_before, lambda path, leaf: flat_old.__setitem__(path, leaf))
            update = max((update_error(path, new, flat_old[path]), torch_name(path)) for path, new in flat_new)
            errors[f"worst update {index + 1} ({update[1]})"] = update[0]
            stat_errors = []
            map_tree(stats, lambda path, leaf: stat_errors.append(
                (relative_error(leaf, torch_to_jax_layout(after_t[torch_name(path)])), torch_name(path))))
            worst_stat = max(stat_errors)
            errors[f"worst running stat {index + 1} ({worst_stat[1]})"] = worst_stat[0]
        judged = {k: v for k, v in errors.items() if double or k in ("logits", "loss 1")}
        worst = max(judged.values())
        worst_overall = max(worst_overall, worst)
        print(f"{model_name}: {n_jax:,} parameters (= torchvision's); {a.batch_size}x{a.image_size}x{a.image_size}, "
              f"{a.steps} SGD steps, {'float64' if double else 'fp32 without TF32'} on {a.device}: "
              f"worst relative error {worst:.2e}" + ("" if double else " (logits and first loss)"))
        for name, value in errors.items():
            print(f"  {name}: {value:.2e}")
    ok = worst_overall <= a.tolerance
    print("PASS" if ok else f"FAIL: worst relative error {worst_overall:.2e} > {a.tolerance:g}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
