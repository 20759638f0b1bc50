"""Layers outside the private optimizer: a head trained by the plain gradient beside DP-SGD.

The bug: a fine-tuning set-up in the PEFT style — the author builds the private optimizer over
the trainable body, then unfreezes the classification head ("it is small, and it must adapt")
and trains it with an ordinary optimizer on the same lots. The body's update is clipped and
noised; the head's is the lot's plain mean gradient: no clipping and no noise. Any parameter
missing from the private optimizer releases its gradients in the clear. With Opacus the same
happens to a parameter unfrozen after ``make_private``: the engine's hooks and optimizer were
built for what was trainable then. Private fine-tuning trains the adapters *and* any new head
inside the private optimizer (Yu, Naik, Backurs, Gopi, Inan, Kamath, Kulkarni, Lee, Manoel,
Wutschitz, Yekhanin & Zhang 2022, "Differentially Private Fine-tuning of Language Models"); the
class is listed in this suite's issue on the conformance battery as shipped in LoRA/PEFT set-ups.

Leak: the head moves deterministically with the data (no noise): on a dataset of the canary
alone the head is exactly its initial value iff the canary was never sampled (probability
0.9^50 ≈ 0.005), so the last iterate's ε is unbounded (present vs absent is told apart with
probability 0.995 at δ = 0), against the claimed ε ≈ 0.97.
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

BUG = "head trained outside the private optimizer"
REPORTED = (
    "LoRA/PEFT set-ups with a head outside the DP optimizer; the correct "
    "recipe: Yu et al. 2022, Differentially Private Fine-tuning of Language "
    "Models"
)

HEAD = "3."  # the last Linear of the MLP: unfrozen after the private optimizer was built


class FrozenLayers(DPSGD):
    def apply(self, net: nn.Module, release: Grads, x: torch.Tensor, y: torch.Tensor) -> None:
        head = {k: p for k, p in net.named_parameters() if k.startswith(HEAD)}
        release = dict(release)
        if len(x):  # BUG: the head's update is the lot's plain mean gradient: no clipping, no noise
            release.update(
                zip(head, torch.autograd.grad(nn.functional.cross_entropy(net(x), y), list(head.values())), strict=True)
            )
        else:
            release.update({k: torch.zeros_like(p) for k, p in head.items()})
        super().apply(net, release, x, y)


def train(dataset: Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
    """DP-SGD on the body, plain SGD on the head (claim: q = 0.1, σ = 3, T = 50)."""
    return FrozenLayers().train(dataset, seed=seed, initial_state=initial_state)
