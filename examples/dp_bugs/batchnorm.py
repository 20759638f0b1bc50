"""BatchNorm in train mode: batch statistics mix the lot's examples, running statistics leave unnoised.

The bug: the author's model normalises the image rows with ``nn.BatchNorm1d`` and trains it in
train mode. Two leaks follow. (1) The forward pass normalises each example with the lot's mean
and variance, so "example i's gradient" depends on every other example of the lot: clipping it
to C no longer bounds one example's influence on the sum. (2) BatchNorm's running mean and
variance are updated from each lot's raw statistics, with no clipping and no noise, and are
part of the released ``state_dict``: a plain moving average of the private data. Opacus refuses
BatchNorm for this reason (its ``ModuleValidator`` asks for GroupNorm instead; Yousefpour et al.
2021, "Opacus: User-Friendly Differential Privacy Library in PyTorch"); a hand-written loop, as
here, or one that computes per-example gradients with a Jacobian of the batch losses, does not.
Among the DP-SGD pitfalls discussed by Ponomareva, Hazimeh, Kurakin, Xu, Denison, McMahan,
Vassilvitskii, Chien & Thakurta 2023 ("How to DP-fy ML: A Practical Guide to Machine Learning
with Differential Privacy"), which recommend normalisation layers that do not mix examples.

Leak: the running statistics are a deterministic function of the sampled records: on a dataset
of the canary alone, ``running_mean`` keeps its initial value iff the canary was never sampled
(probability 0.9^50 ≈ 0.005), and otherwise equals a known function of the canary's pixels. The
last iterate's ε is unbounded, against the claimed ε ≈ 0.97.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

if (
    _here := str(Path(__file__).resolve().parent)
) not in sys.path:  # the path form loads this file alone; its helpers live beside it
    sys.path.insert(0, _here)

from _dpsgd import CLAIM, DPSGD, FEATURES, HIDDEN, Dataset, Grads, State

__all__ = ["BUG", "CLAIM", "REPORTED", "model", "train"]

BUG = "BatchNorm in train mode"
REPORTED = (
    "Opacus ModuleValidator (Yousefpour et al. 2021), which rejects BatchNorm; Ponomareva et al. 2023, How to DP-fy ML"
)


def model() -> nn.Module:
    """The digits MLP with a BatchNorm over the 8 image rows (8 channels of 8 pixels)."""
    # BUG: BatchNorm: statistics over the lot in training, running statistics kept without noise
    return nn.Sequential(
        nn.Flatten(),
        nn.Unflatten(1, (8, 8)),
        nn.BatchNorm1d(8),
        nn.Flatten(),
        nn.Linear(FEATURES, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, 10),
    )


class BatchNormDPSGD(DPSGD):
    def build(self) -> nn.Module:
        return model()

    def per_example_grads(self, net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Grads:
        params = dict(net.named_parameters())
        if len(x) == 0:
            return {k: p.new_zeros((0, *p.shape)) for k, p in params.items()}
        # BUG: one forward of the whole lot in train mode (lot statistics; running stats updated),
        # then each loss's gradient — every row depends on the lot's other examples
        losses = nn.functional.cross_entropy(net(x), y, reduction="none")
        rows = torch.autograd.grad(losses, list(params.values()), grad_outputs=torch.eye(len(x)), is_grads_batched=True)
        return dict(zip(params, rows, strict=True))


def train(dataset: Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
    """DP-SGD on a model with BatchNorm in train mode (claim: q = 0.1, σ = 3, T = 50)."""
    return BatchNormDPSGD().train(dataset, seed=seed, initial_state=initial_state)
