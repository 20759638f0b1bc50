"""Normalisation by the realised lot size: Opacus's ``expected_batch_size`` set to ``len(batch)`` each step.

The bug: with Poisson lots the lot size varies, and the author "corrects" Opacus's averaging by
setting ``optimizer.expected_batch_size = len(x)`` before every step — exactly the change asked
for in Opacus issue #420 (pytorch/opacus). An empty lot then has nothing to divide by, so its
step, and the noise it would add, is skipped. Both leak: the normaliser depends on whether the
canary was sampled (the noisy sum is divided by |B| + 1 instead of |B|, visible in the norm of
the released noise, about 4 810 coordinates), and a lot without the canary adds no noise at all
when the rest of the lot is empty. The private quantity that Opacus's accountant covers is the
noisy *sum* divided by a public constant (Yousefpour et al. 2021, "Opacus: User-Friendly
Differential Privacy Library in PyTorch"), and it covers it only while the normaliser does not
depend on the data.

Leak (last iterate, linear loss as in Steinke, Jagielski, Nasr & Zhang 2024, "The Last Iterate
Advantage"): on a dataset of the canary alone, every lot without it is skipped, so the final
model equals the initial state iff the canary was never sampled: Pr = 0.9^50 ≈ 0.0052 with it,
1 without, so ε ≥ ln(1/0.0052) ≈ 5.3 at δ = 0 (and in the other direction the model moves with
probability 0.995 against 0: unbounded at δ = 1e-5), against the claimed ε ≈ 0.97.
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

from _dpsgd import CLAIM, Dataset, State, model
from _opacus_dpsgd import OpacusDPSGD

__all__ = ["BUG", "CLAIM", "REPORTED", "model", "train"]

BUG = "realised-lot normalisation"
REPORTED = "Opacus issue #420 (pytorch/opacus)"


class RealisedLotSize(OpacusDPSGD):
    def takes_step(self, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> bool:
        if len(x) == 0:
            return False  # BUG: nothing to divide by, so the empty lot's step — and its noise — is skipped
        optimizer.expected_batch_size = len(x)  # BUG: the realised lot size, not the public expected one
        return True


def train(dataset: Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
    """Opacus DP-SGD normalised by the realised lot size (claim: q = 0.1, σ = 3, T = 50)."""
    return RealisedLotSize().train(dataset, seed=seed, initial_state=initial_state)
