"""Correct DP-SGD with Opacus 1.6's ghost clipping (fast gradient clipping) instead of per-sample hooks.

The loop of ``_opacus_dpsgd.py`` (Poisson lots at q = 0.1 from ``DPDataLoader``, noise σC with
σ = 3 and C = 1, the public expected lot size 144, exactly 50 steps, empty lots included) with
``make_private(grad_sample_mode="ghost")``: per-example gradient norms are computed without
materialising per-example gradients (Li, Tramèr, Liang & Hashimoto 2022, "Large Language Models
Can Be Strong Differentially Private Learners", ghost clipping), through the criterion Opacus
wraps (``DPLossFastGradientClipping``), whose backward runs the two passes. Same claim and
final-model privacy as ``correct_plain.py``; a battery must never flag it.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch
from torch import nn

if (
    _here := str(Path(__file__).resolve().parent)
) not in sys.path:  # the path form loads this file alone; its helpers live beside it
    sys.path.insert(0, _here)

from _dpsgd import CLAIM, Dataset, State, model, noise_seed
from _opacus_dpsgd import OpacusDPSGD, _quiet

__all__ = ["BUG", "CLAIM", "REPORTED", "model", "train"]

BUG = ""
REPORTED = "the reference: Opacus 1.6 fast gradient clipping (grad_sample_mode='ghost')"


class OpacusGhost(OpacusDPSGD):
    def train(self, dataset: torch.utils.data.Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
        from opacus import PrivacyEngine

        with torch.random.fork_rng():
            torch.manual_seed(seed)
            net = model()
        if initial_state is not None:
            net.load_state_dict(dict(initial_state))
        optimizer = torch.optim.SGD(net.parameters(), lr=self.learning_rate)
        with warnings.catch_warnings(), _quiet("opacus.data_loader"):
            warnings.simplefilter("ignore")
            private, optimizer, criterion, loader = PrivacyEngine(accountant="prv").make_private(
                module=net,
                optimizer=optimizer,
                criterion=nn.CrossEntropyLoss(),
                data_loader=self.loader(dataset, seed),
                noise_multiplier=self.noise_multiplier,
                max_grad_norm=self.clip_norm,
                poisson_sampling=False,
                grad_sample_mode="ghost",
                noise_generator=torch.Generator().manual_seed(noise_seed(seed)),
            )
            optimizer.expected_batch_size = self.lot_size  # public constant, not int(len(dataset) · q)
            private.train()
            for x, y in self.batches(loader):
                optimizer.zero_grad()
                loss = criterion(private(x), y)
                loss.backward()
                optimizer.step()
        return net.eval()


def train(dataset: Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
    """Correct Opacus DP-SGD with ghost clipping (q = 0.1, σ = 3, C = 1, T = 50)."""
    return OpacusGhost().train(dataset, seed=seed, initial_state=initial_state)
