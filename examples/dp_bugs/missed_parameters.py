"""A trainable parameter missed by the per-sample machinery: updated from the plain gradient.

The bug, as shipped in Opacus (issue #820: LoRA adapters silently updated wrongly; PR #729: a
stale list of trainable parameters under ghost clipping): the per-sample gradient machinery
works from a list of parameters taken when it was set up, and a parameter made trainable later
(an adapter, a bias) is missing from it. Its gradient is not clipped per example and gets no
noise, yet the optimizer still updates it from the ordinary batch gradient. The loop is the
reference ``_dpsgd.py`` with one override: the output layer's bias (``3.bias``) is updated by
the lot's plain mean gradient.

Leak: the bias moves deterministically with the lot's labels (no noise), so a record's presence
shows in it: ε unbounded against the claimed ε ≈ 0.97. A grey-box replay sees the update reach
the parameter without Gaussian noise.
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

from _dpsgd import CLAIM, DPSGD, Dataset, Grads, State, model

__all__ = ["BUG", "CLAIM", "REPORTED", "model", "train"]

BUG = "trainable parameter missed by the per-sample machinery"
REPORTED = "Opacus issue #820 (LoRA parameters updated wrongly) and PR #729 (stale trainable-parameter list)"

MISSED = "3.bias"  # made trainable after the per-sample machinery listed the parameters


class MissedParameters(DPSGD):
    def apply(self, net: nn.Module, release: Grads, x: torch.Tensor, y: torch.Tensor) -> None:
        release = dict(release)
        bias = dict(net.named_parameters())[MISSED]
        if len(x):  # BUG: the missed parameter's update is the lot's plain mean gradient
            (release[MISSED],) = torch.autograd.grad(nn.functional.cross_entropy(net(x), y), [bias])
        else:
            release[MISSED] = torch.zeros_like(bias)
        super().apply(net, release, x, y)


def train(dataset: Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
    """DP-SGD whose output bias is updated without clipping or noise (claim: q = 0.1, σ = 3, T = 50)."""
    return MissedParameters().train(dataset, seed=seed, initial_state=initial_state)
