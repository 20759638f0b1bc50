"""Augmentation copies clipped separately: each of k augmented views counts as one example.

The bug: every example of the lot is expanded into k = 8 randomly shifted copies (data
augmentation, e.g. "augmentation multiplicity"), and the copies go through per-example clipping
as if they were 8 different people; the noise stays σC and the normaliser becomes 8·L. One
person's contribution is then the sum of 8 clipped gradients, of norm up to 8C: the sensitivity
is k·C, not C. (Averaging the k copies' gradients *before* clipping is the correct way: De,
Berrada, Hayes, Smith & Balle 2022, "Unlocking High-Accuracy Differentially Private Image
Classification through Scale", "augmentation multiplicity".)

Leak (last iterate, Steinke, Jagielski, Nasr & Zhang 2024, "The Last Iterate Advantage", linear
loss, copies aligned): Binomial(50, 0.1)·8 + N(0, 50·3²) against N(0, 50·3²): ε ≈ 19 at
δ = 1e-5, against the claimed ε ≈ 0.97.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import torch
from torch import nn

if (
    _here := str(Path(__file__).resolve().parent)
) not in sys.path:  # the path form loads this file alone; its helpers live beside it
    sys.path.insert(0, _here)

from _dpsgd import CLAIM, DPSGD, Dataset, State, model

__all__ = ["BUG", "CLAIM", "REPORTED", "model", "train"]

BUG = "augmentation copies clipped separately"
REPORTED = (
    "De et al. 2022, Unlocking High-Accuracy Differentially Private Image "
    "Classification through Scale (augmentation multiplicity: average the "
    "copies, then clip)"
)

COPIES = 8


class AugmentationCopies(DPSGD):
    lot_size = DPSGD.lot_size * COPIES  # BUG: the normaliser counts copies, so the noise per person shrinks k-fold

    def inputs(self, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        images = x.reshape(len(x), 8, 8).repeat_interleave(COPIES, dim=0)
        shifts = torch.randint(-1, 2, (len(images), 2), generator=generator)
        views = images.clone()
        for a, b in itertools.product((-1, 0, 1), repeat=2):  # each view shifted by up to one pixel
            pick = (shifts[:, 0] == a) & (shifts[:, 1] == b)
            views[pick] = torch.roll(images[pick], (a, b), dims=(1, 2))
        # BUG: the k views of one example become k "examples", each clipped to C on its own
        return views.reshape(len(views), *x.shape[1:]), y.repeat_interleave(COPIES)


def train(dataset: Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
    """DP-SGD whose 8 augmented copies per example are clipped separately (claim: q = 0.1, σ = 3, T = 50)."""
    return AugmentationCopies().train(dataset, seed=seed, initial_state=initial_state)
