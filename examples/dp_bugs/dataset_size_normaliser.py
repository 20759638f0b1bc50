"""Opacus's default normaliser and rate: ``int(len(dataset) · q)`` and q = 1/len(data_loader).

The bug: the author follows Opacus's tutorial — ``DataLoader(dataset, batch_size=144)``,
``make_private(..., poisson_sampling=True)``, 5 epochs of ``for x, y in loader`` — and keeps
the defaults: ``make_private`` sets the sampling rate to 1/len(data_loader) and divides the noisy
sum by ``expected_batch_size = int(len(dataset) · sample_rate)``. Both depend on the private
dataset's size. On the author's 1437 training digits that is q = 0.1, a normaliser of 143 and
T = 50 (the claim); on a dataset of n ≤ 144 records it is one batch per epoch, so q = 1, T = 5
steps and the normaliser is n itself — the norm of the released noise, σC·√d/n over d = 4 810
coordinates, tells n from n − 1. Reported in Opacus issues #819 and #571 (pytorch/opacus):
the floor-based normalisation does not match the sampled-Gaussian accounting in small,
high-dimensional settings (#571: ε reported ≈ 1.2, leakage measured ≈ 2.5 with 2–3 samples).

Leak (last iterate, Steinke, Jagielski, Nasr & Zhang 2024, "The Last Iterate Advantage", linear
loss): on n ≤ 144 records the canary is in all 5 lots: 5·1 + N(0, 5·3²) against N(0, 5·3²),
ε ≈ 3.1 at δ = 1e-5 from the gradient alone; the normaliser n against n − 1 adds a scale
difference of 1/(n−1) in the noise's norm, measured to ±√(2/4810) ≈ 2%, so for n ≤ 20 it tells
the datasets apart almost surely — against the claimed ε ≈ 0.97.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import nn

if (
    _here := str(Path(__file__).resolve().parent)
) not in sys.path:  # the path form loads this file alone; its helpers live beside it
    sys.path.insert(0, _here)

from _dpsgd import CLAIM, EXPECTED_LOT_SIZE, Dataset, State, model, noise_seed
from _opacus_dpsgd import OpacusDPSGD

__all__ = ["BUG", "CLAIM", "REPORTED", "model", "train"]

BUG = "dataset-size normaliser (Opacus default)"
REPORTED = "Opacus issues #819 and #571 (pytorch/opacus)"

EPOCHS = 5  # 10 batches of 144 per epoch on the author's 1437 digits: the claimed T = 50


class DatasetSizeNormaliser(OpacusDPSGD):
    def loader(self, dataset: torch.utils.data.Dataset, seed: int) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(
            dataset, batch_size=EXPECTED_LOT_SIZE, generator=torch.Generator().manual_seed(seed)
        )

    def make_private(
        self, net: nn.Module, optimizer: torch.optim.Optimizer, loader: torch.utils.data.DataLoader, seed: int
    ) -> tuple[nn.Module, torch.optim.Optimizer, torch.utils.data.DataLoader]:
        from opacus import PrivacyEngine

        # BUG: Opacus's defaults: sample_rate = 1/len(loader), expected_batch_size = int(len(dataset) · sample_rate)
        return PrivacyEngine(accountant="prv").make_private(
            module=net,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=self.noise_multiplier,
            max_grad_norm=self.clip_norm,
            poisson_sampling=True,
            noise_generator=torch.Generator().manual_seed(noise_seed(seed)),
        )

    def batches(
        self, loader: Iterable[tuple[torch.Tensor, torch.Tensor]]
    ) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        return itertools.chain.from_iterable(
            itertools.repeat(loader, EPOCHS)
        )  # BUG: T = EPOCHS · len(loader) depends on the data


def train(dataset: Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
    """Opacus DP-SGD with make_private's dataset-size defaults (claim: q = 0.1, σ = 3, T = 50)."""
    return DatasetSizeNormaliser().train(dataset, seed=seed, initial_state=initial_state)
