"""A class-balanced ``WeightedRandomSampler`` accounted at the rate 1/(number of batches).

The bug: to balance classes, the author draws each lot of 144 with replacement from a
``WeightedRandomSampler`` whose weight for an example is 1/(size of its class), and accounts at
q = 1/len(data_loader) = 0.1, the rate Opacus derives from the number of batches. The real
probability that an example is drawn depends on its class: an example of a rare class is drawn
144/(K·n_c) times per lot on average (K classes present, n_c examples in its class) — a canary
alone in its class is in *every* lot, many times over, and each copy is clipped separately. The
rate can be off by orders of magnitude. Reported in Opacus issue #813 (pytorch/opacus).

Leak (last iterate, Steinke, Jagielski, Nasr & Zhang 2024, "The Last Iterate Advantage", linear
loss): a canary alone in its class among K = 10 classes is drawn Binomial(144, 1/10) ≈ 14.4 times
in each of the 50 lots: about 720·1 + N(0, 50·3²) against N(0, 50·3²), μ ≈ 34-GDP, ε unbounded
for practical purposes (hundreds) at δ = 1e-5, against the claimed ε ≈ 0.97. On a dataset of the
canary alone, every draw is the canary.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

if (
    _here := str(Path(__file__).resolve().parent)
) not in sys.path:  # the path form loads this file alone; its helpers live beside it
    sys.path.insert(0, _here)

from _dpsgd import CLAIM, DPSGD, Dataset, State, model

__all__ = ["BUG", "CLAIM", "REPORTED", "model", "train"]

BUG = "weighted sampler, rate from the number of batches"
REPORTED = "Opacus issue #813 (pytorch/opacus)"


class WeightedSampler(DPSGD):
    def lots(self, labels: torch.Tensor, generator: torch.Generator) -> Iterator[torch.Tensor]:
        if len(labels) == 0:
            yield from (labels.new_zeros(0) for _ in range(self.steps))
            return
        counts = torch.bincount(labels)
        weights = 1.0 / counts[labels].double()  # class-balanced: a rare class weighs more
        for _ in range(self.steps):
            # BUG: 144 draws with replacement, weighted by class; the claim says Poisson at q = 0.1
            yield torch.multinomial(weights, int(self.lot_size), replacement=True, generator=generator)


def train(dataset: Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
    """DP-SGD on class-balanced weighted lots, claimed as Poisson q = 0.1 (σ = 3, T = 50)."""
    return WeightedSampler().train(dataset, seed=seed, initial_state=initial_state)
