"""Test doubles for the conformance battery: a small plain DP-SGD with one switchable bug each.

Claim of every function here: Poisson rate q = 0.1, σ = 3.0, T = 50 steps, C = 1. ``train`` is a
correct implementation; every other ``train_*`` plants one bug of the catalogue. Plain PyTorch,
per-example gradients with ``torch.func``, a 64-24-10 MLP so a training on the battery's tiny
datasets takes milliseconds.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

CLAIM = {"noise_multiplier": 3.0, "sampling_rate": 0.1, "num_steps": 50}
CLIP = 1.0
LR = 1.0
EXPECTED_LOT = 144.0  # q × the user's real dataset size (1437 digits): a public constant
HIDDEN = 24


def model() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(64, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 10))


def _dpsgd(
    dataset,
    *,
    seed,
    initial_state=None,
    noise=1.0,
    normaliser="expected",
    noise_seed="seed",
    noise_on_bias=True,
    clip=True,
    rate=None,
    bn=False,
):
    net = (
        model()
        if not bn
        else nn.Sequential(
            nn.Flatten(), nn.Linear(64, HIDDEN), nn.BatchNorm1d(HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 10)
        )
    )
    if initial_state is not None:
        net.load_state_dict(initial_state, strict=not bn)
    q = CLAIM["sampling_rate"] if rate is None else rate  # a number, or one rate per record
    sigma = CLAIM["noise_multiplier"] * noise
    gen = torch.Generator().manual_seed(seed)
    x_all, y_all = dataset.features.float().reshape(len(dataset), -1), dataset.labels.long()
    params = {k: p.detach().clone() for k, p in net.named_parameters()}
    buffers = {k: b.detach().clone() for k, b in net.named_buffers()}

    def loss(p, x, y):
        out = functional_call(net, (p, buffers), (x.unsqueeze(0),))
        return nn.functional.cross_entropy(out, y.unsqueeze(0))

    per_example = vmap(grad(loss), in_dims=(None, 0, 0))
    for _ in range(CLAIM["num_steps"]):
        mask = torch.rand(len(x_all), generator=gen) < q
        x, y = x_all[mask], y_all[mask]
        if normaliser == "realised" and not len(x):
            continue  # nothing to divide by: the empty lot's step, and its noise, skipped (as Opacus #420 would)
        if bn and len(x) > 1:  # BatchNorm's running statistics follow the data, un-noised
            net.train()
            with torch.no_grad():
                functional_call(net, (params, buffers), (x,))
        if len(x):
            g = per_example(params, x, y)
            norms = torch.sqrt(sum(t.reshape(len(x), -1).pow(2).sum(1) for t in g.values()))
            factor = (CLIP / norms).clamp(max=1.0) if clip else torch.ones_like(norms)
            summed = {k: (t * factor.view(-1, *[1] * (t.dim() - 1))).sum(0) for k, t in g.items()}
        else:
            summed = {k: torch.zeros_like(p) for k, p in params.items()}
        noise_gen = torch.Generator().manual_seed(1234) if noise_seed == "constant" else gen
        denominator = {"expected": EXPECTED_LOT, "realised": max(1, len(x)), "dataset": q * len(x_all)}[normaliser]
        for k in params:
            z = torch.randn(params[k].shape, generator=noise_gen) * sigma * CLIP
            if not noise_on_bias and k.endswith("bias"):
                z = torch.zeros_like(z)
            params[k] = params[k] - LR * (summed[k] + z) / denominator
    with torch.no_grad():
        for k, p in net.named_parameters():
            p.copy_(params[k])
    return net.eval()


def train(dataset, *, seed, initial_state=None):
    """Correct: Poisson lots, per-example clipping, fresh noise σC, constant normaliser."""
    return _dpsgd(dataset, seed=seed, initial_state=initial_state)


def train_no_noise(dataset, *, seed, initial_state=None):
    return _dpsgd(dataset, seed=seed, initial_state=initial_state, noise=0.0)


def train_realised_lot(dataset, *, seed, initial_state=None):
    return _dpsgd(dataset, seed=seed, initial_state=initial_state, normaliser="realised")


def train_dataset_size(dataset, *, seed, initial_state=None):
    return _dpsgd(dataset, seed=seed, initial_state=initial_state, normaliser="dataset")


def train_constant_noise_seed(dataset, *, seed, initial_state=None):
    return _dpsgd(dataset, seed=seed, initial_state=initial_state, noise_seed="constant")


def train_unnoised_bias(dataset, *, seed, initial_state=None):
    return _dpsgd(dataset, seed=seed, initial_state=initial_state, noise_on_bias=False)


def train_class_balanced(dataset, *, seed, initial_state=None):
    """Sampler bug: class-balanced rates q·n/(K·n_c), capped at 1, accounted as q (Opacus #813)."""
    labels = dataset.labels
    counts = torch.bincount(labels, minlength=10).float()
    present = int((counts > 0).sum())
    rates = (CLAIM["sampling_rate"] * len(labels) / (present * counts[labels])).clamp(max=1.0)
    return _dpsgd(dataset, seed=seed, initial_state=initial_state, rate=rates)


def train_no_initial_state(dataset, *, seed):
    return _dpsgd(dataset, seed=seed)
